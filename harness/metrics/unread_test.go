package metrics_test

import (
	"reflect"
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// TestUnreadFamilies: a cache family the profile reads nothing from is listed, sorted,
// whether it has samples or only HELP and TYPE lines; read families, their _created
// siblings, a histogram read by its _sum and families that speak of no cache are not; a
// snapshot over two URLs lists the union once.
func TestUnreadFamilies(t *testing.T) {
	p := Profile{Name: "x",
		Counters:  map[Counter][]Selector{GPUPrefixHits: MustSelectors("e:prefix_cache_hits_total"), LoadSeconds: MustSelectors("e:load_seconds_sum")},
		Gauges:    map[Gauge][]Selector{},
		CacheInfo: "e:cache_config_info",
	}
	text := `# TYPE e:prefix_cache_hits_total counter
e:prefix_cache_hits_total 5
# TYPE e:prefix_cache_hits_created gauge
e:prefix_cache_hits_created 1.7e9
# TYPE e:load_seconds histogram
e:load_seconds_bucket{le="+Inf"} 1
e:load_seconds_sum 0.5
e:load_seconds_count 1
# TYPE e:cache_config_info gauge
e:cache_config_info{block_size="16"} 1
# TYPE e:tier_read_bytes_total counter
e:tier_read_bytes_total{tier="2:fs"} 4096
# HELP e:evicted_tokens_total Tokens evicted.
# TYPE e:evicted_tokens_total counter
# TYPE e:num_requests_running gauge
e:num_requests_running 0
# TYPE e:KV_Prefetch_Total counter
e:KV_Prefetch_Total 1
`
	want := []string{"e:KV_Prefetch_Total", "e:evicted_tokens_total", "e:tier_read_bytes_total"}
	if got := p.UnreadFamilies(mustParse(t, text, "a")); !reflect.DeepEqual(got, want) {
		t.Fatalf("unread %q, want %q", got, want)
	}
	other := "# TYPE e:disk_store_total counter\ne:disk_store_total 1\n# TYPE e:tier_read_bytes_total counter\ne:tier_read_bytes_total 1\n"
	s := p.Snapshot(mustParse(t, text, "a"), mustParse(t, other, "b"))
	if want := []string{"e:KV_Prefetch_Total", "e:disk_store_total", "e:evicted_tokens_total", "e:tier_read_bytes_total"}; !reflect.DeepEqual(s.UnreadFamilies, want) {
		t.Fatalf("merged unread %q, want %q", s.UnreadFamilies, want)
	}
	if got := p.UnreadFamilies(mustParse(t, "# TYPE e:prefix_cache_hits_total counter\ne:prefix_cache_hits_total 5\n", "c")); got == nil || len(got) != 0 {
		t.Fatalf("nothing unread: %#v, want an empty list", got)
	}
}

package metrics_test

import (
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// TestUnattributed: a series of a family the profile splits by a tier label, under a value
// no selector matches, is reported with its amount and unit, summed over URLs; families the
// profile does not split by that label, and known values, are not.
func TestUnattributed(t *testing.T) {
	p := Profile{Name: "vllm", Counters: map[Counter][]Selector{
		CachedFromHost:  MustSelectors(`c_total{source="host"}`),
		CachedFromDisk:  MustSelectors(`c_total{source="disk"}`),
		DiskStagedBytes: MustSelectors(`r_bytes_total{tier=~"[0-9]+:fs"}`),
		PromptTokens:    MustSelectors(`p_total`),
	}}
	text := `# TYPE c_total counter
c_total{engine="0",source="host"} 100
c_total{engine="0",source="foo"} 11264
c_total{engine="1",source="foo"} 10
# TYPE r_bytes_total counter
r_bytes_total{tier="1:fs"} 4096
r_bytes_total{tier="2:obj"} 8192
# TYPE p_total counter
p_total{source="anything"} 5
`
	s := p.Snapshot(mustParse(t, text, "a"), mustParse(t, text, "b"))
	want := []Unattributed{
		{Family: "c_total", Label: "source", Value: "foo", Amount: 2 * 11274, Unit: "tokens", Model: "vllm"},
		{Family: "r_bytes_total", Label: "tier", Value: "2:obj", Amount: 2 * 8192, Unit: "bytes", Model: "vllm"},
	}
	if len(s.Unattributed) != len(want) {
		t.Fatalf("unattributed %+v, want %+v", s.Unattributed, want)
	}
	for i := range want {
		if s.Unattributed[i] != want[i] {
			t.Errorf("unattributed[%d] = %+v, want %+v", i, s.Unattributed[i], want[i])
		}
	}
	if r := s.Counters[CachedFromHost]; r.Value != 200 {
		t.Errorf("host %+v: a known source is read as before", r)
	}
	if r := s.Counters[CachedFromDisk]; r.Present {
		t.Errorf("disk %+v: a source not served is absent, not 0", r)
	}
}

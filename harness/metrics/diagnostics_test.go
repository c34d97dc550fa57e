package metrics_test

import (
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// TestOffloadDiagnosticsOptional: vLLM's newer offload diagnostics read when served (the
// lookup delays from their histograms' sums, cached tokens by source where a source is
// served), and stay absent, never 0, on a server without them. The pinned-usage gauge is read as served.
func TestOffloadDiagnosticsOptional(t *testing.T) {
	const newer = `# TYPE vllm:kv_offload_stores_skipped_total counter
vllm:kv_offload_stores_skipped_total{engine="0"} 96
# TYPE vllm:kv_offload_allocation_failure_total counter
vllm:kv_offload_allocation_failure_total{engine="0"} 3
# TYPE vllm:kv_offload_lookup_sync_delay_seconds histogram
vllm:kv_offload_lookup_sync_delay_seconds_bucket{engine="0",le="0.01"} 4
vllm:kv_offload_lookup_sync_delay_seconds_bucket{engine="0",le="+Inf"} 5
vllm:kv_offload_lookup_sync_delay_seconds_sum{engine="0"} 0.25
vllm:kv_offload_lookup_sync_delay_seconds_count{engine="0"} 5
# TYPE vllm:kv_offload_cpu_cache_usage_perc gauge
vllm:kv_offload_cpu_cache_usage_perc{engine="0"} 0.02
# TYPE vllm:prompt_tokens_cached_by_source_total counter
vllm:prompt_tokens_cached_by_source_total{engine="0",source="host"} 1200
`
	p := mustProfile(t, "vllm")
	snap := p.Snapshot(mustParse(t, newer, "newer"))
	want := map[Counter]float64{StoresSkipped: 96, AllocationFailures: 3, LookupSyncSeconds: 0.25, CachedFromHost: 1200}
	for c, v := range want {
		if r := snap.Counters[c]; !r.Present || r.Value != v {
			t.Errorf("%s = %+v, want %v", c, r, v)
		}
	}
	// A source without a series is absent: whether the connector can ever name it is not in
	// the exposition (LMCache never says host), so it is not a lazy 0.
	for _, c := range []Counter{CachedFromDevice, CachedFromDisk, CachedFromP2P, CachedExternalUnspecified} {
		if r := snap.Counters[c]; r.Present {
			t.Errorf("%s = %+v, want absent", c, r)
		}
	}
	if r := snap.Counters[LookupAsyncSeconds]; r.Present {
		t.Errorf("async lookup delay %+v, want absent", r)
	}
	if g := snap.Gauges[OffloadPinnedUsage]; !g.Present || g.Value != 0.02 {
		t.Errorf("pinned usage %+v", g)
	}

	old := p.Snapshot(mustParse(t, "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total 5\n", "older"))
	for _, c := range []Counter{StoresSkipped, AllocationFailures, LookupSyncSeconds, LookupAsyncSeconds, CachedFromDevice, CachedFromHost, CachedFromDisk} {
		if r := old.Counters[c]; r.Present {
			t.Errorf("older server: %s = %+v, want absent", c, r)
		}
	}
}

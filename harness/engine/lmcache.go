package engine

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// LMCache is vLLM with the LMCache connector (LMCACHE_LOCAL_CPU, LMCACHE_MAX_LOCAL_CPU_SIZE).
var LMCache = &Definition{
	Name:         "lmcache",
	Description:  "vLLM with the LMCache connector's local CPU tier (LMCACHE_MAX_LOCAL_CPU_SIZE GB)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "LMCACHE_MAX_LOCAL_CPU_SIZE",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool from vllm:cache_config_info, else the scenario; the CPU tier from the scenario (LMCache does not report it to vLLM)",
	Tokenize:     TokenizeCount,
	CachedTokens: VLLM.CachedTokens,
	Attribution:  ByCounters,
	Verdicts: []Support{
		{"cpu_reload", "LMCache hit tokens covering the prompt (no byte counters: the reload rests on hits alone)"},
		{"gpu_hit", "vLLM GPU prefix-cache hits beyond the shared prefix, no LMCache hits"},
		{"partial", "hits from both, or hits well below the prompt"},
		{"recompute", "no hits beyond the shared prefix"},
	},
	Proves:    "every verdict from hit counters; LMCache counts no bytes, so a reload is not confirmed by data moved, and with tensor parallelism each rank counts the same tokens",
	Diagnoses: []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	profile:   lmcacheProfile,
}

func init() { register(LMCache) }

// lmcacheProfile is vLLM's names with LMCache's own counters as the evidence for the offload
// tier where it has them. LMCache counts no bytes or transfer seconds for its CPU tier, so
// those stay absent unless vLLM serves them. With tensor parallelism each LMCache worker
// counts the same tokens under its own worker_id; the sum then grows with TP size.
func lmcacheProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := vllmProfile()
	p.Name = "lmcache"
	p.Counters[metrics.ExternalPrefixQueries] = sel("lmcache:num_requested_tokens_total", "vllm:external_prefix_cache_queries_total")
	p.Counters[metrics.ExternalPrefixHits] = sel("lmcache:num_hit_tokens_total", "vllm:external_prefix_cache_hits_total")
	p.Counters[metrics.StoreTokens] = sel("lmcache:num_stored_tokens_total")
	return p
}

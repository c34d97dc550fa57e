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
		{verdict.CPUReload, "LMCache hit tokens covering the prompt (no byte counters: the reload rests on hits alone)"},
		{verdict.GPUHit, "vLLM GPU prefix-cache hits beyond the shared prefix, no LMCache hits"},
		{verdict.Partial, "hits from both, or hits well below the prompt"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
	},
	Proves:       "every verdict from hit counters; LMCache counts no bytes, so a reload is not confirmed by data moved. With tensor parallelism each rank (worker_id) counts the same tokens: kvbench takes the max over ranks, never their sum",
	Diagnoses:    []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:     "lmcache:num_hit_tokens_total (external hits, max over worker_id) with vLLM's vllm:prefix_cache_hits_total (GPU hits); lmcache:num_stored_tokens_total shows stores",
	Pitfalls:     "LMCache's families reach vLLM's /metrics only when PROMETHEUS_MULTIPROC_DIR is set at launch; each TP rank reports the same tokens under its own worker_id",
	Families:     "lmcache:",
	FamiliesHint: "no lmcache:* family is served: PROMETHEUS_MULTIPROC_DIR must be set when vLLM is launched, or LMCache's metrics never reach vLLM's /metrics; external hits fall back to vLLM's own counters",
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      noTwinLMCache,
	TokenIDsField: "return_token_ids",

	profile: lmcacheProfile,
}

func init() { register(LMCache) }

// lmcacheProfile is vLLM's names with LMCache's own counters as the evidence for the offload
// tier where it has them. LMCache counts no bytes or transfer seconds for its CPU tier, so
// those stay absent unless vLLM serves them. Its families carry model_name, worker_id and
// role; with tensor parallelism each rank counts the same tokens under its own worker_id, so
// kvbench takes the max over worker_id (summing would multiply by the TP size).
func lmcacheProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := vllmProfile()
	p.Name = "lmcache"
	p.Counters[metrics.ExternalPrefixQueries] = sel("lmcache:num_requested_tokens_total", "vllm:external_prefix_cache_queries_total")
	p.Counters[metrics.ExternalPrefixHits] = sel("lmcache:num_hit_tokens_total", "vllm:external_prefix_cache_hits_total")
	p.Counters[metrics.StoreTokens] = sel("lmcache:num_stored_tokens_total")
	p.Counters[metrics.HostEvictions] = sel("lmcache:local_cpu_evict_count_total")
	// LMCache's view of vLLM's own hits: a fallback where vLLM's family is missing.
	p.Counters[metrics.GPUPrefixHits] = append(p.Counters[metrics.GPUPrefixHits], sel("lmcache:num_vllm_hit_tokens_total")...)
	p.Gauges[metrics.HostTierUsageBytes] = sel("lmcache:local_cache_usage")
	p.RankLabels = map[string]string{}
	for _, f := range []string{"lmcache:num_requested_tokens_total", "lmcache:num_hit_tokens_total",
		"lmcache:num_stored_tokens_total", "lmcache:num_vllm_hit_tokens_total", "lmcache:local_cpu_evict_count_total"} {
		p.RankLabels[f] = "worker_id"
	}
	return p
}

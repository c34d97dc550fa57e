package engine

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// TRTLLM is TensorRT-LLM's trtllm-serve with KV block reuse and a host tier.
var TRTLLM = &Definition{
	Name:         "trtllm",
	Description:  "TensorRT-LLM (trtllm-serve) with block reuse and a host KV tier (KvCacheConfig.host_cache_size bytes)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "kv_cache_config.host_cache_size",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool and host tier from the scenario's [server] (TensorRT-LLM serves no cache config family); host_cache_size is given in bytes, the scenario takes GiB",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens, where served; trtllm_prompt_cached_tokens_total otherwise",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.TierUnknown, "cached prompt tokens (usage or trtllm_prompt_cached_tokens_total) prove a cache hit; nothing says whether the host or the GPU tier served it"},
	},
	Proves:       "that a replay hit the cache and how much of it, never from which tier: cache_hit_tier_unknown",
	Evidence:     "trtllm_prompt_cached_tokens_total and trtllm_prompt_tokens_total around the replay, and usage's cached tokens",
	Pitfalls:     "no counter separates host from GPU hits; block reuse needs enable_block_reuse, and the host tier host_cache_size > 0; trtllm_kv_cache_hit_rate is a ratio over all requests, not a tier",
	TierUnknown:  "TensorRT-LLM counts cached prompt tokens but nothing separates host-tier hits from GPU hits, so kvbench can prove a cache hit but not its tier: every replay is cache_hit_tier_unknown",
	Families:     "trtllm_",
	FamiliesHint: "no trtllm_* family is served: this server is not trtllm-serve, or its /metrics is disabled",
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cacheSaltTRTLLM,

	profile: trtllmProfile,
}

func init() { register(TRTLLM) }

// trtllmProfile reads trtllm-serve's /metrics: prompt and cached prompt tokens and two
// ratios. There is no hit counter per tier, so the hit counters stay absent on purpose, and
// no running-requests gauge, so a replay's isolation is noted as unchecked.
func trtllmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	counters := map[metrics.Counter][]metrics.Selector{}
	for _, c := range metrics.Counters() {
		counters[c] = nil
	}
	counters[metrics.PromptTokens] = sel("trtllm_prompt_tokens_total")
	counters[metrics.PromptTokensCached] = sel("trtllm_prompt_cached_tokens_total")
	gauges := map[metrics.Gauge][]metrics.Selector{}
	for _, g := range metrics.Gauges() {
		gauges[g] = nil
	}
	gauges[metrics.KVUsage] = sel("trtllm_kv_cache_utilization")
	return metrics.Profile{Name: "trtllm", Counters: counters, Gauges: gauges, LazyFamilies: map[string]bool{}}
}

package engine

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// LlamaCpp is llama.cpp's llama-server (--metrics) with its host-RAM prompt cache.
var LlamaCpp = &Definition{
	Name:         "llamacpp",
	Description:  "llama.cpp's llama-server with a host-RAM prompt cache (--cache-ram MiB, -np slots)",
	Topology:     capacity.SingleSlot,
	HostTierFlag: "--cache-ram",
	HostTierUnit: "MiB",
	Sizes:        "slot count from /props total_slots; one slot's context (-c / -np) and the host tier (--cache-ram, given in the scenario as cpu_offload_gib) and bytes of prompt state per token from the scenario",
	Tokenize:     TokenizeIDs,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (timings.cache_n)",
	Attribution:  BySlot,
	Verdicts: []Support{
		{verdict.CPUReload, "with one slot, cached tokens beyond the common token prefix with the slot's previous prompt (they can only come from the host-RAM cache)"},
		{verdict.GPUHit, "with one slot, cached tokens within that common prefix (the live slot)"},
		{verdict.Partial, "host-RAM tokens that cover only part of the prompt"},
		{verdict.Recompute, "only the common prefix reused"},
		{verdict.TierUnknown, "more than one slot (-np > 1): the slot's previous prompt is unknown"},
	},
	Proves:                  "with -np 1, where a replay's cached tokens came from, by token ids; it has no tier counters, so with more slots only that tokens were cached (cache_hit_tier_unknown)",
	OneConnectionPerRequest: true,
	ReadsSlots:              true,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cachePromptOff,

	profile: llamacppProfile,
}

func init() { register(LlamaCpp) }

// llamacppProfile reads llama.cpp's server (--metrics). It has no prefix-cache query/hit or
// offload counters; its prompt token counter counts only computed tokens.
func llamacppProfile() metrics.Profile {
	sel := metrics.MustSelectors
	counters := map[metrics.Counter][]metrics.Selector{}
	for _, c := range metrics.Counters() {
		counters[c] = nil
	}
	counters[metrics.PromptTokensLocalCompute] = sel("llamacpp:prompt_tokens_total")
	counters[metrics.PromptTokensCached] = sel("llamacpp:prompt_tokens_cached_total")
	counters[metrics.GenerationTokens] = sel("llamacpp:tokens_predicted_total")
	gauges := map[metrics.Gauge][]metrics.Selector{}
	for _, g := range metrics.Gauges() {
		gauges[g] = nil
	}
	gauges[metrics.KVUsage] = sel("llamacpp:kv_cache_usage_ratio")
	gauges[metrics.RequestsRunning] = sel("llamacpp:requests_processing")
	gauges[metrics.RequestsWaiting] = sel("llamacpp:requests_deferred")
	return metrics.Profile{
		Name:         "llamacpp",
		Counters:     counters,
		Gauges:       gauges,
		LazyFamilies: map[string]bool{},
	}
}

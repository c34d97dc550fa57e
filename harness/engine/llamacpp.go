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
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (b8445, March 2026, and later; timings.cache_n from b6399 is not read)",
	Attribution:  BySlot,
	Verdicts: []Support{
		{verdict.CPUReload, "with one slot, cached tokens beyond the common token prefix with the slot's previous prompt (they can only come from the host-RAM cache)"},
		{verdict.GPUHit, "with one slot, cached tokens within that common prefix (the live slot)"},
		{verdict.Partial, "host-RAM tokens that cover only part of the prompt"},
		{verdict.Recompute, "only the common prefix reused"},
		{verdict.TierUnknown, "more than one slot (-np > 1): the slot's previous prompt is unknown"},
	},
	Proves:                  "with -np 1, where a replay's cached tokens came from, by token ids; it has no tier counters, so with more slots only that tokens were cached (cache_hit_tier_unknown)",
	Evidence:                "usage's cached tokens per request against the slot's common token prefix; llamacpp:prompt_tokens_cached_total (b10424, August 2026, and later) cross-checks them",
	Pitfalls:                "/metrics needs --metrics; the server prints its counters with 6 significant digits, so above 10^6 they move in steps of 10 tokens or more and per-request usage decides; llamacpp:prompt_tokens_cached_total exists only from b10424 and the KV-usage gauges only until b5440; with --cache-ram 0 the RAM cache is off from b6741 (unlimited before); a RAM restore moves the entry out of the cache",
	OneConnectionPerRequest: true,
	ReadsSlots:              true,
	Dialects:                llamacppDialects,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cachePromptOff,
	profile:  llamacppProfile,
}

func init() { register(LlamaCpp) }

// llamacppProfile reads llama.cpp's server (--metrics). It has no prefix-cache query/hit or
// offload counters; its prompt token counter counts only computed tokens. Its series carry
// no labels and are all written on every scrape.
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
	// Removed in b5441 (May 2025): absent on every newer server, never 0.
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

// llamacppDialects are the shapes of llama-server's /metrics, read from ggml-org/llama.cpp's
// tools/server (server_task_result_metrics::to_metrics and its predecessors).
var llamacppDialects = []MetricsDialect{
	{
		Name:     "llamacpp-kv-gauges",
		Upstream: "ggml-org/llama.cpp d52d7819 (#5708) to b5440: llamacpp:kv_cache_usage_ratio and kv_cache_tokens",
		Match:    func(e metrics.Exposition) bool { return e.Has("llamacpp:kv_cache_usage_ratio") },
	},
	{
		Name:     "llamacpp-no-cached-counter",
		Upstream: "ggml-org/llama.cpp before b10424 (decaf508, #26920): no llamacpp:prompt_tokens_cached_total",
		Match: func(e metrics.Exposition) bool {
			return e.Has("llamacpp:prompt_tokens_total") && !e.Has("llamacpp:prompt_tokens_cached_total")
		},
		Note: "this llama-server (before b10424) serves no llamacpp:prompt_tokens_cached_total: cached tokens come from each request's usage alone, and the counter is absent in the record, never 0",
	},
	{
		Name:     "llamacpp-cached-counter",
		Upstream: "ggml-org/llama.cpp from b10424 (decaf508, #26920): llamacpp:prompt_tokens_cached_total",
		Match:    func(e metrics.Exposition) bool { return e.Has("llamacpp:prompt_tokens_cached_total") },
	},
	{
		Name:     "llamacpp-six-digits",
		Upstream: "ggml-org/llama.cpp, every version: values written by a C++ stream at its default 6 significant digits",
		Match:    func(e metrics.Exposition) bool { return e.Quantized() },
		Note:     "this server prints its counters with 6 significant digits and some are above 10^6: they move in steps of 10 tokens or more, so a request's own delta is not countable from them; kvbench uses each request's usage and says so where a counter disagrees",
	},
}

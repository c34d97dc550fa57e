package engine

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// SGLang is SGLang with HiCache, its hierarchical (GPU, host, storage) radix cache.
var SGLang = &Definition{
	Name:         "sglang",
	Description:  "SGLang with HiCache's host tier (--enable-hierarchical-cache, --hicache-size GB or --hicache-ratio)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "--hicache-size",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool and host tier from the scenario's [server] (SGLang serves no cache config family); page size 1 token unless --page-size",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (--enable-cache-report), and per tier in sglext.cached_tokens_details {device, host, storage, storage_backend} when the request sends return_cached_tokens_details",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "the request's own cached_tokens_details: host tokens covering the prompt; sglang:load_back_tokens_total cross-checks"},
		{verdict.GPUHit, "cached_tokens_details: device tokens beyond the shared prefix covering the prompt, none from host"},
		{verdict.Partial, "tokens from both tiers, or cached tokens well below the prompt"},
		{verdict.Recompute, "no cached tokens beyond the shared prefix"},
	},
	Proves:       "every verdict, per request: SGLang names the tier of each request's cached tokens; the load-back and eviction counters cross-check it, and a disagreement is reported in the verdict's notes, never averaged away",
	Diagnoses:    []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:     "sglext.cached_tokens_details of the replay's response (primary); sglang:load_back_tokens_total (host->GPU, the reload), sglang:evicted_tokens_total (GPU->host) and sglang:cached_tokens_total{cache_source} around it (cross-check)",
	Pitfalls:     "metrics need --enable-metrics and usage's cached tokens --enable-cache-report; cached_tokens_total has no cache_source label before the per-tier split, so only the per-request details tell the tiers apart there; sglang:cache_hit_rate mixes device and host hits",
	RequestTier:  true,
	Families:     "sglang:",
	FamiliesHint: "no sglang:* family is served: start the server with --enable-metrics",
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cacheSaltSGLang,

	profile: sglangProfile,
}

func init() { register(SGLang) }

// sglangProfile reads SGLang's prometheus names (--enable-metrics). It counts tokens, not
// bytes: evicted_tokens is GPU->host (the store), load_back_tokens host->GPU (the reload);
// backuped_tokens is host->storage. Newer servers split cached_tokens_total by cache_source,
// whose series appear on their first token.
func sglangProfile() metrics.Profile {
	sel := metrics.MustSelectors
	counters := map[metrics.Counter][]metrics.Selector{}
	for _, c := range metrics.Counters() {
		counters[c] = nil
	}
	counters[metrics.GPUPrefixHits] = sel(`sglang:cached_tokens_total{cache_source="device"}`)
	counters[metrics.ExternalPrefixHits] = sel(`sglang:cached_tokens_total{cache_source="host"}`)
	counters[metrics.CachedFromDevice] = sel(`sglang:cached_tokens_total{cache_source="device"}`)
	counters[metrics.CachedFromHost] = sel(`sglang:cached_tokens_total{cache_source="host"}`)
	counters[metrics.CachedFromDisk] = sel(`sglang:cached_tokens_total{cache_source="storage"}`)
	counters[metrics.PromptTokensCached] = sel("sglang:cached_tokens_total")
	counters[metrics.PromptTokens] = sel("sglang:prompt_tokens_total")
	counters[metrics.GenerationTokens] = sel("sglang:generation_tokens_total")
	counters[metrics.StoreTokens] = sel("sglang:evicted_tokens_total")
	counters[metrics.StoreSeconds] = sel("sglang:eviction_duration_seconds_sum")
	counters[metrics.ReloadTokens] = sel("sglang:load_back_tokens_total")
	counters[metrics.LoadSeconds] = sel("sglang:load_back_duration_seconds_sum")
	counters[metrics.DiskStoreTokens] = sel("sglang:backuped_tokens_total")
	gauges := map[metrics.Gauge][]metrics.Selector{}
	for _, g := range metrics.Gauges() {
		gauges[g] = nil
	}
	gauges[metrics.KVUsage] = sel("sglang:token_usage")
	gauges[metrics.RequestsRunning] = sel("sglang:num_running_reqs")
	gauges[metrics.RequestsWaiting] = sel("sglang:num_queue_reqs")
	return metrics.Profile{
		Name:         "sglang",
		Counters:     counters,
		Gauges:       gauges,
		LazyFamilies: map[string]bool{"sglang:cached_tokens_total": true},
	}
}

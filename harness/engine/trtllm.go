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
	Sizes:        "GPU pool = trtllm_kv_cache_max_blocks x trtllm_kv_cache_tokens_per_block where served, else the scenario's [server]; the host tier from the scenario (no family reports it: host_cache_size is given in bytes, the scenario takes GiB)",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (sent with 0 too); trtllm_prompt_cached_tokens_total counts them per finished request",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "trtllm_prompt_cache_hit_tokens_total{cache_tier=\"host\"} (servers from September 2026 with KV cache manager V2) covering the prompt; trtllm_kv_cache_onboard_bytes_total confirms bytes moved"},
		{verdict.GPUHit, "cache_tier=\"gpu\" hits beyond the shared prefix covering the prompt, none from host"},
		{verdict.Partial, "hits from both tiers, or hits well below the prompt"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
		{verdict.TierUnknown, "servers without the per-tier counter (or with KV cache manager V1): cached prompt tokens prove a cache hit, nothing says from which tier"},
	},
	Proves:          "with the per-tier hit counter, every verdict; without it, that a replay hit the cache and how much of it, never from which tier (cache_hit_tier_unknown)",
	Evidence:        "trtllm_prompt_cache_hit_tokens_total{cache_tier} where served, trtllm_prompt_cached_tokens_total and trtllm_prompt_tokens_total around the replay, usage's cached tokens; trtllm_kv_cache_onboard_bytes_total and _offload_bytes_total; trtllm_num_requests_running/_waiting for isolation",
	Pitfalls:        "Prometheus text is at /prometheus/metrics and only with return_perf_metrics: true (/metrics answers JSON iteration stats); iteration families need enable_iter_perf_stats: true; counters are updated after a request finishes, by a collector that can lag it; the per-tier family is iteration-scoped and need not sum to the request-scoped cached counter; onboard bytes also move when a preempted request resumes and on prefetch, offload bytes on suspend; trtllm_kv_cache_host_utilization counts pinned blocks, not occupancy; an unknown request field is a 400 (extra=\"forbid\")",
	TierUnknown:     "this TensorRT-LLM serves no trtllm_prompt_cache_hit_tokens_total{cache_tier} (servers before September 2026, or KV cache manager V1): it counts cached prompt tokens but nothing separates host-tier hits from GPU hits, so kvbench can prove a cache hit but not its tier (cache_hit_tier_unknown)",
	Families:        "trtllm_",
	FamiliesHint:    "no trtllm_* family is served: trtllm-serve serves Prometheus text at /prometheus/metrics (its /metrics is JSON) and only with return_perf_metrics: true in the LLM API options",
	LoadBytesCaveat: "TensorRT-LLM's trtllm_kv_cache_onboard_bytes_total also moves when a preempted or suspended request resumes and on prefetch, so its bytes confirm data moved, not that this replay's tokens were reloaded",
	CountersLag:     "TensorRT-LLM updates its counters after a request finishes, from a collector loop that can run a period behind: the window may have closed first",
	MetricsPath:     "/prometheus/metrics",
	Dialects:        trtllmDialects,
	Isolation:       trtllmIsolation,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cacheSaltTRTLLM,
	profile:  trtllmProfile,
}

func init() { register(TRTLLM) }

// trtllmIsolation is the engine's cache-isolation field (docs/domain.md, "Cache isolation").
var trtllmIsolation = &Isolation{Field: "cache_salt", Isolates: "the GPU block reuse of chat requests (the salt becomes the request's cache_salt_id)",
	Leaks: "whether the host offload tier keys its blocks by the salt is unverified; /v1/completions has no such field and refuses unknown ones"}

// trtllmProfile reads trtllm-serve's /prometheus/metrics (MetricsCollector): prompt and
// cached prompt tokens, the per-tier hit tokens where served, onboard and offload bytes,
// block counters converted with tokens per block, the running and waiting gauges.
func trtllmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	counters := map[metrics.Counter][]metrics.Selector{}
	for _, c := range metrics.Counters() {
		counters[c] = nil
	}
	counters[metrics.PromptTokens] = sel("trtllm_prompt_tokens_total")
	counters[metrics.GenerationTokens] = sel("trtllm_generation_tokens_total")
	counters[metrics.PromptTokensCached] = sel("trtllm_prompt_cached_tokens_total")
	// Summed over cache_level: a deployment may have two levels of one tier. All configured
	// levels are created together at the first stats report, so none is lazy.
	counters[metrics.GPUPrefixHits] = sel(`trtllm_prompt_cache_hit_tokens_total{cache_tier="gpu"}`)
	counters[metrics.ExternalPrefixHits] = sel(`trtllm_prompt_cache_hit_tokens_total{cache_tier=~"host|disk"}`)
	counters[metrics.CachedFromDevice] = sel(`trtllm_prompt_cache_hit_tokens_total{cache_tier="gpu"}`)
	counters[metrics.CachedFromHost] = sel(`trtllm_prompt_cache_hit_tokens_total{cache_tier="host"}`)
	counters[metrics.CachedFromDisk] = sel(`trtllm_prompt_cache_hit_tokens_total{cache_tier="disk"}`)
	counters[metrics.LoadBytes] = sel("trtllm_kv_cache_onboard_bytes_total")
	counters[metrics.StoreBytes] = sel("trtllm_kv_cache_offload_bytes_total")
	counters[metrics.DiskStagedTokens] = sel("trtllm_kv_cache_disk_prefetch_blocks_total")
	gauges := map[metrics.Gauge][]metrics.Selector{}
	for _, g := range metrics.Gauges() {
		gauges[g] = nil
	}
	gauges[metrics.KVUsage] = sel("trtllm_kv_cache_utilization")
	gauges[metrics.RequestsRunning] = sel("trtllm_num_requests_running")
	gauges[metrics.RequestsWaiting] = sel("trtllm_num_requests_waiting")
	gauges[metrics.GPUPoolTokens] = sel("trtllm_kv_cache_max_blocks")
	gauges[metrics.BlockSizeTokens] = sel("trtllm_kv_cache_tokens_per_block")
	// The byte counters are created on their first bytes (multiprocess: undeclared before);
	// both come from the same iteration stats, so one served proves the other live.
	onboard, offload := "trtllm_kv_cache_onboard_bytes_total", "trtllm_kv_cache_offload_bytes_total"
	return metrics.Profile{Name: "trtllm", Counters: counters, Gauges: gauges, LazyFamilies: map[string]bool{},
		LiveWhen:      map[string][]metrics.Selector{onboard: sel(offload), offload: sel(onboard)},
		BlockCounters: map[metrics.Counter]bool{metrics.DiskStagedTokens: true},
		BlockGauges:   map[metrics.Gauge]bool{metrics.GPUPoolTokens: true}}
}

// trtllmDialects are the shapes of trtllm-serve's Prometheus text, read from
// NVIDIA/TensorRT-LLM's tensorrt_llm/metrics/collector.py.
var trtllmDialects = []MetricsDialect{
	{
		Name:     "trtllm-tier-split",
		Upstream: "NVIDIA/TensorRT-LLM 050f80de (#18583, September 2026): trtllm_prompt_cache_hit_tokens_total{cache_level,cache_tier}",
		Match:    func(e metrics.Exposition) bool { return e.Has("trtllm_prompt_cache_hit_tokens_total") },
	},
	{
		Name:     "trtllm-no-tier-split",
		Upstream: "NVIDIA/TensorRT-LLM #12545 (March 2026) to before #18583: trtllm_ iteration families, no per-tier hits",
		Match: func(e metrics.Exposition) bool {
			return e.HasPrefix("trtllm_") && !e.Has("trtllm_prompt_cache_hit_tokens_total")
		},
	},
}

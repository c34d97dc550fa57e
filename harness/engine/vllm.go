package engine

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// VLLM is vLLM with its native CPU offloading (--kv-offloading-size, OffloadingConnector).
var VLLM = &Definition{
	Name:         "vllm",
	Description:  "vLLM with native CPU KV offloading (--kv-offloading-size GiB)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "--kv-offloading-size",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool = num_gpu_blocks x block_size and the CPU tier's GiB from vllm:cache_config_info, else [server] in the scenario; bytes per stored token measured from the store counters, else the scenario",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (needs --enable-prompt-tokens-details; omitted when 0; GPU and external hits together)",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "external prefix-cache hits covering the prompt, with CPU->GPU bytes moved"},
		{verdict.GPUHit, "GPU prefix-cache hits beyond the shared prefix covering the prompt, no external hits"},
		{verdict.Partial, "hits from both tiers, or hits well below the prompt"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
	},
	Proves:    "every verdict: the hit counters split the GPU pool from the CPU tier, and the byte counters confirm a reload moved data",
	Diagnoses: []string{verdict.DiagStoresSkipped, verdict.DiagAllocationFailures, verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:  "vllm:prefix_cache_hits_total and vllm:external_prefix_cache_hits_total around the replay; vllm:kv_offload_load_bytes_total (or kv_offload_total_bytes_total{transfer_type=\"CPU_to_GPU\"}) confirms the reload",
	Pitfalls:  "usage reports cached tokens only with --enable-prompt-tokens-details; the offload byte families changed names across versions (both are read); vllm:kv_offload_cpu_cache_usage_perc counts pinned blocks, not occupancy",
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      cacheSalt,
	TokenIDsField: "return_token_ids",

	profile: vllmProfile,
}

func init() { register(VLLM) }

func vllmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	return metrics.Profile{
		Name: "vllm",
		Counters: map[metrics.Counter][]metrics.Selector{
			// gpu_ prefixed names are the pre-v0.10 generation.
			metrics.GPUPrefixQueries:      sel("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
			metrics.GPUPrefixHits:         sel("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
			metrics.ExternalPrefixQueries: sel("vllm:external_prefix_cache_queries_total"),
			metrics.ExternalPrefixHits:    sel("vllm:external_prefix_cache_hits_total"),
			// Flat offload names first: both generations may be served at once with equal values,
			// and only one may be counted.
			metrics.StoreBytes:                sel("vllm:kv_offload_store_bytes_total", `vllm:kv_offload_total_bytes_total{transfer_type="GPU_to_CPU"}`),
			metrics.StoreSeconds:              sel("vllm:kv_offload_store_time_total", `vllm:kv_offload_total_time_total{transfer_type="GPU_to_CPU"}`),
			metrics.StoreTokens:               nil,
			metrics.LoadBytes:                 sel("vllm:kv_offload_load_bytes_total", `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`),
			metrics.LoadSeconds:               sel("vllm:kv_offload_load_time_total", `vllm:kv_offload_total_time_total{transfer_type="CPU_to_GPU"}`),
			metrics.PromptTokens:              sel("vllm:prompt_tokens_total"),
			metrics.GenerationTokens:          sel("vllm:generation_tokens_total"),
			metrics.PromptTokensLocalCompute:  sel(`vllm:prompt_tokens_by_source_total{source="local_compute"}`),
			metrics.PromptTokensLocalCacheHit: sel(`vllm:prompt_tokens_by_source_total{source="local_cache_hit"}`),
			metrics.PromptTokensExternal:      sel(`vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`),
			metrics.PromptTokensCached:        sel("vllm:prompt_tokens_cached_total"),
			metrics.Preemptions:               sel("vllm:num_preemptions_total"),
			// Offload diagnostics of newer versions: optional, absent on older servers.
			metrics.StoresSkipped:      sel("vllm:kv_offload_stores_skipped_total"),
			metrics.AllocationFailures: sel("vllm:kv_offload_allocation_failure_total"),
			metrics.LookupSyncSeconds:  sel("vllm:kv_offload_lookup_sync_delay_seconds_sum"),
			metrics.LookupAsyncSeconds: sel("vllm:kv_offload_lookup_async_delay_seconds_sum"),
			// Proposed upstream: which tier served each cached prompt token.
			metrics.CachedFromDevice: sel(`vllm:prompt_tokens_cached_by_source_total{source="device"}`),
			metrics.CachedFromHost:   sel(`vllm:prompt_tokens_cached_by_source_total{source="host"}`),
			metrics.CachedFromDisk:   sel(`vllm:prompt_tokens_cached_by_source_total{source="disk"}`),
			// vLLM's native offloading counts bytes, not tokens moved, and has no disk tier.
			metrics.ReloadTokens:     nil,
			metrics.DiskReloadTokens: nil,
			metrics.DiskStoreTokens:  nil,
			metrics.MatchedTokens:    nil,
			metrics.HostEvictions:    nil,
		},
		Gauges: map[metrics.Gauge][]metrics.Selector{
			metrics.KVUsage:         sel("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
			metrics.RequestsRunning: sel("vllm:num_requests_running"),
			metrics.RequestsWaiting: sel("vllm:num_requests_waiting"),
			// Pinned blocks only: a full idle tier reads near 0, so never occupancy.
			metrics.OffloadPinnedUsage: sel("vllm:kv_offload_cpu_cache_usage_perc"),
		},
		// Early OffloadingConnector versions create a transfer_type series on its first
		// transfer; the by-source family creates a source's series on its first token.
		LazyFamilies: map[string]bool{
			"vllm:kv_offload_total_bytes_total":         true,
			"vllm:kv_offload_total_time_total":          true,
			"vllm:prompt_tokens_cached_by_source_total": true,
		},
		CacheInfo: "vllm:cache_config_info",
	}
}

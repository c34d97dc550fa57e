package engine

import (
	"slices"
	"strings"

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
	Sizes:        "GPU pool = kv_cache_size_tokens (newer servers) or num_gpu_blocks x block_size, and the CPU tier's GiB as configured (kv_offloading_size, not a reported capacity), from vllm:cache_config_info, else [server] in the scenario; bytes per stored token measured from the store counters, else the scenario",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (needs --enable-prompt-tokens-details; omitted when 0 before June 2026, sent as 0 since; GPU and external hits together)",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "external prefix-cache hits covering the prompt, with CPU->GPU bytes moved"},
		{verdict.GPUHit, "GPU prefix-cache hits beyond the shared prefix covering the prompt, no external hits"},
		{verdict.Partial, "hits from both tiers, or hits well below the prompt"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
	},
	Proves:    "every verdict: the hit counters split the GPU pool from the CPU tier, and the byte counters confirm a reload moved data",
	Diagnoses: []string{verdict.DiagStoresSkipped, verdict.DiagAllocationFailures, verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:  "vllm:prefix_cache_hits_total and vllm:external_prefix_cache_hits_total around the replay, cross-checked with usage's cached tokens (and vllm:prompt_tokens_by_source_total where they disagree); vllm:kv_offload_load_bytes_total (or kv_offload_total_bytes_total{transfer_type=\"CPU_to_GPU\"}) confirms the reload; vllm:kv_offload_tiering_read_bytes_total{tier=\"N:fs\"} (the tiering spec) names the disk share of a reload staged through the CPU tier, and vllm:prompt_tokens_cached_by_source_total's host, disk, p2p and external_unspecified sources cross-check the external hits where served",
	Pitfalls:  "usage reports cached tokens only with --enable-prompt-tokens-details; the offload byte families changed names and laziness across versions (both generations are read, never added); the simple CPU offload connector (VLLM_USE_SIMPLE_KV_OFFLOAD=1) serves no offload counters at all; vllm:external_prefix_cache_* exist (at 0) even without a connector; kv_offloading_backend reads native even with offloading off; vllm:kv_offload_cpu_cache_usage_perc counts pinned blocks, not occupancy; transfer seconds are summed over tensor-parallel workers; the tiering spec reaches its fs tier only through the CPU tier, so a disk hit is in the CPU->GPU load bytes too; a connector that names no tier (LMCache, Mooncake's store) counts its hits as source external_unspecified, never host",
	Dialects:  vllmDialects,
	Isolation: vllmIsolation,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      cacheSalt,
	TokenIDsField: "return_token_ids",
	profile:       vllmProfile,
}

func init() { register(VLLM) }

// vllmIsolation is the engine's cache-isolation field (docs/domain.md, "Cache isolation").
var vllmIsolation = &Isolation{Field: "cache_salt", Isolates: "the GPU prefix cache and the native CPU tier: the salt enters the first block's hash, every later hash chains on it, and OffloadingConnector and SimpleCPUOffloadConnector key their blocks by those hashes"}

// The flat offload families of June 2026 and later, lazily bound since c441ad1c: any one
// of them served proves the others exist in this version and are only unused yet.
var flatOffloadFamilies = []string{
	"vllm:kv_offload_store_bytes_total", "vllm:kv_offload_store_time_total", "vllm:kv_offload_store_size",
	"vllm:kv_offload_load_bytes_total", "vllm:kv_offload_load_time_total", "vllm:kv_offload_load_size",
}

// The diagnostics of July 2026 (e040899a), also lazy. A lookup histogram moves on every
// lookup, before any store could fail: it proves the allocation-failure family live, not
// the other way round.
var offloadLookupFamilies = []string{"vllm:kv_offload_lookup_sync_delay_seconds", "vllm:kv_offload_lookup_async_delay_seconds"}

func vllmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := metrics.Profile{
		Name: "vllm",
		Counters: map[metrics.Counter][]metrics.Selector{
			// gpu_ names: the only ones until June 2025, hidden from September 2025, gone from
			// November 2025; in blocks until May 2025 (BlockHelp below converts them).
			metrics.GPUPrefixQueries: sel("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
			metrics.GPUPrefixHits:    sel("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
			// Served at 0 even without a KV connector: presence is no proof of a tier.
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
			// Only February to April 2026: one per fully cached request.
			metrics.PromptTokensRecomputed: sel("vllm:prompt_tokens_recomputed_total"),
			metrics.Preemptions:            sel("vllm:num_preemptions_total"),
			// Offload diagnostics of newer versions: optional, absent on older servers.
			metrics.StoresSkipped:      sel("vllm:kv_offload_stores_skipped_total"),
			metrics.AllocationFailures: sel("vllm:kv_offload_allocation_failure_total"),
			metrics.LookupSyncSeconds:  sel("vllm:kv_offload_lookup_sync_delay_seconds_sum"),
			metrics.LookupAsyncSeconds: sel("vllm:kv_offload_lookup_async_delay_seconds_sum"),
			// Which tier served each cached prompt token, CacheHitSource's five values
			// (vllm/v1/metrics/cache_hit_source.py): external_unspecified is an external hit
			// from a connector that does not say which tier (LMCache, Mooncake's store).
			metrics.CachedFromDevice:          sel(`vllm:prompt_tokens_cached_by_source_total{source="device"}`),
			metrics.CachedFromHost:            sel(`vllm:prompt_tokens_cached_by_source_total{source="host"}`),
			metrics.CachedFromDisk:            sel(`vllm:prompt_tokens_cached_by_source_total{source="disk"}`),
			metrics.CachedFromP2P:             sel(`vllm:prompt_tokens_cached_by_source_total{source="p2p"}`),
			metrics.CachedExternalUnspecified: sel(`vllm:prompt_tokens_cached_by_source_total{source="external_unspecified"}`),
			// The tiering spec's secondary tiers are labelled "<index+1>:<type>"; promotions
			// into the CPU tier are reads, cascades out of it writes. Its fs tier is the disk.
			metrics.DiskStagedBytes: sel(`vllm:kv_offload_tiering_read_bytes_total{tier=~"[0-9]+:fs"}`),
			metrics.DiskStoreBytes:  sel(`vllm:kv_offload_tiering_write_bytes_total{tier=~"[0-9]+:fs"}`),
			// vLLM's native offloading counts bytes, not tokens moved.
			metrics.ConnectorHitTokens:    nil,
			metrics.ReloadTokens:          nil,
			metrics.DiskReloadTokens:      nil,
			metrics.DiskStagedTokens:      nil,
			metrics.ObjectReloadTokens:    nil,
			metrics.DiskStoreTokens:       nil,
			metrics.DeviceDiskStoreTokens: nil,
			metrics.ObjectStoreTokens:     nil,
			metrics.MatchedTokens:         nil,
			metrics.HostEvictions:         nil,
			metrics.DeviceEvictions:       nil,
		},
		Gauges: map[metrics.Gauge][]metrics.Selector{
			metrics.KVUsage:         sel("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
			metrics.RequestsRunning: sel("vllm:num_requests_running"),
			// Since April 2026 it includes deferred requests; kvbench only waits for 0.
			metrics.RequestsWaiting: sel("vllm:num_requests_waiting"),
			// Pinned blocks only: a full idle tier reads near 0, so never occupancy.
			metrics.OffloadPinnedUsage: sel("vllm:kv_offload_cpu_cache_usage_perc"),
		},
		// The labelled family creates a transfer_type's series on its first transfer
		// (January to June 2026; eager since); the flat families and the diagnostics are
		// bound on first use since June 2026; the tiering families create a tier's series on
		// its first transfer. The by-source family also creates a source's series on its
		// first token, but is not lazy here: whether a connector can ever name a source is
		// not in the exposition (LMCache never says host), so a source not served is absent.
		LazyFamilies: map[string]bool{
			"vllm:kv_offload_total_bytes_total":         true,
			"vllm:kv_offload_total_time_total":          true,
			"vllm:kv_offload_stores_skipped_total":      true,
			"vllm:kv_offload_cpu_cache_usage_perc":      true,
			"vllm:kv_offload_tiering_read_bytes_total":  true,
			"vllm:kv_offload_tiering_write_bytes_total": true,
		},
		LiveWhen:  map[string][]metrics.Selector{},
		BlockHelp: map[string]string{},
		CacheInfo: "vllm:cache_config_info",
	}
	for _, f := range flatOffloadFamilies {
		p.LazyFamilies[f] = true
		p.LiveWhen[f] = siblings(flatOffloadFamilies, f)
	}
	for _, f := range offloadLookupFamilies {
		p.LazyFamilies[f] = true
	}
	// Every tier's usage gauges are set on each stats pass: a served fs tier's gauge proves
	// its byte series are only unused yet (under PROMETHEUS_MULTIPROC_DIR nothing is declared).
	for _, f := range []string{"vllm:kv_offload_tiering_read_bytes_total", "vllm:kv_offload_tiering_write_bytes_total"} {
		p.LiveWhen[f] = sel(`vllm:kv_offload_tiering_primary_read_usage_perc{tier=~"[0-9]+:fs"}`)
	}
	p.LazyFamilies["vllm:kv_offload_allocation_failure_total"] = true
	p.LiveWhen["vllm:kv_offload_allocation_failure_total"] = siblings(offloadLookupFamilies, "")
	p.BlockHelp["vllm:gpu_prefix_cache_queries_total"] = "number of queried blocks"
	p.BlockHelp["vllm:gpu_prefix_cache_hits_total"] = "number of cached blocks"
	return p
}

// siblings are the selectors of every family in group but self.
func siblings(group []string, self string) []metrics.Selector {
	var out []metrics.Selector
	for _, f := range group {
		if f != self {
			out = append(out, metrics.MustSelectors(f)...)
		}
	}
	return out
}

// offloadSizeSet reports whether vllm:cache_config_info sizes an offload tier.
func offloadSizeSet(e metrics.Exposition) bool {
	return e.Serves(metrics.MustSelectors(`vllm:cache_config_info{kv_offloading_size=~"[0-9.]+"}`)[0])
}

// offloadBackend reports whether vllm:cache_config_info names backend b.
func offloadBackend(e metrics.Exposition, b string) bool {
	return slices.Contains(e.LabelValues("vllm:cache_config_info", "kv_offloading_backend"), b)
}

// vllmDialects are the shapes of vLLM's /metrics that change what a counter means or where
// it comes from, read from vllm-project/vllm (docs/domain.md, "Engines").
var vllmDialects = []MetricsDialect{
	{
		Name:     "vllm-gpu-prefix-blocks",
		Upstream: "vllm-project/vllm 41c5dd45 (#12592) to 302f3aca (#18003), May 2025",
		Match: func(e metrics.Exposition) bool {
			return e.Serves(metrics.MustSelectors("vllm:gpu_prefix_cache_hits_total")[0]) && !e.Has("vllm:prefix_cache_hits_total") &&
				strings.Contains(e.Help("vllm:gpu_prefix_cache_hits_total"), "blocks")
		},
		Note: "this vLLM (before May 2025) counts vllm:gpu_prefix_cache_* in blocks, not tokens: kvbench multiplies them by the cache config's block size",
	},
	{
		Name:     "vllm-offload-labelled",
		Upstream: "vllm-project/vllm 7227d061 (#27942) to 9dfc313b (#35669): transfer_type series created on the first transfer",
		Match: func(e metrics.Exposition) bool {
			return e.Has("vllm:kv_offload_total_bytes_total") && !e.HasPrefix("vllm:kv_offload_store_") && !e.HasPrefix("vllm:kv_offload_load_")
		},
	},
	{
		Name:     "vllm-offload-flat",
		Upstream: "vllm-project/vllm from 9dfc313b (#35669); bound on first use from c441ad1c (#45957)",
		Match: func(e metrics.Exposition) bool {
			return e.HasPrefix("vllm:kv_offload_store_") || e.HasPrefix("vllm:kv_offload_load_")
		},
	},
	{
		Name:     "vllm-offload-tiering",
		Upstream: "vllm-project/vllm TieringOffloadingSpec (vllm/v1/kv_offload/tiering/, metrics.py at 19715bcf): secondary tiers labelled \"<index+1>:<type>\", reached only through the CPU tier",
		Match:    func(e metrics.Exposition) bool { return e.HasPrefix("vllm:kv_offload_tiering_") },
		Note:     "vLLM's tiering spec serves its secondary tiers through the CPU tier: a hit in the fs tier is promoted into the CPU tier (vllm:kv_offload_tiering_read_bytes_total{tier=\"N:fs\"}) and then loaded to the GPU with the CPU tier's own hits, so the CPU->GPU load bytes include it and kvbench names the disk share of every reload",
	},
	{
		Name:     "vllm-cached-by-source",
		Upstream: "vllm-project/vllm #56318 (vllm/v1/metrics/cache_hit_source.py at 8548f56c): device, host, p2p, disk, external_unspecified",
		Match:    func(e metrics.Exposition) bool { return e.Has("vllm:prompt_tokens_cached_by_source_total") },
	},
	{
		Name:     "vllm-offload-unobservable",
		Upstream: "vllm-project/vllm SimpleCPUOffloadConnector from 91e4521f (#37160); OffloadingConnector before 7227d061 served no metrics",
		Match: func(e metrics.Exposition) bool {
			return offloadSizeSet(e) && !offloadBackend(e, "lmcache") && !e.HasPrefix("vllm:kv_offload_")
		},
		Note: "vllm:cache_config_info sizes a native CPU tier (kv_offloading_size) but no vllm:kv_offload_* family is served: the simple CPU offload connector (VLLM_USE_SIMPLE_KV_OFFLOAD=1) exports no offload counters, nor did the offloading connector before January 2026 (and under PROMETHEUS_MULTIPROC_DIR the early-2026 labelled family appears only after the first transfer). The host tier's stores and loads are unobservable: a reload rests on the external hits alone, and a missing store is not a finding",
	},
	{
		Name:     "vllm-prompt-tokens-recomputed",
		Upstream: "vllm-project/vllm 4403e3ed (#33290) to 72ff142c (#38709), February to April 2026",
		Match:    func(e metrics.Exposition) bool { return e.Has("vllm:prompt_tokens_recomputed_total") },
	},
	{
		Name:     "vllm-lmcache-multiprocess",
		Upstream: "vllm-project/vllm from b58e082d (#42865): --kv-offloading-backend lmcache runs LMCacheMPConnector",
		Match: func(e metrics.Exposition) bool {
			return e.Has("vllm:lmcache_mp_lookup_duration_seconds") || offloadBackend(e, "lmcache") && !e.HasPrefix("lmcache:")
		},
		Note:                   "kv_offloading_backend is lmcache and no lmcache:* family reaches vLLM's /metrics: this is vLLM's LMCache multi-process connector (vLLM from June 2026), whose tier lives in a separate LMCache server: its size is that server's --l1-size-gb (kv_offloading_size is not passed on, so kvbench takes the tier from the scenario) and its counters (lmcache_mp_*) are on that server's own /metrics (port 9090 by default), which kvbench does not read: the external hits come from vLLM's own counters. PROMETHEUS_MULTIPROC_DIR does not bring them. (An LMCacheConnectorV1 from before June 2026 started without PROMETHEUS_MULTIPROC_DIR looks the same; vllm:lmcache_mp_lookup_duration_seconds, where served, settles it)",
		HostTierUnreported:     true,
		ExplainsAbsentFamilies: true,
	},
}

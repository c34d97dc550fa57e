// Package metrics reads an LLM server's Prometheus /metrics exposition and turns it into
// kvbench's normalized counters: GPU and external prefix-cache hits, KV offload store and load
// bytes, prompt tokens by source, and the gauges and cache config that size an offload test.
//
// A backend Profile says which metric names (with aliases for each name generation) carry each
// counter; a Snapshot holds one reading per counter, and Diff turns two snapshots into the
// deltas that prove or refute store, eviction and reload. Counter meanings are described in
// docs/domain.md. An absent counter stays absent, never 0.
package metrics

import "github.com/anvil-serving/kvbench/harness/record"

// Counter is the normalized name of a monotonic counter kvbench reads: the record's type,
// whose names are the constants here.
type Counter = record.Counter

// Normalized counters. Tokens unless the name says bytes or seconds.
const (
	GPUPrefixQueries          Counter = "gpu_prefix_queries"
	GPUPrefixHits             Counter = "gpu_prefix_hits"
	ExternalPrefixQueries     Counter = "external_prefix_queries"
	ExternalPrefixHits        Counter = "external_prefix_hits"
	StoreBytes                Counter = "store_bytes"
	StoreSeconds              Counter = "store_seconds"
	StoreTokens               Counter = "store_tokens" // device->host in tokens (LMCache, SGLang, KVBM): vLLM counts bytes
	LoadBytes                 Counter = "load_bytes"
	LoadSeconds               Counter = "load_seconds"
	PromptTokens              Counter = "prompt_tokens"
	GenerationTokens          Counter = "generation_tokens"
	PromptTokensLocalCompute  Counter = "prompt_tokens_local_compute"
	PromptTokensLocalCacheHit Counter = "prompt_tokens_local_cache_hit"
	PromptTokensExternal      Counter = "prompt_tokens_external"
	PromptTokensCached        Counter = "prompt_tokens_cached"
	Preemptions               Counter = "preemptions"

	// Offload diagnostics (newer vLLM): optional, absent on servers that do not serve them.
	// StoresSkipped counts stores the store_threshold reuse filter skipped; AllocationFailures
	// stores the CPU tier had no room for; the lookup counters are the _sum of the lookup
	// delay histograms.
	StoresSkipped      Counter = "offload_stores_skipped"
	AllocationFailures Counter = "offload_allocation_failures"
	LookupSyncSeconds  Counter = "offload_lookup_sync_seconds"
	LookupAsyncSeconds Counter = "offload_lookup_async_seconds"
	// Cached prompt tokens by the tier that served them: SGLang's cache_source split,
	// TensorRT-LLM's cache_tier split (and a proposal in vLLM that is not upstream yet).
	CachedFromDevice Counter = "prompt_tokens_cached_device"
	CachedFromHost   Counter = "prompt_tokens_cached_host"
	CachedFromDisk   Counter = "prompt_tokens_cached_disk"
	// CachedFromP2P and CachedExternalUnspecified are vLLM's other two sources: a peer
	// instance, and a connector that does not say which of its tiers served the tokens
	// (LMCache, Mooncake's store): external, tier unknown.
	CachedFromP2P             Counter = "prompt_tokens_cached_p2p"
	CachedExternalUnspecified Counter = "prompt_tokens_cached_external_unspecified"
	// PromptTokensRecomputed is vLLM's count of prompt tokens recomputed although cached
	// (one per fully cached request: the last token always runs), served only by the
	// versions that had it.
	PromptTokensRecomputed Counter = "prompt_tokens_recomputed"
	// ConnectorHitTokens is the KV connector's own count of the tokens it served (LMCache's
	// num_hit_tokens): a second source for the external hits vLLM counts, never the first.
	ConnectorHitTokens Counter = "connector_hit_tokens"

	// Tier movement in tokens, for engines that count it (SGLang in tokens, KVBM in blocks
	// converted with the block size). ReloadTokens moved host->device (the reload; with
	// KVBM v2 it includes blocks staged from disk through the host); DiskReloadTokens
	// disk->device directly; DiskStagedTokens disk (or storage) -> host, on their way to the
	// device; ObjectReloadTokens object storage -> device; DiskStoreTokens host->disk (not a
	// reload); DeviceDiskStoreTokens device->disk, bypassing the host; ObjectStoreTokens
	// device->object storage; MatchedTokens are the tokens an offload manager found in its
	// tiers; HostEvictions counts evictions from the host tier (LMCache counts eviction
	// calls, not tokens); DeviceEvictions counts device KV tokens freed by eviction, backed
	// up or not (SGLang): an eviction signal, never a store.
	ReloadTokens          Counter = "reload_tokens"
	DiskReloadTokens      Counter = "disk_reload_tokens"
	DiskStagedTokens      Counter = "disk_to_host_tokens"
	ObjectReloadTokens    Counter = "object_reload_tokens"
	DiskStoreTokens       Counter = "disk_store_tokens"
	DeviceDiskStoreTokens Counter = "device_to_disk_tokens"
	ObjectStoreTokens     Counter = "object_store_tokens"
	MatchedTokens         Counter = "matched_tokens"
	HostEvictions         Counter = "host_tier_evictions"
	DeviceEvictions       Counter = "device_evicted_tokens"
	// DiskStagedBytes are bytes promoted from the disk tier into the host tier, on their
	// way to the device (vLLM's tiering spec: its fs tier read into the CPU tier); the
	// CPU->GPU load bytes include them. DiskStoreBytes are bytes cascaded host->disk.
	DiskStagedBytes Counter = "disk_to_host_bytes"
	DiskStoreBytes  Counter = "disk_store_bytes"
)

// Gauge is the normalized name of a gauge kvbench samples.
type Gauge string

// Normalized gauges.
const (
	// KVUsage is GPU block-pool occupancy, 0..1. Over several engines it is the max, because
	// the peak of the fullest pool is what decides eviction.
	KVUsage         Gauge = "kv_usage"
	RequestsRunning Gauge = "requests_running"
	RequestsWaiting Gauge = "requests_waiting"
	// OffloadPinnedUsage is vLLM's kv_offload_cpu_cache_usage_perc: the CPU tier's pinned
	// blocks only (a full idle tier reads near 0), so it is never read as occupancy.
	OffloadPinnedUsage Gauge = "offload_pinned_usage"
	// HostTierUsageBytes is the host tier's occupancy in bytes where the engine serves it
	// (LMCache's local_cache_usage).
	HostTierUsageBytes Gauge = "host_tier_usage_bytes"
	// Capacity the server reports of itself where it has no cache config family: the device
	// pool in tokens (SGLang's max_total_num_tokens; TensorRT-LLM's max blocks, a block
	// gauge), the tokens per block or page, and the host tier's size and fill in tokens
	// (SGLang's hicache_host_total_tokens and hicache_host_used_tokens).
	GPUPoolTokens      Gauge = "gpu_pool_tokens"
	BlockSizeTokens    Gauge = "block_size_tokens"
	HostTierTokens     Gauge = "host_tier_tokens"
	HostTierUsedTokens Gauge = "host_tier_used_tokens"
	// ProcessStart is the server process's start time (Unix seconds), which the Prometheus
	// client libraries' default registries export as process_start_time_seconds. It moves on
	// every restart, so a restart between two scrapes shows even when the counters regrew
	// past their old values. Over several URLs it is the max: any restart raises it.
	ProcessStart Gauge = "process_start"
)

// processStartFamily is the client libraries' own family, read for every engine: no
// engine defines it, so no profile lists it.
var processStartFamily = []Selector{{Metric: "process_start_time_seconds"}}

// Counters returns every normalized counter in a stable order.
func Counters() []Counter {
	return []Counter{
		GPUPrefixQueries, GPUPrefixHits, ExternalPrefixQueries, ExternalPrefixHits,
		StoreBytes, StoreSeconds, StoreTokens, LoadBytes, LoadSeconds,
		PromptTokens, GenerationTokens, PromptTokensLocalCompute, PromptTokensLocalCacheHit,
		PromptTokensExternal, PromptTokensCached, Preemptions,
		StoresSkipped, AllocationFailures, LookupSyncSeconds, LookupAsyncSeconds,
		CachedFromDevice, CachedFromHost, CachedFromDisk, CachedFromP2P, CachedExternalUnspecified, PromptTokensRecomputed, ConnectorHitTokens,
		ReloadTokens, DiskReloadTokens, DiskStagedTokens, ObjectReloadTokens,
		DiskStoreTokens, DeviceDiskStoreTokens, ObjectStoreTokens, MatchedTokens, HostEvictions, DeviceEvictions,
		DiskStagedBytes, DiskStoreBytes,
	}
}

// Gauges returns every normalized gauge in a stable order.
func Gauges() []Gauge {
	return []Gauge{KVUsage, RequestsRunning, RequestsWaiting, OffloadPinnedUsage, HostTierUsageBytes,
		GPUPoolTokens, BlockSizeTokens, HostTierTokens, HostTierUsedTokens, ProcessStart}
}

// takesMax reports whether g combines over engines and URLs by max instead of sum. The
// block size is one figure per server, not a sum.
func (g Gauge) takesMax() bool {
	return g == KVUsage || g == OffloadPinnedUsage || g == BlockSizeTokens || g == ProcessStart
}

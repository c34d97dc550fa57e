// Package metrics reads an LLM server's Prometheus /metrics exposition and turns it into
// kvbench's normalized counters: GPU and external prefix-cache hits, KV offload store and load
// bytes, prompt tokens by source, and the gauges and cache config that size an offload test.
//
// A backend Profile says which metric names (with aliases for each name generation) carry each
// counter; a Snapshot holds one reading per counter, and Diff turns two snapshots into the
// deltas that prove or refute store, eviction and reload. Counter meanings are described in
// docs/domain.md. An absent counter stays absent, never 0.
package metrics

// Counter is the normalized name of a monotonic counter kvbench reads.
type Counter string

// Normalized counters. Tokens unless the name says bytes or seconds.
const (
	GPUPrefixQueries          Counter = "gpu_prefix_queries"
	GPUPrefixHits             Counter = "gpu_prefix_hits"
	ExternalPrefixQueries     Counter = "external_prefix_queries"
	ExternalPrefixHits        Counter = "external_prefix_hits"
	StoreBytes                Counter = "store_bytes"
	StoreSeconds              Counter = "store_seconds"
	StoreTokens               Counter = "store_tokens" // LMCache only: vLLM has no stored-token counter
	LoadBytes                 Counter = "load_bytes"
	LoadSeconds               Counter = "load_seconds"
	PromptTokens              Counter = "prompt_tokens"
	GenerationTokens          Counter = "generation_tokens"
	PromptTokensLocalCompute  Counter = "prompt_tokens_local_compute"
	PromptTokensLocalCacheHit Counter = "prompt_tokens_local_cache_hit"
	PromptTokensExternal      Counter = "prompt_tokens_external"
	PromptTokensCached        Counter = "prompt_tokens_cached"
	Preemptions               Counter = "preemptions"
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
)

// Counters returns every normalized counter in a stable order.
func Counters() []Counter {
	return []Counter{
		GPUPrefixQueries, GPUPrefixHits, ExternalPrefixQueries, ExternalPrefixHits,
		StoreBytes, StoreSeconds, StoreTokens, LoadBytes, LoadSeconds,
		PromptTokens, GenerationTokens, PromptTokensLocalCompute, PromptTokensLocalCacheHit,
		PromptTokensExternal, PromptTokensCached, Preemptions,
	}
}

// Gauges returns every normalized gauge in a stable order.
func Gauges() []Gauge {
	return []Gauge{KVUsage, RequestsRunning, RequestsWaiting}
}

// takesMax reports whether g combines over engines and URLs by max instead of sum.
func (g Gauge) takesMax() bool { return g == KVUsage }

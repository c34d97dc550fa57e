package metrics

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Profile maps kvbench's normalized counters and gauges to a backend's metric names. Each has
// an ordered list of candidates: the first one found in an exposition wins, so older and newer
// name generations can both be listed.
type Profile struct {
	Name     string
	Counters map[Counter][]Selector
	Gauges   map[Gauge][]Selector
	// LazyFamilies are families whose series appear only after their first event. When such a
	// family is declared in an exposition but the wanted series is missing, the reading is 0.
	LazyFamilies map[string]bool
	// CacheInfo is the info-gauge family whose labels carry the KV cache config ("" for none).
	CacheInfo string
}

// ProfileNames returns the built-in profile names; the first is the default.
func ProfileNames() []string { return []string{"vllm", "lmcache", "llamacpp"} }

// ProfileByName returns a fresh copy of a built-in profile; "" means vllm.
func ProfileByName(name string) (Profile, error) {
	switch name {
	case "", "vllm":
		return vllmProfile(), nil
	case "lmcache":
		return lmcacheProfile(), nil
	case "llamacpp":
		return llamacppProfile(), nil
	}
	return Profile{}, fmt.Errorf("unknown backend profile %q (known: %v)", name, ProfileNames())
}

func selectors(texts ...string) []Selector {
	out := make([]Selector, len(texts))
	for i, t := range texts {
		out[i] = mustSelector(t)
	}
	return out
}

func vllmProfile() Profile {
	return Profile{
		Name: "vllm",
		Counters: map[Counter][]Selector{
			// gpu_ prefixed names are the pre-v0.10 generation.
			GPUPrefixQueries:      selectors("vllm:prefix_cache_queries_total", "vllm:gpu_prefix_cache_queries_total"),
			GPUPrefixHits:         selectors("vllm:prefix_cache_hits_total", "vllm:gpu_prefix_cache_hits_total"),
			ExternalPrefixQueries: selectors("vllm:external_prefix_cache_queries_total"),
			ExternalPrefixHits:    selectors("vllm:external_prefix_cache_hits_total"),
			// Flat offload names first: both generations may be served at once with equal values,
			// and only one may be counted.
			StoreBytes:                selectors("vllm:kv_offload_store_bytes_total", `vllm:kv_offload_total_bytes_total{transfer_type="GPU_to_CPU"}`),
			StoreSeconds:              selectors("vllm:kv_offload_store_time_total", `vllm:kv_offload_total_time_total{transfer_type="GPU_to_CPU"}`),
			StoreTokens:               nil,
			LoadBytes:                 selectors("vllm:kv_offload_load_bytes_total", `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`),
			LoadSeconds:               selectors("vllm:kv_offload_load_time_total", `vllm:kv_offload_total_time_total{transfer_type="CPU_to_GPU"}`),
			PromptTokens:              selectors("vllm:prompt_tokens_total"),
			GenerationTokens:          selectors("vllm:generation_tokens_total"),
			PromptTokensLocalCompute:  selectors(`vllm:prompt_tokens_by_source_total{source="local_compute"}`),
			PromptTokensLocalCacheHit: selectors(`vllm:prompt_tokens_by_source_total{source="local_cache_hit"}`),
			PromptTokensExternal:      selectors(`vllm:prompt_tokens_by_source_total{source="external_kv_transfer"}`),
			PromptTokensCached:        selectors("vllm:prompt_tokens_cached_total"),
			Preemptions:               selectors("vllm:num_preemptions_total"),
		},
		Gauges: map[Gauge][]Selector{
			KVUsage:         selectors("vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc"),
			RequestsRunning: selectors("vllm:num_requests_running"),
			RequestsWaiting: selectors("vllm:num_requests_waiting"),
		},
		// Early OffloadingConnector versions create a transfer_type series on its first transfer.
		LazyFamilies: map[string]bool{
			"vllm:kv_offload_total_bytes_total": true,
			"vllm:kv_offload_total_time_total":  true,
		},
		CacheInfo: "vllm:cache_config_info",
	}
}

// lmcacheProfile is vLLM with the LMCache connector: LMCache's own counters are the evidence
// for the offload tier where it has them. LMCache counts no bytes or transfer seconds for its
// CPU tier, so those stay absent unless vLLM serves them. With tensor parallelism each LMCache
// worker counts the same tokens under its own worker_id; the sum then grows with TP size.
func lmcacheProfile() Profile {
	p := vllmProfile()
	p.Name = "lmcache"
	p.Counters[ExternalPrefixQueries] = selectors("lmcache:num_requested_tokens_total", "vllm:external_prefix_cache_queries_total")
	p.Counters[ExternalPrefixHits] = selectors("lmcache:num_hit_tokens_total", "vllm:external_prefix_cache_hits_total")
	p.Counters[StoreTokens] = selectors("lmcache:num_stored_tokens_total")
	return p
}

// llamacppProfile reads llama.cpp's server (--metrics). It has no prefix-cache query/hit or
// offload counters; its prompt token counter counts only computed tokens.
func llamacppProfile() Profile {
	counters := map[Counter][]Selector{}
	for _, c := range Counters() {
		counters[c] = nil
	}
	counters[PromptTokensLocalCompute] = selectors("llamacpp:prompt_tokens_total")
	counters[PromptTokensCached] = selectors("llamacpp:prompt_tokens_cached_total")
	counters[GenerationTokens] = selectors("llamacpp:tokens_predicted_total")
	return Profile{
		Name:     "llamacpp",
		Counters: counters,
		Gauges: map[Gauge][]Selector{
			KVUsage:         selectors("llamacpp:kv_cache_usage_ratio"),
			RequestsRunning: selectors("llamacpp:requests_processing"),
			RequestsWaiting: selectors("llamacpp:requests_deferred"),
		},
		LazyFamilies: map[string]bool{},
	}
}

// WithOverrides returns a copy of p where each key (a normalized counter or gauge name) reads
// only from the given selector, so a fork that renames metrics still works. An override of a
// family the profile declares lazy stays lazy.
func (p Profile) WithOverrides(overrides map[string]string) (Profile, error) {
	out := p.clone()
	keys := slices.Sorted(maps.Keys(overrides))
	for _, key := range keys {
		sel, err := ParseSelector(overrides[key])
		if err != nil {
			return Profile{}, fmt.Errorf("metric override %s: %w", key, err)
		}
		switch {
		case slices.Contains(Counters(), Counter(key)):
			out.Counters[Counter(key)] = []Selector{sel}
		case slices.Contains(Gauges(), Gauge(key)):
			out.Gauges[Gauge(key)] = []Selector{sel}
		default:
			return Profile{}, fmt.Errorf("metric override %s: unknown counter (known: %v)", key, knownNames())
		}
	}
	return out, nil
}

func knownNames() []string {
	var names []string
	for _, c := range Counters() {
		names = append(names, string(c))
	}
	for _, g := range Gauges() {
		names = append(names, string(g))
	}
	sort.Strings(names)
	return names
}

func (p Profile) clone() Profile {
	out := p
	out.Counters = maps.Clone(p.Counters)
	out.Gauges = maps.Clone(p.Gauges)
	out.LazyFamilies = maps.Clone(p.LazyFamilies)
	if out.Counters == nil {
		out.Counters = map[Counter][]Selector{}
	}
	if out.Gauges == nil {
		out.Gauges = map[Gauge][]Selector{}
	}
	return out
}

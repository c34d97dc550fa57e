package engine

import (
	"slices"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// KVBM is NVIDIA Dynamo's KV Block Manager as vLLM's KV connector: vLLM's own /metrics plus
// KVBM's on their own port.
var KVBM = &Definition{
	Name:         "kvbm",
	Description:  "NVIDIA Dynamo KVBM under vLLM (DYN_KVBM_CPU_CACHE_GB, DYN_KVBM_METRICS=true; its metrics on port 6880)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "DYN_KVBM_CPU_CACHE_GB",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool and block size from vllm:cache_config_info, else the scenario; the host tier (DYN_KVBM_CPU_CACHE_GB) from the scenario",
	Tokenize:     TokenizeCount,
	CachedTokens: VLLM.CachedTokens,
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "vLLM's external (connector) hits covering the prompt; kvbm_onboard_blocks_h2d x block size cross-checks the reload"},
		{verdict.GPUHit, "vLLM GPU prefix-cache hits beyond the shared prefix, no connector hits"},
		{verdict.Partial, "hits from both, or hits well below the prompt; tokens from the disk tier (kvbm_onboard_blocks_d2d, or KVBM v2's kvbm_onboard_blocks_d2h staged through the host) and from object storage (kvbm_onboard_blocks_o2d) are noted"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
	},
	Proves:            "every verdict from vLLM's hit counters, the reload cross-checked by KVBM's onboarded blocks (host, disk and object onboards to the GPU) converted to tokens with the engine's block size, and the tokens that came from disk named",
	Diagnoses:         []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:          "vllm:prefix_cache_hits_total and vllm:external_prefix_cache_hits_total (main URL); kvbm_onboard_blocks_h2d (host->GPU, the reload; in KVBM v2 including disk blocks staged through the host), kvbm_onboard_blocks_d2h (v2: disk->host), kvbm_onboard_blocks_d2d (v1: disk->GPU), kvbm_onboard_blocks_o2d (object->GPU), kvbm_offload_blocks_d2h (the store), kvbm_offload_blocks_h2d/_d2d/_d2o (to disk and object), kvbm_matched_tokens (KVBM URL)",
	Pitfalls:          "KVBM counts blocks, not tokens, and its Rust counters carry no _total suffix; kvbm_offload_blocks_h2d is host->disk, not a reload; KVBM v2 serves disk hits disk->host->GPU, so kvbm_onboard_blocks_h2d includes them; its metrics need DYN_KVBM_METRICS=true and their own URL (port 6880 by default) in target.metrics; some versions leave kvbm_onboard_blocks_h2d at 0 while kvbm_matched_tokens moves (ai-dynamo/dynamo#4549), and one counted a failed disk onboard as a hit while the model answered from stale KV (#15079); under TensorRT-LLM the engine's own families are trtllm_*, which this profile does not read",
	Families:          "kvbm_",
	FamiliesHint:      "no kvbm_* family is served: set DYN_KVBM_METRICS=true and add KVBM's own metrics URL (port 6880 by default, DYN_KVBM_METRICS_PORT) to target.metrics",
	Dialects:          kvbmDialects,
	ReloadCounterHint: "kvbm_matched_tokens moved but kvbm_onboard_blocks_h2d and _d2d read 0: a known upstream bug leaves the onboard counters at 0 on some KVBM versions, so the reload cross-check cannot be made",
	Isolation:         kvbmIsolation,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      cacheSaltKVBM,
	TokenIDsField: "return_token_ids",
	profile:       kvbmProfile,
}

func init() { register(KVBM) }

// kvbmIsolation is the engine's cache-isolation field (docs/domain.md, "Cache isolation").
var kvbmIsolation = &Isolation{Field: "cache_salt", Isolates: "the worker's own prefix cache (Dynamo forwards the field to vLLM and TensorRT-LLM)",
	Leaks: "whether KVBM's host and disk tiers key their blocks by the salt is unverified"}

// kvbmProfile is vLLM's names (KVBM is its KV connector, so vLLM's external hits are KVBM's)
// plus KVBM's block counters, which a snapshot converts to tokens with the block size vLLM's
// cache config reports. Rust's prometheus crate exposes the names as registered, without a
// _total suffix, unlabelled and at 0 from startup.
func kvbmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := vllmProfile()
	p.Name = "kvbm"
	p.Counters[metrics.StoreTokens] = sel("kvbm_offload_blocks_d2h")
	p.Counters[metrics.DiskStoreTokens] = sel("kvbm_offload_blocks_h2d")
	p.Counters[metrics.DeviceDiskStoreTokens] = sel("kvbm_offload_blocks_d2d")
	p.Counters[metrics.ObjectStoreTokens] = sel("kvbm_offload_blocks_d2o")
	p.Counters[metrics.ReloadTokens] = sel("kvbm_onboard_blocks_h2d")
	p.Counters[metrics.DiskReloadTokens] = sel("kvbm_onboard_blocks_d2d")
	p.Counters[metrics.DiskStagedTokens] = sel("kvbm_onboard_blocks_d2h")
	p.Counters[metrics.ObjectReloadTokens] = sel("kvbm_onboard_blocks_o2d")
	p.Counters[metrics.MatchedTokens] = sel("kvbm_matched_tokens")
	p.BlockCounters = map[metrics.Counter]bool{}
	for _, c := range []metrics.Counter{metrics.StoreTokens, metrics.DiskStoreTokens, metrics.DeviceDiskStoreTokens, metrics.ObjectStoreTokens,
		metrics.ReloadTokens, metrics.DiskReloadTokens, metrics.DiskStagedTokens, metrics.ObjectReloadTokens} {
		p.BlockCounters[c] = true
	}
	return p
}

// kvbmDialects are vLLM's dialects plus KVBM's two connectors, read from ai-dynamo/dynamo.
var kvbmDialects = append(slices.Clone(vllmDialects),
	MetricsDialect{
		Name:     "kvbm-v1",
		Upstream: "ai-dynamo/dynamo lib/llm/src/block_manager/metrics_kvbm.rs at 3c24940c: disk hits onboard disk->GPU (kvbm_onboard_blocks_d2d)",
		Match: func(e metrics.Exposition) bool {
			return e.Has("kvbm_onboard_blocks_h2d") && !e.Has("kvbm_onboard_blocks_d2h")
		},
	},
	MetricsDialect{
		Name:     "kvbm-v2",
		Upstream: "ai-dynamo/dynamo #8845 (April 2026): the v2 connector stages disk hits disk->host->GPU, counted in kvbm_onboard_blocks_d2h then _h2d",
		Match:    func(e metrics.Exposition) bool { return e.Has("kvbm_onboard_blocks_d2h") },
		Note:     "KVBM v2 serves disk hits through the host tier: kvbm_onboard_blocks_d2h counts disk->host, and kvbm_onboard_blocks_h2d includes those blocks, so kvbench names the disk share of every reload",
	},
)

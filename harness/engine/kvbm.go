package engine

import (
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
		{verdict.Partial, "hits from both, or hits well below the prompt; onboarded disk blocks (kvbm_onboard_blocks_d2d) are noted"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
	},
	Proves:            "every verdict from vLLM's hit counters, the reload cross-checked by KVBM's onboarded blocks converted to tokens with the engine's block size",
	Diagnoses:         []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:          "vllm:prefix_cache_hits_total and vllm:external_prefix_cache_hits_total (main URL); kvbm_onboard_blocks_h2d (host->GPU, the reload), kvbm_offload_blocks_d2h (the store), kvbm_onboard_blocks_d2d (disk->GPU), kvbm_matched_tokens (KVBM URL)",
	Pitfalls:          "KVBM counts blocks, not tokens; kvbm_offload_blocks_h2d is host->disk, not a reload; its metrics need DYN_KVBM_METRICS=true and their own URL (port 6880 by default) in target.metrics; some versions leave kvbm_onboard_blocks_h2d at 0 while kvbm_matched_tokens moves; newer versions add an object-storage tier (kvbm_onboard_blocks_o2d), which kvbench does not read",
	Families:          "kvbm_",
	FamiliesHint:      "no kvbm_* family is served: set DYN_KVBM_METRICS=true and add KVBM's own metrics URL (port 6880 by default, DYN_KVBM_METRICS_PORT) to target.metrics",
	ReloadCounterHint: "kvbm_matched_tokens moved but kvbm_onboard_blocks_h2d and _d2d read 0: a known upstream bug leaves the onboard counters at 0 on some KVBM versions, so the reload cross-check cannot be made",
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      cacheSaltKVBM,
	TokenIDsField: "return_token_ids",

	profile: kvbmProfile,
}

func init() { register(KVBM) }

// kvbmProfile is vLLM's names (KVBM is its KV connector, so vLLM's external hits are KVBM's)
// plus KVBM's block counters, which a snapshot converts to tokens with the block size vLLM's
// cache config reports. Rust's prometheus crate adds no _total suffix; both spellings are read.
func kvbmProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := vllmProfile()
	p.Name = "kvbm"
	p.Counters[metrics.StoreTokens] = sel("kvbm_offload_blocks_d2h", "kvbm_offload_blocks_d2h_total")
	p.Counters[metrics.ReloadTokens] = sel("kvbm_onboard_blocks_h2d", "kvbm_onboard_blocks_h2d_total")
	p.Counters[metrics.DiskReloadTokens] = sel("kvbm_onboard_blocks_d2d", "kvbm_onboard_blocks_d2d_total")
	p.Counters[metrics.DiskStoreTokens] = sel("kvbm_offload_blocks_h2d", "kvbm_offload_blocks_h2d_total")
	p.Counters[metrics.MatchedTokens] = sel("kvbm_matched_tokens", "kvbm_matched_tokens_total")
	p.BlockCounters = map[metrics.Counter]bool{
		metrics.StoreTokens: true, metrics.ReloadTokens: true, metrics.DiskReloadTokens: true, metrics.DiskStoreTokens: true,
	}
	return p
}

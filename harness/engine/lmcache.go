package engine

import (
	"slices"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// LMCache is vLLM with the LMCache connector (LMCACHE_LOCAL_CPU, LMCACHE_MAX_LOCAL_CPU_SIZE,
// or --kv-offloading-backend lmcache).
var LMCache = &Definition{
	Name:         "lmcache",
	Description:  "vLLM with the LMCache connector's local CPU tier (LMCACHE_MAX_LOCAL_CPU_SIZE GB, or --kv-offloading-backend lmcache)",
	Topology:     capacity.SharedPool,
	HostTierFlag: "LMCACHE_MAX_LOCAL_CPU_SIZE",
	HostTierUnit: "GiB",
	Sizes:        "GPU pool from vllm:cache_config_info, else the scenario; the CPU tier from the scenario (LMCache does not report it; with --kv-offloading-backend lmcache before June 2026 vLLM's kv_offloading_size is the total over ranks, and from June 2026 the multi-process connector ignores it)",
	Tokenize:     TokenizeCount,
	CachedTokens: VLLM.CachedTokens,
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "vLLM's external (connector) hits covering the prompt, cross-checked with LMCache's own hit tokens and usage (LMCache counts no bytes: the reload rests on hits)"},
		{verdict.GPUHit, "vLLM GPU prefix-cache hits beyond the shared prefix, no external hits"},
		{verdict.Partial, "hits from both, or hits well below the prompt"},
		{verdict.Recompute, "no hits beyond the shared prefix"},
		{verdict.TierUnknown, "vLLM's external hits and LMCache's hit tokens disagree and usage does not say which is right"},
	},
	Proves:        "every verdict from vLLM's hit counters, LMCache's own hit counter cross-checking them; LMCache counts no bytes, so a reload is not confirmed by data moved. With tensor parallelism each rank (worker_id) counts the same tokens: kvbench takes the max over ranks, never their sum",
	Diagnoses:     []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:      "vllm:external_prefix_cache_hits_total (external hits) with vllm:prefix_cache_hits_total (GPU hits); lmcache:num_hit_tokens_total (LMCache's own hit tokens, max over worker_id) cross-checks them; lmcache:num_stored_tokens_total shows stores",
	Pitfalls:      "LMCache's families reach vLLM's /metrics only when PROMETHEUS_MULTIPROC_DIR is set at launch, and only for LMCacheConnectorV1: vLLM's multi-process connector (--kv-offloading-backend lmcache from June 2026) puts them on the LMCache server's own /metrics; LMCache updates its counters on a 10 s log tick, so right after a request they usually lag vLLM's; each TP rank reports the same tokens under its own worker_id; lmcache:num_requested_tokens counts tokens a retrieve was asked for, not queries; lmcache:local_cpu_evict_count counts eviction calls, not tokens",
	Families:      "lmcache:",
	FamiliesHint:  "no lmcache:* family is served: with LMCacheConnectorV1, PROMETHEUS_MULTIPROC_DIR must be set when vLLM is launched, or LMCache's metrics never reach vLLM's /metrics; the external hits come from vLLM's own counters either way",
	ConnectorHits: "LMCache updates lmcache:num_hit_tokens_total on a 10-second log tick, so right after a request it usually lags vLLM's external counter, and a known report (vllm-project/production-stack#818) has it stay at 0 while vLLM's counter moves",
	Dialects:      lmcacheDialects,
	Isolation:     lmcacheIsolation,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin:      noTwinLMCache,
	TokenIDsField: "return_token_ids",
	profile:       lmcacheProfile,
}

func init() { register(LMCache) }

// lmcacheIsolation is the engine's cache-isolation field (docs/domain.md, "Cache isolation").
var lmcacheIsolation = &Isolation{Field: "cache_salt", Isolates: "vLLM's GPU prefix cache",
	Leaks: "LMCache's V1 connector (LMCacheConnectorV1) keys its CPU tier by the tokens alone, so a salted request still hits entries stored without the salt (LMCache issue #2878, open); its MP connector honours the salt (vLLM ed333105 with LMCache #3042)"}

// lmcacheProfile is vLLM's names, vLLM's external counters being the connector's hits, with
// LMCache's own counters as the second source for the hits and the evidence for stores.
// LMCache counts no bytes or transfer seconds for its CPU tier, so those stay absent unless
// vLLM serves them. Its families carry model_name (the model path), worker_id, role and
// served_model_name, and no engine label: vLLM sums nothing of them.
func lmcacheProfile() metrics.Profile {
	sel := metrics.MustSelectors
	p := vllmProfile()
	p.Name = "lmcache"
	p.Counters[metrics.ConnectorHitTokens] = sel("lmcache:num_hit_tokens_total")
	p.Counters[metrics.StoreTokens] = sel("lmcache:num_stored_tokens_total")
	p.Counters[metrics.HostEvictions] = sel("lmcache:local_cpu_evict_count_total")
	p.Gauges[metrics.HostTierUsageBytes] = sel("lmcache:local_cache_usage")
	// Each TP rank runs its own LMCache engine under its worker_id, and one rank may split
	// its count across role="scheduler" and "worker".
	p.Parallelism.Shards, p.Parallelism.Within = []string{"worker_id"}, []string{"role"}
	return p
}

// lmcacheDialects are vLLM's dialects plus LMCache's label generations.
var lmcacheDialects = append(slices.Clone(vllmDialects),
	MetricsDialect{
		Name:     "lmcache-no-role",
		Upstream: "LMCache/LMCache before #1733 (October 2025): {model_name, worker_id}",
		Match: func(e metrics.Exposition) bool {
			return e.Has("lmcache:num_hit_tokens_total") && slices.Contains(e.LabelValues("lmcache:num_hit_tokens_total", "role"), "")
		},
	},
	MetricsDialect{
		Name:     "lmcache-both-roles",
		Upstream: "LMCache/LMCache from #3147 (May 2026): one process reports under role=\"scheduler\" and role=\"worker\"",
		Match: func(e metrics.Exposition) bool {
			return slices.Contains(e.LabelValues("lmcache:num_hit_tokens_total", "role"), "scheduler")
		},
	},
)

package engine

import (
	"slices"
	"strings"

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
	Sizes:        "GPU pool from sglang:max_total_num_tokens and the host tier in tokens from sglang:hicache_host_total_tokens where served (newer servers, HiCache on), else the scenario's [server]; page size 1 token unless --page-size",
	Tokenize:     TokenizeCount,
	CachedTokens: "usage.prompt_tokens_details.cached_tokens (--enable-cache-report), and per tier in sglext.cached_tokens_details {device, host, storage, storage_backend} when the request sends return_cached_tokens_details (servers from January 2026, HiCache on)",
	Attribution:  ByCounters,
	Verdicts: []Support{
		{verdict.CPUReload, "the request's own cached_tokens_details: host (+ storage) tokens covering the prompt, sglang:load_back_tokens_total cross-checking; on servers without the details or a cache_source label, the load-back tokens checked against the cached total"},
		{verdict.GPUHit, "cached_tokens_details (or cache_source=\"device\", or \"total\" with HiCache off): device tokens beyond the shared prefix covering the prompt, none from host"},
		{verdict.Partial, "tokens from both tiers, or cached tokens well below the prompt"},
		{verdict.Recompute, "no cached tokens beyond the shared prefix"},
		{verdict.TierUnknown, "no per-request details, no cache_source split, and no load-back tokens that agree with the cached total"},
	},
	Proves:       "every verdict, per request where the server names the tier of each request's cached tokens; the load-back and cached-token counters cross-check it, and a disagreement is reported in the verdict's notes, never averaged away",
	Diagnoses:    []string{verdict.DiagNoStores, verdict.DiagTierTooSmall, verdict.DiagRoutedElsewhere},
	Evidence:     "sglext.cached_tokens_details of the replay's response (primary); sglang:load_back_tokens_total{pool=\"kv\"} (host->GPU, the reload), sglang:hicache_backup_tokens_total{pool=\"kv\"} (GPU->host, the store, newer servers only) and sglang:cached_tokens_total{cache_source} around it (cross-check)",
	Pitfalls:     "metrics need --enable-metrics, usage's cached tokens --enable-cache-report and the per-tier details --enable-hierarchical-cache; every counter series is created on first use and SGLang's multiprocess exposition never declares an unused family, so a missing series is 0 only while a sibling shows the family live; sglang:evicted_tokens_total counts every GPU eviction, with or without a host tier, and is never a store; cached_tokens_total has no cache_source label before January 2026 and reads cache_source=\"total\" with HiCache off; storage hits are labelled storage_<backend> and reach the GPU through the host tier; load-back is split by pool (kv, swa, mamba) on newer servers and only kv counts tokens; sglang:cache_hit_rate mixes device and host hits; cache_salt does not isolate the storage tier",
	RequestTier:  true,
	Families:     "sglang:",
	FamiliesHint: "no sglang:* family is served: start the server with --enable-metrics",
	Dialects:     sglangDialects,
	Isolation:    sglangIsolation,
	// The replay's cold twin and the generated token ids (twin.go).
	ColdTwin: cacheSaltSGLang,
	profile:  sglangProfile,
}

func init() { register(SGLang) }

// sglangIsolation is the engine's cache-isolation field (docs/domain.md, "Cache isolation").
var sglangIsolation = &Isolation{Field: "cache_salt", Isolates: "the device radix cache and the host tier (HiCache L2): the salt namespaces the radix key, since SGLang PR #23300 (2026-04-21; before it the field never reached the scheduler)",
	Leaks: "the L3 storage tier keys its entries by the tokens alone, and a server older than PR #23300 ignores the field"}

// sglangProfile reads SGLang's prometheus names (--enable-metrics). It counts tokens. Every
// counter series is created on first use, and under the multiprocess collector SGLang
// always uses an unused family is not declared at all: a missing series reads 0 only where
// a sibling shows the family live in this version and mode (LiveWhen), else it is absent.
func sglangProfile() metrics.Profile {
	sel := metrics.MustSelectors
	counters := map[metrics.Counter][]metrics.Selector{}
	for _, c := range metrics.Counters() {
		counters[c] = nil
	}
	// Device hits: cache_source="device" (HiCache on), or "total" (HiCache off, where every
	// cached token is a device token). Host hits include storage hits, which are prefetched
	// into the host tier and loaded back from there.
	counters[metrics.GPUPrefixHits] = sel(`sglang:cached_tokens_total{cache_source="device"}`, `sglang:cached_tokens_total{cache_source="total"}`)
	counters[metrics.ExternalPrefixHits] = sel(`sglang:cached_tokens_total{cache_source=~"host|storage|storage_.+"}`)
	counters[metrics.CachedFromDevice] = sel(`sglang:cached_tokens_total{cache_source="device"}`)
	counters[metrics.CachedFromHost] = sel(`sglang:cached_tokens_total{cache_source="host"}`)
	// Storage hits: storage_<backend class> from #17648, the literal "storage" in the newest
	// collector (the backend stays in the request's details).
	counters[metrics.CachedFromDisk] = sel(`sglang:cached_tokens_total{cache_source=~"storage|storage_.+"}`)
	counters[metrics.PromptTokensCached] = sel("sglang:cached_tokens_total")
	counters[metrics.PromptTokens] = sel("sglang:prompt_tokens_total")
	counters[metrics.GenerationTokens] = sel("sglang:generation_tokens_total")
	// The real GPU->host store, newer servers only; older ones have none (absent).
	counters[metrics.StoreTokens] = sel(`sglang:hicache_backup_tokens_total{pool="kv"}`)
	counters[metrics.StoreBytes] = sel("sglang:hicache_backup_bytes_total")
	counters[metrics.StoreSeconds] = sel("sglang:hicache_backup_duration_seconds_sum")
	// Newer servers split load-back by pool: only kv counts tokens (swa counts window tokens,
	// mamba checkpoint slots); older ones have one unlabelled series.
	counters[metrics.ReloadTokens] = sel(`sglang:load_back_tokens_total{pool="kv"}`, `sglang:load_back_tokens_total{pool=""}`)
	counters[metrics.LoadBytes] = sel("sglang:load_back_bytes_total")
	counters[metrics.LoadSeconds] = sel("sglang:load_back_duration_seconds_sum")
	counters[metrics.DiskStoreTokens] = sel("sglang:backuped_tokens_total")
	counters[metrics.DiskStagedTokens] = sel("sglang:prefetched_tokens_total")
	counters[metrics.DeviceEvictions] = sel("sglang:evicted_tokens_total")
	gauges := map[metrics.Gauge][]metrics.Selector{}
	for _, g := range metrics.Gauges() {
		gauges[g] = nil
	}
	gauges[metrics.KVUsage] = sel("sglang:token_usage")
	gauges[metrics.RequestsRunning] = sel("sglang:num_running_reqs")
	gauges[metrics.RequestsWaiting] = sel("sglang:num_queue_reqs")
	gauges[metrics.GPUPoolTokens] = sel("sglang:max_total_num_tokens")
	gauges[metrics.BlockSizeTokens] = sel("sglang:page_size")
	gauges[metrics.HostTierTokens] = sel("sglang:hicache_host_total_tokens")
	gauges[metrics.HostTierUsedTokens] = sel("sglang:hicache_host_used_tokens")

	// Siblings that prove a family live. A cache_source series of a tier proves the split
	// exists; the host-tier gauges and the backup counter exist only on newer servers with
	// HiCache on; HiCache's families are live wherever the server shows HiCache on.
	split := sel(`sglang:cached_tokens_total{cache_source=~"device|host|storage|storage_.+"}`)
	newer := sel("sglang:hicache_host_total_tokens", "sglang:hicache_backup_tokens_total", `sglang:load_back_tokens_total{pool=~".+"}`)
	hicache := sglangHiCacheShows()
	return metrics.Profile{
		Name:     "sglang",
		Counters: counters,
		Gauges:   gauges,
		LiveWhen: map[string][]metrics.Selector{
			"sglang:cached_tokens_total":             append(split, newer[:2]...),
			"sglang:load_back_tokens_total":          hicache,
			"sglang:hicache_backup_tokens_total":     sel("sglang:hicache_host_total_tokens"),
			"sglang:hicache_backup_bytes_total":      sel("sglang:hicache_host_total_tokens"),
			"sglang:hicache_backup_duration_seconds": sel("sglang:hicache_host_total_tokens"),
			"sglang:load_back_bytes_total":           newer,
			"sglang:load_back_duration_seconds":      hicache,
			"sglang:evicted_tokens_total":            sel(`sglang:load_back_tokens_total`),
		},
		Parallelism: sglangParallelism(),
	}
}

// sglangRadixFamilies are the RadixCacheMetricsCollector's families, one series set per
// scheduler rank's tree.
var sglangRadixFamilies = []string{"sglang:evicted_tokens_total", "sglang:load_back_tokens_total", "sglang:load_back_bytes_total",
	"sglang:load_back_duration_seconds", "sglang:hicache_backup_tokens_total", "sglang:hicache_backup_bytes_total", "sglang:hicache_backup_duration_seconds"}

// sglangParallelism: every scheduler rank writes its own series. The scheduler and storage
// families carry tp_rank and pp_rank (and moe_ep_rank, ranks of the same tensor-parallel
// group); the newest radix collector adds them with dp_rank (radix_cache_metric_labels),
// where a data-parallel rank serves other requests. Before it the radix families had no rank
// label and the multiprocess registry summed the ranks' files: TP x the tokens.
func sglangParallelism() metrics.Parallelism {
	summed := map[string]bool{}
	for _, f := range sglangRadixFamilies {
		summed[f] = true
	}
	return metrics.Parallelism{Shards: []string{"tp_rank", "pp_rank", "moe_ep_rank"}, Replicas: []string{"dp_rank"}, RankSummed: summed}
}

// cachedSources lists the cache_source values of sglang:cached_tokens_total ("" for a
// series without the label).
func cachedSources(e metrics.Exposition) []string {
	return e.LabelValues("sglang:cached_tokens_total", "cache_source")
}

// sglangDialects are the shapes of SGLang's /metrics, read from sgl-project/sglang's
// metrics collectors (docs/domain.md, "Engines"). Every family appears on first use, so a
// fresh server often shows none of them yet.
var sglangDialects = []MetricsDialect{
	{
		Name:     "sglang-cached-unlabelled",
		Upstream: "sgl-project/sglang before #17648 (January 2026): sglang:cached_tokens_total{model_name} without cache_source, and no per-request cached_tokens_details",
		Match:    func(e metrics.Exposition) bool { return slices.Contains(cachedSources(e), "") },
		Note:     "this SGLang counts cached tokens without a cache_source label and sends no cached_tokens_details: no counter splits device from host hits, so they are absent (never 0); a replay's host share comes from sglang:load_back_tokens_total, checked against the cached total, or its tier is unknown",
	},
	{
		Name:     "sglang-cache-source",
		Upstream: "sgl-project/sglang from #17648 (January 2026): cached_tokens_total{cache_source=device|host|storage_<backend>|total}",
		Match: func(e metrics.Exposition) bool {
			return slices.ContainsFunc(cachedSources(e), func(s string) bool { return s != "" })
		},
	},
	{
		Name:     "sglang-hicache-off",
		Upstream: "sgl-project/sglang from #17648: cache_source=\"total\" when the scheduler has no per-tier details, i.e. HiCache is off",
		// Decided from what the server shows: "total" and no sign of a host tier. The tree's
		// class name decides nothing (UnifiedRadixCache runs HiCache when init_hicache runs).
		Match: func(e metrics.Exposition) bool {
			return slices.Contains(cachedSources(e), "total") && !sglangHostTierShown(e)
		},
		Note: "HiCache is off on this SGLang (cached tokens are counted as cache_source=\"total\", and no host-tier family, per-tier hit or load-back is served): there is no host tier, every cached token is a device token, and sglang:evicted_tokens_total counts GPU evictions, not stores",
	},
	{
		Name:     "sglang-pool-split",
		Upstream: "sgl-project/sglang at 016d8605 (released by v0.5.19): load_back_tokens_total{pool}, hicache_backup_tokens_total{pool}, hicache_host_{total,used}_tokens",
		Match: func(e metrics.Exposition) bool {
			return e.Has("sglang:hicache_host_total_tokens") || e.Has("sglang:hicache_backup_tokens_total") || e.Has("sglang:prefill_effective_tokens_total") ||
				slices.ContainsFunc(e.LabelValues("sglang:load_back_tokens_total", "pool"), func(p string) bool { return p != "" })
		},
	},
	{
		Name:     "sglang-storage",
		Upstream: "sgl-project/sglang from #17648: storage hits as cache_source=\"storage_<backend class>\"",
		Match: func(e metrics.Exposition) bool {
			return slices.ContainsFunc(cachedSources(e), func(s string) bool { return strings.HasPrefix(s, "storage_") })
		},
	},
	{
		Name:     "sglang-storage-literal",
		Upstream: "sgl-project/sglang at 01068614 (test_stat_loggers_di.py, test_cached_tokens_uses_literal_storage_source): storage hits as cache_source=\"storage\", the backend only in the request's details",
		Match:    func(e metrics.Exposition) bool { return slices.Contains(cachedSources(e), "storage") },
	},
	{
		Name:     "sglang-radix-ranks",
		Upstream: "sgl-project/sglang at 01068614 (radix_cache_metric_labels, TestRadixCacheMetricLabels): the radix families labelled {cache_type, tp_rank, pp_rank, dp_rank}",
		Match: func(e metrics.Exposition) bool {
			return slices.ContainsFunc(sglangRadixFamilies, func(f string) bool {
				return slices.ContainsFunc(e.LabelValues(f, "tp_rank"), func(r string) bool { return r != "" })
			})
		},
	},
}

// sglangHiCacheShows are the series that show HiCache on, decided from what the server
// shows: the host pool's gauges, a GPU->host backup or a load-back (newer servers, HiCache
// only); a cached-token series of a tier (per-tier details exist only with HiCache); an
// eviction by HiRadixCache, HiCache's own tree class, on the oldest servers. No class name
// shows HiCache off: UnifiedRadixCache runs it too (init_hicache).
func sglangHiCacheShows() []metrics.Selector {
	return metrics.MustSelectors("sglang:hicache_host_total_tokens", "sglang:hicache_backup_tokens_total", `sglang:load_back_tokens_total{pool=~".+"}`,
		`sglang:cached_tokens_total{cache_source=~"device|host|storage|storage_.+"}`, "sglang:load_back_tokens_total",
		`sglang:evicted_tokens_total{cache_type="HiRadixCache"}`)
}

// sglangHostTierShown reports whether the exposition shows HiCache on (sglangHiCacheShows).
func sglangHostTierShown(e metrics.Exposition) bool {
	return slices.ContainsFunc(sglangHiCacheShows(), e.Serves)
}

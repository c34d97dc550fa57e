package sim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
	"strings"
	"time"
)

// Dialects are the servers the engine can pass for: the KV model underneath is the same,
// only /metrics names, units and labels, the usage fields and per-request details change.
// Each has versions (DialectVersions): the shapes its upstream code wrote over time.
const (
	DialectVLLM     = "vllm"     // vLLM with native CPU offloading
	DialectLMCache  = "lmcache"  // vLLM with LMCache's local CPU tier: lmcache:* families, one series per TP rank
	DialectSGLang   = "sglang"   // SGLang HiCache: sglang:* token counters, per-request tier details
	DialectKVBM     = "kvbm"     // vLLM with Dynamo KVBM: block counters on a second metrics URL
	DialectTRTLLM   = "trtllm"   // TensorRT-LLM's trtllm-serve: its collector on /prometheus/metrics
	DialectLlamaCpp = "llamacpp" // llama.cpp's llama-server: one slot, counters at 6 digits
)

// Dialects lists every dialect.
var Dialects = []string{DialectVLLM, DialectLMCache, DialectSGLang, DialectKVBM, DialectTRTLLM, DialectLlamaCpp}

// Dialect versions (the dialect_version key): each one upstream shape of the exposition.
const (
	// vLLM: "" keeps kvbench's compatibility shape, every family eager under the profile's
	// switches. VLLMBeforeMetrics is the offloading connector before it had metrics
	// (September 2025 to January 2026); VLLMLabelled the labelled family with each
	// transfer_type created on its first transfer (January to June 2026), VLLMRecomputed the
	// same with prompt_tokens_recomputed (February to April 2026); VLLMFlatEager the flat
	// families beside the labelled one, all eager (June 2026); VLLMFlatLazy the flat
	// families bound on first use (from late June 2026); VLLMDiagnostics that plus the lazy
	// allocation-failure and lookup-delay families (July 2026); VLLMSimpleOffload the simple
	// CPU offload connector (VLLM_USE_SIMPLE_KV_OFFLOAD=1), which serves no offload family.
	VLLMBeforeMetrics = "before-metrics"
	VLLMLabelled      = "labelled"
	VLLMRecomputed    = "recomputed"
	VLLMFlatEager     = "flat-eager"
	VLLMFlatLazy      = "flat-lazy"
	VLLMDiagnostics   = "diagnostics"
	VLLMSimpleOffload = "simple"
	// VLLMCachedBySource adds vllm:prompt_tokens_cached_by_source_total (#56318) to the
	// diagnostics shape, each source's series created on its first token; VLLMTiered is
	// the tiering spec with an fs tier behind the CPU tier: every reload promoted from fs
	// (vllm:kv_offload_tiering_read_bytes_total{tier="1:fs"}) and counted as disk by
	// source; VLLMNewSource a server whose by-source family names a source kvbench's model
	// does not know ("cxl", not upstream: the shape of the next release's new source).
	VLLMCachedBySource = "cached-by-source"
	VLLMTiered         = "tiered"
	VLLMNewSource      = "new-source"
	// LMCache: "" is LMCacheConnectorV1 with {model_name, role, served_model_name,
	// worker_id}; LMCacheNoRole the older {model_name, worker_id}; LMCacheBothRoles a rank
	// reporting under role="scheduler" and "worker" (alternately, here); LMCacheMultiProcess
	// vLLM's multi-process connector, whose LMCache counters are not on vLLM's /metrics.
	LMCacheNoRole       = "no-role"
	LMCacheBothRoles    = "both-roles"
	LMCacheMultiProcess = "multiprocess"
	// LMCacheBySource is LMCacheConnectorV1 under a vLLM with the by-source family: the
	// connector names no tier, so its hits are external_unspecified.
	LMCacheBySource = "by-source"
	// SGLang: SGLangPoolSplit (the default) is the released shape of mid 2026, with the
	// pool label, the GPU->host backup counters and the host-tier gauges; SGLangCacheSource
	// the cache_source split of January 2026; SGLangUnlabelled the radix metrics of late 2025,
	// before it, with no per-request details either; SGLangRankLabels the newest collector
	// (sgl-project/sglang 01068614): the radix families labelled by rank on the unified tree,
	// storage hits as the literal cache_source="storage".
	SGLangPoolSplit   = "pool-split"
	SGLangCacheSource = "cache-source"
	SGLangUnlabelled  = "unlabelled"
	SGLangRankLabels  = "rank-labels"
	// KVBM: KVBMv1 onboards disk hits disk->GPU; KVBMv2 stages them disk->host->GPU.
	KVBMv1 = "v1"
	KVBMv2 = "v2"
	// TensorRT-LLM: TRTLLMNoTierSplit is the collector of March 2026; TRTLLMTierSplit adds
	// the per-tier hit tokens of September 2026.
	TRTLLMNoTierSplit = "no-tier-split"
	TRTLLMTierSplit   = "tier-split"
	// llama.cpp: LlamaCppCachedCounter from b10424 (August 2026); LlamaCppNoCachedCounter
	// before it; LlamaCppKVGauges the builds up to b5440 with the KV-usage gauges.
	LlamaCppCachedCounter   = "cached-counter"
	LlamaCppNoCachedCounter = "no-cached-counter"
	LlamaCppKVGauges        = "kv-gauges"
)

// DialectVersions lists each dialect's versions, the default first.
var DialectVersions = map[string][]string{
	DialectVLLM:     {"", VLLMBeforeMetrics, VLLMLabelled, VLLMRecomputed, VLLMFlatEager, VLLMFlatLazy, VLLMDiagnostics, VLLMSimpleOffload, VLLMCachedBySource, VLLMTiered, VLLMNewSource},
	DialectLMCache:  {"", LMCacheNoRole, LMCacheBothRoles, LMCacheMultiProcess, LMCacheBySource},
	DialectSGLang:   {SGLangPoolSplit, SGLangCacheSource, SGLangUnlabelled, SGLangRankLabels},
	DialectKVBM:     {KVBMv1, KVBMv2},
	DialectTRTLLM:   {TRTLLMNoTierSplit, TRTLLMTierSplit},
	DialectLlamaCpp: {LlamaCppCachedCounter, LlamaCppNoCachedCounter, LlamaCppKVGauges},
}

// SetDialect makes p speak dialect at version ("" for its default): another engine's
// families replace vLLM's native offload families, which only vLLM serves.
func (p *Profile) SetDialect(dialect, version string) {
	p.Dialect, p.DialectVersion = dialect, version
	if dialect != DialectVLLM {
		p.FlatOffloadMetrics, p.LabelledOffloadMetrics = false, false
	}
}

// version is p's dialect version, the dialect's default when unset.
func (p Profile) version() string {
	if p.DialectVersion != "" {
		return p.DialectVersion
	}
	if v := DialectVersions[p.Dialect]; len(v) > 0 {
		return v[0]
	}
	return ""
}

// vllmVersion is the version of the vLLM exposition the dialect writes ("" for the
// compatibility shape, and for LMCache and KVBM, whose connector is not vLLM's own).
func (p Profile) vllmVersion() string {
	if p.Dialect != DialectVLLM {
		return ""
	}
	return p.version()
}

// KVBMMetricsPath serves KVBM's own families, which a real deployment serves on their own
// port (6880 by default): a second metrics URL either way.
const KVBMMetricsPath = "/kvbm/metrics"

// TRTLLMMetricsPath is where trtllm-serve serves Prometheus text; its /metrics answers JSON.
const TRTLLMMetricsPath = "/prometheus/metrics"

// MetricsURLs lists the server's metrics URLs: /metrics, KVBM's second URL for the kvbm
// dialect, /prometheus/metrics instead for trtllm.
func (s *Server) MetricsURLs() []string {
	switch s.profile.Dialect {
	case DialectKVBM:
		return []string{s.URL() + "/metrics", s.URL() + KVBMMetricsPath}
	case DialectTRTLLM:
		return []string{s.URL() + TRTLLMMetricsPath}
	}
	return []string{s.URL() + "/metrics"}
}

// dialectRoutes adds the dialect's own routes.
func (s *Server) dialectRoutes(mux *http.ServeMux) {
	switch s.profile.Dialect {
	case DialectKVBM:
		mux.HandleFunc("GET "+KVBMMetricsPath, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_ = WriteKVBMMetrics(w, s.profile, s.engine.Counters())
		})
	case DialectTRTLLM:
		mux.HandleFunc("GET "+TRTLLMMetricsPath, s.handleMetrics)
	case DialectLlamaCpp:
		mux.HandleFunc("GET /props", s.handleProps)
		mux.HandleFunc("POST /apply-template", s.handleApplyTemplate)
	}
}

// serveMetrics answers a metrics route: the exposition, or for trtllm's /metrics the JSON
// iteration stats it serves there.
func (s *Server) serveMetrics(w http.ResponseWriter, path string) {
	if s.profile.Dialect == DialectTRTLLM && path == "/metrics" {
		c := s.engine.Counters()
		bs := max(s.profile.BlockSize, 1)
		used := c.GPUBlocksInUse
		writeJSON(w, http.StatusOK, []map[string]any{{
			"iter": c.RequestsStop + c.RequestsLength + c.RequestsAbort, "numActiveRequests": c.Running, "numQueuedRequests": c.Waiting,
			"kvCacheStats": map[string]any{"maxNumBlocks": s.profile.NumGPUBlocks, "freeNumBlocks": s.profile.NumGPUBlocks - used,
				"usedNumBlocks": used, "tokensPerBlock": bs},
		}})
		return
	}
	w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
	if s.writeMetrics(w) == nil {
		s.writeProcessStart(w)
	}
}

// writeProcessStart appends prometheus_client's process_start_time_seconds, which vLLM's
// API server serves from the default registry; under a multiprocess exposition (and on
// SGLang, which always uses one) the process collector is not registered, so it is absent.
func (s *Server) writeProcessStart(w io.Writer) {
	p := s.profile
	switch {
	case p.Dialect != DialectVLLM && p.Dialect != DialectLMCache && p.Dialect != DialectKVBM,
		p.MultiprocessExposition, slices.Contains(p.OmitMetrics, "process_start_time_seconds"):
		return
	}
	_, _ = fmt.Fprintf(w, "# HELP process_start_time_seconds Start time of the process since unix epoch in seconds.\n"+
		"# TYPE process_start_time_seconds gauge\nprocess_start_time_seconds %.2f\n", float64(s.startedAt.Load())/100)
}

// markStarted sets the process start time to now, at least one tick after the last one, so
// a simulated restart always shows. Start and the one restart request call it, never at once.
func (s *Server) markStarted() {
	s.startedAt.Store(max(time.Now().UnixMilli()/10, s.startedAt.Load()+1))
}

// handleProps answers llama-server's GET /props: one slot, whose context is the model's.
func (s *Server) handleProps(w http.ResponseWriter, _ *http.Request) {
	writeJSON(w, http.StatusOK, map[string]any{
		"total_slots":                 1,
		"default_generation_settings": map[string]any{"n_ctx": s.profile.MaxModelLen},
		"model_path":                  s.profile.Model,
	})
}

// handleApplyTemplate answers llama-server's POST /apply-template: the chat rendered with
// the generation prompt, as the completion path tokenizes it.
func (s *Server) handleApplyTemplate(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []wireMessage `json:"messages"`
	}
	if err := decodeBody(r, &req); err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "")
		return
	}
	msgs, err := flattenMessages(req.Messages)
	if err != nil {
		writeError(w, http.StatusBadRequest, err.Error(), "messages")
		return
	}
	writeJSON(w, http.StatusOK, map[string]string{"prompt": RenderChat(msgs, true)})
}

// storedTokens and reloadedTokens are the tier movements in tokens: stores fill the host
// tier at store_bytes_per_token, and every external hit is loaded back.
func storedTokens(p Profile, c Counters) int64 {
	if p.StoreBytesPerToken <= 0 {
		return 0
	}
	return c.GPUToCPUBytes / p.StoreBytesPerToken
}

func ratio(a, b int64) float64 {
	if b <= 0 {
		return 0
	}
	return float64(a) / float64(b)
}

// durations is a histogram with only the +Inf bucket: the model keeps totals, not each
// transfer's duration, so no finer bucket can be claimed.
func durations(n uint64, sum float64) Histogram {
	return Histogram{Counts: []uint64{n}, Count: n, Sum: sum}
}

// writeSGLang writes SGLang's exposition (--enable-metrics) as its version's collectors do.
// SGLang always serves through prometheus_client's multiprocess collector, and creates each
// counter series on its first positive increment: a family without series is not declared
// at all. Cached tokens carry no cache_source before the split; with it, HiCache off counts
// them as "total"; the radix families are labelled by the tree's class (cache_type), never
// by model; evicted_tokens counts every GPU eviction, backed up or not; the two newest
// versions count the GPU->host backup and split load-back by pool. Every tensor-parallel
// rank's tree writes the radix families (TensorParallelSize ranks): the newest version labels
// each rank's series, before it the ranks wrote one series the multiprocess registry sums.
func writeSGLang(w io.Writer, p Profile, c Counters) error {
	v := p.version()
	poolSplit := v == SGLangPoolSplit || v == SGLangRankLabels
	x := p.dialectExposition(nil)
	x.lazyHeaders = true
	hicache := p.CPUBlocks() > 0
	model := []string{"model_name", p.ServedModelName}
	tokenizer := model
	if v != SGLangUnlabelled {
		tokenizer = append([]string{"engine_type", "unified"}, model...)
	}
	scheduler := append([]string{"engine_type", "unified", "moe_ep_rank", "0", "pp_rank", "0", "tp_rank", "0"}, model...)
	tree := "RadixCache"
	if hicache {
		tree = "HiRadixCache"
	}
	if v == SGLangRankLabels {
		tree = "UnifiedRadixCache" // the unified tree, HiCache or not (init_hicache)
	}
	radix := []string{"cache_type", tree}
	ranks := max(p.TensorParallelSize, 1)
	// radixCount writes a radix family's count: each rank's own series in the newest version
	// (a token count the same on every rank, bytes a shard each); before it one series the
	// ranks' counts summed into (a token count ranks x, bytes the total).
	radixCount := func(extra []string, v int64, bytes bool) {
		if p.version() != SGLangRankLabels {
			x.fixed = radix
			if !bytes {
				v *= int64(ranks)
			}
			x.count(extra, v)
			return
		}
		for r := range ranks {
			x.fixed = append(slices.Clone(radix), "dp_rank", "0", "pp_rank", "0", "tp_rank", strconv.Itoa(r))
			each := v
			if bytes {
				each = int64(share(uint64(max(v, 0)), r, ranks))
			}
			x.count(extra, each)
		}
	}
	// radixDurations writes a radix histogram: each rank timed its own transfers.
	radixDurations := func(h Histogram) {
		if p.version() != SGLangRankLabels {
			x.fixed = radix
			n := uint64(ranks)
			x.histogram(nil, Histogram{Counts: []uint64{h.Count * n}, Count: h.Count * n, Sum: h.Sum * float64(n)})
			return
		}
		for r := range ranks {
			x.fixed = append(slices.Clone(radix), "dp_rank", "0", "pp_rank", "0", "tp_rank", strconv.Itoa(r))
			x.histogram(nil, h)
		}
	}
	bs := int64(max(p.BlockSize, 1))
	evicted := c.GPUEvictedBlocks * bs
	stored, reloaded := storedTokens(p, c), c.ExternalPrefixCacheHits
	if !hicache {
		reloaded = 0
	}
	counter := func(name, help string, labels []string, v int64) {
		x.family(name, "counter", help)
		if x.used(v) {
			x.fixed = labels
			x.count(nil, v)
		}
	}

	streaming := tokenizer
	if poolSplit {
		streaming = append(slices.Clone(tokenizer), "is_streaming", "true")
	}
	counter("sglang:prompt_tokens_total", "Number of prefill tokens processed.", streaming, c.PromptTokens)
	counter("sglang:generation_tokens_total", "Number of generation tokens processed.", streaming, c.GenerationTokens)
	x.family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.")
	x.fixed = tokenizer
	switch {
	case v == SGLangUnlabelled:
		if x.used(c.PromptTokensCached) {
			x.count(nil, c.PromptTokensCached)
		}
	case !hicache:
		if x.used(c.PromptTokensCached) {
			x.count([]string{"cache_source", "total"}, c.PromptTokensCached)
		}
	default:
		if x.used(c.PromptTokensLocalCacheHit) {
			x.count([]string{"cache_source", "device"}, c.PromptTokensLocalCacheHit)
		}
		source := "host"
		switch {
		case p.StorageBackend != "" && v == SGLangRankLabels:
			source = "storage" // the backend only in the request's details
		case p.StorageBackend != "":
			source = "storage_" + p.StorageBackend // the tier passes for SGLang's storage (L3)
		}
		if x.used(c.PromptTokensExternalKVTransfer) {
			x.count([]string{"cache_source", source}, c.PromptTokensExternalKVTransfer)
		}
	}
	// pools writes a pool-split radix count: kv, and swa for a sliding-window model.
	pools := func(v int64) {
		radixCount([]string{"pool", "kv"}, v, false)
		if p.SlidingWindowPool {
			radixCount([]string{"pool", "swa"}, v, false)
		}
	}
	x.family("sglang:evicted_tokens_total", "counter", "The number of device KV token slots freed by eviction, regardless of whether the data was backed up to host or destroyed.")
	if x.used(evicted) {
		radixCount(nil, evicted, false)
	}
	x.family("sglang:load_back_tokens_total", "counter", "Number of tokens loaded back from host to device.")
	if hicache && x.used(reloaded) {
		if poolSplit {
			pools(reloaded)
		} else {
			radixCount(nil, reloaded, false)
		}
	}
	x.family("sglang:load_back_duration_seconds", "histogram", "Time taken to load back tokens from host to device.")
	if reloaded > 0 {
		radixDurations(durations(c.CPUToGPUSize.Count, c.CPUToGPUSeconds))
	}
	if poolSplit && hicache {
		x.family("sglang:hicache_backup_tokens_total", "counter", "Tokens backed up from device to host.")
		if x.used(stored) {
			pools(stored)
		}
		x.family("sglang:hicache_backup_bytes_total", "counter", "Bytes backed up from device to host.")
		if x.used(c.GPUToCPUBytes) {
			radixCount(nil, c.GPUToCPUBytes, true)
		}
		x.family("sglang:hicache_backup_duration_seconds", "histogram", "Time taken to back up tokens from device to host.")
		if stored > 0 {
			radixDurations(durations(c.GPUToCPUSize.Count, c.GPUToCPUSeconds))
		}
		x.family("sglang:load_back_bytes_total", "counter", "Bytes loaded back from host to device.")
		if x.used(c.CPUToGPUBytes) {
			radixCount(nil, c.CPUToGPUBytes, true)
		}
		x.family("sglang:hicache_host_total_tokens", "gauge", "Host KV pool capacity in tokens.")
		x.fixed = scheduler
		x.count(nil, int64(p.CPUBlocks())*bs)
		x.family("sglang:hicache_host_used_tokens", "gauge", "Host KV pool tokens in use.")
		x.count(nil, int64(c.CPUBlocksUsed)*bs)
	}
	if p.StorageBackend != "" && hicache {
		storage := append(slices.Clone(scheduler), "storage_backend", p.StorageBackend)
		counter("sglang:backuped_tokens_total", "Number of tokens backed up from host to storage.", storage, stored)
		counter("sglang:prefetched_tokens_total", "Number of tokens prefetched from storage to host.", storage, reloaded)
	}
	if poolSplit {
		// Pre-seeded at 0 for every mode: the one eager counter.
		x.family("sglang:prefill_effective_tokens_total", "counter", "Prefill tokens by where they came from.")
		x.fixed = tokenizer
		hostHit, storageHit := c.PromptTokensExternalKVTransfer, int64(0)
		if p.StorageBackend != "" {
			hostHit, storageHit = 0, c.PromptTokensExternalKVTransfer
		}
		x.count([]string{"mode", "input"}, c.PromptTokensLocalCompute)
		x.count([]string{"mode", "device_hit"}, c.PromptTokensLocalCacheHit)
		x.count([]string{"mode", "host_hit"}, hostHit)
		x.count([]string{"mode", "storage_hit"}, storageHit)
		// The model's block is the server's page (--page-size).
		x.family("sglang:page_size", "gauge", "Tokens per KV page.")
		x.fixed = scheduler
		x.count(nil, bs)
		x.family("sglang:num_pages", "gauge", "KV pages in the device pool.")
		x.count(nil, int64(p.NumGPUBlocks))
	} else if v == SGLangCacheSource {
		x.family("sglang:cache_config_info", "gauge", "KV cache configuration.")
		x.fixed = []string{"num_pages", strconv.Itoa(p.NumGPUBlocks), "page_size", strconv.FormatInt(bs, 10)}
		x.count(nil, 1)
	}
	x.fixed = scheduler
	x.family("sglang:max_total_num_tokens", "gauge", "Maximum total number of tokens in the KV cache pool.")
	x.count(nil, int64(p.NumGPUBlocks)*bs)
	x.family("sglang:cache_hit_rate", "gauge", "The prefix cache hit rate.")
	x.fraction(nil, ratio(c.PromptTokensCached, c.PromptTokens))
	x.family("sglang:token_usage", "gauge", "The token usage.")
	x.fraction(nil, c.KVCacheUsage)
	x.family("sglang:num_running_reqs", "gauge", "The number of running requests.")
	x.count(nil, int64(c.Running))
	x.family("sglang:num_queue_reqs", "gauge", "The number of requests in the waiting queue.")
	x.count(nil, int64(c.Waiting))
	_, err := w.Write(x.buf.Bytes())
	return err
}

// writeTRTLLM writes trtllm-serve's /prometheus/metrics (TensorRT-LLM's MetricsCollector
// under prometheus_client's multiprocess collector): request counters created at their
// first increment, the cached-token counter at startup, the iteration gauges, block
// geometry and onboard/offload bytes; the per-tier hit tokens in the tier-split version,
// every level created at the first report.
func writeTRTLLM(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{"engine_type", "pytorch", "model_name", p.ServedModelName})
	x.lazyHeaders = true
	counter := func(name, help string, v int64) {
		x.family(name, "counter", help)
		if x.used(v) {
			x.count(nil, v)
		}
	}
	bs := int64(max(p.BlockSize, 1))
	counter("trtllm_prompt_tokens_total", "Cumulative number of prompt (input) tokens processed.", c.PromptTokens)
	counter("trtllm_generation_tokens_total", "Cumulative number of generation (output) tokens produced.", c.GenerationTokens)
	x.family("trtllm_prompt_cached_tokens_total", "counter", "Process-lifetime total prompt tokens served from KV cache.")
	x.count(nil, c.PromptTokensCached)
	if p.version() == TRTLLMTierSplit && x.used(c.PromptTokens) {
		x.family("trtllm_prompt_cache_hit_tokens_total", "counter", "Process-lifetime total prompt tokens served from each KV cache level.")
		x.count([]string{"cache_level", "0", "cache_tier", "gpu"}, c.PromptTokensLocalCacheHit)
		if p.CPUBlocks() > 0 {
			x.count([]string{"cache_level", "1", "cache_tier", "host"}, c.PromptTokensExternalKVTransfer)
		}
	}
	counter("trtllm_kv_cache_reused_blocks_total", "Cumulative number of KV cache blocks reused (cache hits)", c.PromptTokensCached/bs)
	counter("trtllm_kv_cache_onboard_bytes_total", "Total bytes transferred from host to GPU (onboard)", c.CPUToGPUBytes)
	counter("trtllm_kv_cache_offload_bytes_total", "Total bytes transferred from GPU to host (offload)", c.GPUToCPUBytes)
	x.family("trtllm_kv_cache_hit_rate", "gauge", "KV cache hit rate")
	x.fraction(nil, ratio(c.PromptTokensCached, c.PromptTokens))
	x.family("trtllm_kv_cache_utilization", "gauge", "KV cache utilization")
	x.fraction(nil, c.KVCacheUsage)
	x.family("trtllm_num_requests_running", "gauge", "Number of active requests")
	x.count(nil, int64(c.Running))
	x.family("trtllm_num_requests_waiting", "gauge", "Number of queued requests")
	x.count(nil, int64(c.Waiting))
	x.family("trtllm_kv_cache_max_blocks", "gauge", "Maximum number of KV cache blocks")
	x.count(nil, int64(p.NumGPUBlocks))
	x.family("trtllm_kv_cache_tokens_per_block", "gauge", "Number of tokens per KV cache block")
	x.count(nil, bs)
	x.family("trtllm_kv_cache_config_info", "gauge", "KV cache configuration info")
	x.fixed = []string{"enable_block_reuse", "True", "engine_type", "pytorch", "model_name", p.ServedModelName, "page_size", strconv.FormatInt(bs, 10)}
	x.count(nil, 1)
	_, err := w.Write(x.buf.Bytes())
	return err
}

// WriteKVBMMetrics writes KVBM's own exposition: Rust counters without labels or a _total
// suffix, counted in blocks (matched tokens in tokens), all at 0 from startup. The model's
// offload tier passes for KVBM's host tier, or with kvbm_tier = "disk" for its disk tier:
// stores then go device->host->disk, and disk hits are onboarded disk->GPU (v1) or staged
// disk->host->GPU (v2, counted in both onboard families).
func WriteKVBMMetrics(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{})
	bs := int64(max(p.BlockSize, 1))
	stored, hits := storedTokens(p, c)/bs, c.ExternalPrefixCacheHits/bs
	var toDisk, fromHost, fromDisk, staged int64 = 0, hits, 0, 0
	if p.KVBMTier == KVBMTierDisk {
		toDisk = stored
		if p.version() == KVBMv2 {
			staged = hits
		} else {
			fromHost, fromDisk = 0, hits
		}
	}
	x.family("kvbm_offload_blocks_d2h", "counter", "The number of offload blocks from device to host")
	x.count(nil, stored)
	x.family("kvbm_offload_blocks_h2d", "counter", "The number of offload blocks from host to disk")
	x.count(nil, toDisk)
	x.family("kvbm_offload_blocks_d2d", "counter", "The number of offload blocks from device to disk")
	x.count(nil, 0)
	x.family("kvbm_onboard_blocks_h2d", "counter", "The number of onboard blocks from host to device")
	x.count(nil, fromHost)
	if p.version() == KVBMv2 {
		x.family("kvbm_onboard_blocks_d2h", "counter", "The number of onboard blocks from disk to host")
		x.count(nil, staged)
	}
	x.family("kvbm_onboard_blocks_d2d", "counter", "The number of onboard blocks from disk to device")
	x.count(nil, fromDisk)
	x.family("kvbm_matched_tokens", "counter", "The number of matched tokens")
	x.count(nil, c.ExternalPrefixCacheHits)
	x.family("kvbm_host_cache_hit_rate", "gauge", "Host cache hit rate")
	x.fraction(nil, ratio(fromHost*bs, c.ExternalPrefixCacheQueries))
	x.family("kvbm_disk_cache_hit_rate", "gauge", "Disk cache hit rate")
	x.fraction(nil, ratio((fromDisk+staged)*bs, c.ExternalPrefixCacheQueries))
	_, err := w.Write(x.buf.Bytes())
	return err
}

// KVBM tiers the model's offload tier can pass for (kvbm_tier).
const (
	KVBMTierHost = "host"
	KVBMTierDisk = "disk"
)

// writeLMCache appends LMCache's families to vLLM's exposition: one series per TP rank
// (worker_id), each rank counting the same tokens, with the label set of the version; with
// both roles a rank's counts land under role="scheduler" or "worker" by rank, as whichever
// logger drained them. The multi-process connector puts none of them on vLLM's /metrics,
// only its lookup histogram.
func writeLMCache(x *exposition, p Profile, c Counters) {
	v := p.version()
	if v == LMCacheMultiProcess {
		x.family("vllm:lmcache_mp_lookup_duration_seconds", "histogram", "Time LMCache lookups took, in seconds.")
		x.histogram(nil, durations(uint64(max(c.RequestsStop+c.RequestsLength+c.RequestsAbort, 0)), 0))
		return
	}
	ranks := max(p.TensorParallelSize, 1)
	each := func(name, typ, help string, value float64) {
		x.family(name, typ, help)
		for r := 0; r < ranks; r++ {
			labels := []string{"model_name", p.Model, "worker_id", strconv.Itoa(r)}
			switch v {
			case LMCacheNoRole:
				labels[1] = p.ServedModelName
			case LMCacheBothRoles:
				labels = append(labels, "served_model_name", p.ServedModelName)
				for i, role := range []string{"scheduler", "worker"} {
					part := 0.0
					if typ == "gauge" && role == "worker" || typ != "gauge" && i == r%2 {
						part = value // a gauge is the worker's; counts land where they were drained
					}
					x.sample(name, append(slices.Clone(labels), "role", role), part)
				}
				continue
			default:
				labels = append(labels, "role", "worker", "served_model_name", p.ServedModelName)
			}
			x.sample(name, labels, value)
		}
	}
	each("lmcache:num_requested_tokens_total", "counter", "Total number of tokens requested from lmcache", float64(c.PromptTokensExternalKVTransfer))
	each("lmcache:num_hit_tokens_total", "counter", "Total number of tokens hit in lmcache", float64(c.PromptTokensExternalKVTransfer))
	each("lmcache:num_stored_tokens_total", "counter", "Total number of tokens stored in lmcache including evicted ones", float64(storedTokens(p, c)))
	each("lmcache:num_vllm_hit_tokens_total", "counter", "Number of hit tokens in vllm", float64(c.PromptTokensLocalCacheHit))
	each("lmcache:local_cpu_evict_count_total", "counter", "Total number of evict in local cpu backend", 0)
	each("lmcache:local_cache_usage", "gauge", "Local cache usage (bytes) of lmcache", float64(c.CPUBlocksUsed*p.BlockSize)*float64(p.StoreBytesPerToken)/float64(ranks))
}

// writeLlamaCpp writes llama-server's /metrics (--metrics): unlabelled series, all written
// on every scrape, values at the C++ stream's default 6 significant digits (names and help
// texts as the CI's llama-server v0.4.0 serves them; the KV gauges as before b5441).
func writeLlamaCpp(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{})
	x.format = formatCpp
	v := p.version()
	x.family("llamacpp:prompt_tokens_total", "counter", "Number of prompt tokens processed, excluding cached tokens")
	x.count(nil, c.PromptTokensLocalCompute)
	x.family("llamacpp:prompt_seconds_total", "counter", "Total time spent processing prompts")
	x.sample("llamacpp:prompt_seconds_total", nil, c.TimeToFirstToken.Sum)
	if v == LlamaCppCachedCounter {
		x.family("llamacpp:prompt_tokens_cached_total", "counter", "Number of prompt tokens reused from the cache")
		x.count(nil, c.PromptTokensCached)
	}
	x.family("llamacpp:tokens_predicted_total", "counter", "Number of generation tokens processed")
	x.count(nil, c.GenerationTokens)
	x.family("llamacpp:n_decode_total", "counter", "Total number of llama_decode() calls, excluding speculative decoding and multimodal decoding")
	x.count(nil, c.GenerationTokens)
	if v == LlamaCppKVGauges {
		x.family("llamacpp:kv_cache_usage_ratio", "gauge", "KV-cache usage. 1 means 100 percent usage.")
		x.fraction(nil, c.KVCacheUsage)
		x.family("llamacpp:kv_cache_tokens", "gauge", "KV-cache tokens.")
		x.count(nil, int64(c.GPUBlocksInUse*p.BlockSize))
	}
	x.family("llamacpp:requests_processing", "gauge", "Number of requests processing")
	x.count(nil, int64(c.Running))
	x.family("llamacpp:requests_deferred", "gauge", "Number of requests deferred")
	x.count(nil, int64(c.Waiting))
	_, err := w.Write(x.buf.Bytes())
	return err
}

// formatCpp writes v as a C++ stream does by default (%g, 6 significant digits):
// 1234567 -> 1.23457e+06, 1000000 -> 1e+06, 12345 -> 12345.
func formatCpp(v float64) string { return strconv.FormatFloat(v, 'g', 6, 64) }

// dialectExposition is an exposition whose series carry labels instead of vLLM's engine and
// model_name, with p's omit_metrics, metric_values and counter_offset.
func (p Profile) dialectExposition(labels []string) *exposition {
	x := &exposition{model: p.ServedModelName, engines: 1, values: p.MetricValues, fixed: labels, offset: p.CounterOffset}
	if len(p.OmitMetrics) > 0 {
		x.omit = map[string]bool{}
		for _, name := range p.OmitMetrics {
			x.omit[name] = true
		}
	}
	return x
}

// dialectFamilies adds the families of the dialect's second URL to names.
func (p Profile) dialectFamilies(names map[string]bool) {
	if p.Dialect != DialectKVBM {
		return
	}
	var b bytes.Buffer
	_ = WriteKVBMMetrics(&b, p, newCounters())
	for _, n := range familyNames(b.Bytes()) {
		names[n] = true
	}
}

func checkDialect(p Profile) error {
	if !slices.Contains(Dialects, p.Dialect) {
		return fmt.Errorf("dialect %q must be one of %v", p.Dialect, Dialects)
	}
	if vs := DialectVersions[p.Dialect]; p.DialectVersion != "" && !slices.Contains(vs, p.DialectVersion) {
		var named []string
		for _, v := range vs {
			if v != "" {
				named = append(named, v)
			}
		}
		return fmt.Errorf("dialect_version %q must be one of %s for dialect %s", p.DialectVersion, strings.Join(named, ", "), p.Dialect)
	}
	if p.KVBMTier != "" && (p.Dialect != DialectKVBM || p.KVBMTier != KVBMTierHost && p.KVBMTier != KVBMTierDisk) {
		return fmt.Errorf("kvbm_tier %q must be %s or %s, with dialect kvbm", p.KVBMTier, KVBMTierHost, KVBMTierDisk)
	}
	if (p.StorageBackend != "" || p.SlidingWindowPool) && p.Dialect != DialectSGLang {
		return fmt.Errorf("storage_backend and sliding_window_pool need dialect sglang")
	}
	return nil
}

// sglext is SGLang's extension of the final chunk: the cached prompt tokens per tier, sent
// when the request asks with return_cached_tokens_details.
type sglext struct {
	CachedTokensDetails cachedTokensDetails `json:"cached_tokens_details"`
}

// cachedTokensDetails omits storage and storage_backend without a storage tier, as SGLang
// does.
type cachedTokensDetails struct {
	Device         int     `json:"device"`
	Host           int     `json:"host"`
	Storage        *int    `json:"storage,omitempty"`
	StorageBackend *string `json:"storage_backend,omitempty"`
}

// sglext returns the request's per-tier details, nil unless the dialect is SGLang, the
// request asked for them, the version has them (January 2026 and later), HiCache is on and
// something was cached: SGLang sends none otherwise.
func (g *generation) sglext() *sglext {
	p := g.server.profile
	if p.Dialect != DialectSGLang || !g.cachedDetails || p.version() == SGLangUnlabelled || p.CPUBlocks() <= 0 {
		return nil
	}
	dev, ext := g.first.GPUHitTokens, g.first.ExternalHitTokens
	if dev+ext == 0 {
		return nil
	}
	d := cachedTokensDetails{Device: dev, Host: ext}
	if b := p.StorageBackend; b != "" {
		d.Host, d.Storage, d.StorageBackend = 0, &ext, &b
	}
	return &sglext{d}
}

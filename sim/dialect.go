package sim

import (
	"bytes"
	"fmt"
	"io"
	"net/http"
	"slices"
	"strconv"
)

// Dialects are the servers the engine can pass for: the KV model underneath is the same,
// only /metrics names, units and labels, the usage fields and per-request details change.
const (
	DialectVLLM    = "vllm"    // vLLM with native CPU offloading
	DialectLMCache = "lmcache" // vLLM with LMCache's local CPU tier: lmcache:* families, one series per TP rank
	DialectSGLang  = "sglang"  // SGLang HiCache: sglang:* token counters, per-request tier details
	DialectKVBM    = "kvbm"    // vLLM with Dynamo KVBM: block counters on a second metrics URL
	DialectTRTLLM  = "trtllm"  // TensorRT-LLM: cached prompt tokens with no tier split
)

// Dialects lists every dialect.
var Dialects = []string{DialectVLLM, DialectLMCache, DialectSGLang, DialectKVBM, DialectTRTLLM}

// KVBMMetricsPath serves KVBM's own families, which a real deployment serves on their own
// port (6880 by default): a second metrics URL either way.
const KVBMMetricsPath = "/kvbm/metrics"

// MetricsURLs lists the server's metrics URLs: /metrics, and KVBM's for the kvbm dialect.
func (s *Server) MetricsURLs() []string {
	urls := []string{s.URL() + "/metrics"}
	if s.profile.Dialect == DialectKVBM {
		urls = append(urls, s.URL()+KVBMMetricsPath)
	}
	return urls
}

// dialectRoutes adds the dialect's own routes.
func (s *Server) dialectRoutes(mux *http.ServeMux) {
	if s.profile.Dialect == DialectKVBM {
		mux.HandleFunc("GET "+KVBMMetricsPath, func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/plain; version=0.0.4; charset=utf-8")
			_ = WriteKVBMMetrics(w, s.profile, s.engine.Counters())
		})
	}
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

// writeSGLang writes SGLang's exposition (--enable-metrics): tokens, one model_name label,
// cached tokens split by cache_source with each series created on its first token.
func writeSGLang(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{"model_name", p.ServedModelName})
	x.family("sglang:prompt_tokens_total", "counter", "Number of prefill tokens processed.")
	x.count(nil, c.PromptTokens)
	x.family("sglang:generation_tokens_total", "counter", "Number of generation tokens processed.")
	x.count(nil, c.GenerationTokens)
	x.family("sglang:cached_tokens_total", "counter", "Number of cached prompt tokens.")
	if c.PromptTokensLocalCacheHit > 0 {
		x.count([]string{"cache_source", "device"}, c.PromptTokensLocalCacheHit)
	}
	if c.PromptTokensExternalKVTransfer > 0 {
		x.count([]string{"cache_source", "host"}, c.PromptTokensExternalKVTransfer)
	}
	x.family("sglang:evicted_tokens_total", "counter", "Number of tokens evicted from GPU to host.")
	x.count(nil, storedTokens(p, c))
	x.family("sglang:eviction_duration_seconds", "histogram", "Time to evict tokens from GPU to host.")
	x.histogram(nil, durations(c.GPUToCPUSize.Count, c.GPUToCPUSeconds))
	x.family("sglang:load_back_tokens_total", "counter", "Number of tokens loaded back from host to GPU.")
	x.count(nil, c.ExternalPrefixCacheHits)
	x.family("sglang:load_back_duration_seconds", "histogram", "Time to load tokens back from host to GPU.")
	x.histogram(nil, durations(c.CPUToGPUSize.Count, c.CPUToGPUSeconds))
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

// writeTRTLLM writes trtllm-serve's exposition: cached prompt tokens and two ratios, with
// nothing that tells a host hit from a GPU hit.
func writeTRTLLM(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{"engine_type", "trtllm", "model_name", p.ServedModelName})
	x.family("trtllm_prompt_tokens_total", "counter", "Number of prefill tokens processed.")
	x.count(nil, c.PromptTokens)
	x.family("trtllm_prompt_cached_tokens_total", "counter", "Number of prefill tokens served from the KV cache.")
	x.count(nil, c.PromptTokensCached)
	x.family("trtllm_kv_cache_hit_rate", "gauge", "KV cache block reuse hit rate.")
	x.fraction(nil, ratio(c.PromptTokensCached, c.PromptTokens))
	x.family("trtllm_kv_cache_utilization", "gauge", "KV cache utilization.")
	x.fraction(nil, c.KVCacheUsage)
	_, err := w.Write(x.buf.Bytes())
	return err
}

// WriteKVBMMetrics writes KVBM's own exposition: Rust counters without labels or a _total
// suffix, counted in blocks (matched tokens in tokens). The model has no disk tier, so the
// disk families read 0.
func WriteKVBMMetrics(w io.Writer, p Profile, c Counters) error {
	x := p.dialectExposition([]string{})
	bs := int64(max(p.BlockSize, 1))
	x.family("kvbm_offload_blocks_d2h", "counter", "The number of offload blocks from device to host")
	x.count(nil, storedTokens(p, c)/bs)
	x.family("kvbm_offload_blocks_h2d", "counter", "The number of offload blocks from host to disk")
	x.count(nil, 0)
	x.family("kvbm_onboard_blocks_h2d", "counter", "The number of onboard blocks from host to device")
	x.count(nil, c.ExternalPrefixCacheHits/bs)
	x.family("kvbm_onboard_blocks_d2d", "counter", "The number of onboard blocks from disk to device")
	x.count(nil, 0)
	x.family("kvbm_matched_tokens", "counter", "The number of matched tokens")
	x.count(nil, c.ExternalPrefixCacheHits)
	x.family("kvbm_host_cache_hit_rate", "gauge", "Host cache hit rate")
	x.fraction(nil, ratio(c.ExternalPrefixCacheHits, c.ExternalPrefixCacheQueries))
	x.family("kvbm_disk_cache_hit_rate", "gauge", "Disk cache hit rate")
	x.fraction(nil, 0)
	_, err := w.Write(x.buf.Bytes())
	return err
}

// writeLMCache appends LMCache's families to vLLM's exposition: one series per TP rank
// (worker_id), each rank counting the same tokens.
func writeLMCache(x *exposition, p Profile, c Counters) {
	ranks := max(p.TensorParallelSize, 1)
	each := func(name, typ, help string, v float64) {
		x.family(name, typ, help)
		for r := 0; r < ranks; r++ {
			x.sample(name, []string{"model_name", p.ServedModelName, "role", "worker", "worker_id", strconv.Itoa(r)}, v)
		}
	}
	requested := c.PromptTokens - c.PromptTokensLocalCacheHit
	each("lmcache:num_requested_tokens_total", "counter", "Total number of tokens requested from lmcache", float64(requested))
	each("lmcache:num_hit_tokens_total", "counter", "Total number of tokens hit in lmcache", float64(c.PromptTokensExternalKVTransfer))
	each("lmcache:num_stored_tokens_total", "counter", "Total number of tokens stored in lmcache", float64(storedTokens(p, c)))
	each("lmcache:num_vllm_hit_tokens_total", "counter", "Number of hit tokens in vllm", float64(c.PromptTokensLocalCacheHit))
	each("lmcache:local_cpu_evict_count_total", "counter", "Total number of evictions in local cpu backend", 0)
	each("lmcache:local_cache_usage", "gauge", "The local cache usage (bytes) of lmcache", float64(c.CPUBlocksUsed*p.BlockSize)*float64(p.StoreBytesPerToken)/float64(ranks))
}

// dialectExposition is an exposition whose series carry labels instead of vLLM's engine and
// model_name, with p's omit_metrics and metric_values faults.
func (p Profile) dialectExposition(labels []string) *exposition {
	x := &exposition{model: p.ServedModelName, engines: 1, values: p.MetricValues, fixed: labels}
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
	return nil
}

// sglext is SGLang's extension of the final chunk: the cached prompt tokens per tier, sent
// when the request asks with return_cached_tokens_details.
type sglext struct {
	CachedTokensDetails cachedTokensDetails `json:"cached_tokens_details"`
}

type cachedTokensDetails struct {
	Device         int     `json:"device"`
	Host           int     `json:"host"`
	Storage        int     `json:"storage"`
	StorageBackend *string `json:"storage_backend"`
}

// sglext returns the request's per-tier details, nil unless the dialect is SGLang and the
// request asked for them.
func (g *generation) sglext() *sglext {
	if g.server.profile.Dialect != DialectSGLang || !g.cachedDetails {
		return nil
	}
	return &sglext{cachedTokensDetails{Device: g.first.GPUHitTokens, Host: g.first.ExternalHitTokens}}
}

package sim

import (
	"bytes"
	"io"
	"math"
	"slices"
	"strconv"
	"strings"
)

// Counters is a snapshot of what the engine exports on /metrics, for one engine.
type Counters struct {
	PrefixCacheQueries         int64
	PrefixCacheHits            int64
	ExternalPrefixCacheQueries int64
	ExternalPrefixCacheHits    int64

	PromptTokens                   int64
	PromptTokensLocalCompute       int64
	PromptTokensLocalCacheHit      int64
	PromptTokensExternalKVTransfer int64
	PromptTokensCached             int64
	GenerationTokens               int64

	Preemptions int64
	// FullyCachedPrompts counts first admissions whose every prompt token but the last was
	// cached (vLLM's prompt_tokens_recomputed, February to April 2026).
	FullyCachedPrompts int64
	RequestsStop       int64
	RequestsLength     int64
	RequestsAbort      int64

	GPUToCPUBytes   int64
	CPUToGPUBytes   int64
	GPUToCPUSeconds float64
	CPUToGPUSeconds float64
	GPUToCPUSize    Histogram // bytes per store transfer
	// StoresSkipped counts block stores the store_threshold filter skipped;
	// AllocationFailures block stores that found no room.
	StoresSkipped      int64
	AllocationFailures int64
	CPUToGPUSize       Histogram // bytes per load transfer

	TimeToFirstToken  Histogram
	InterTokenLatency Histogram
	E2ERequestLatency Histogram

	// Gauges.
	Running         int
	Waiting         int
	GPUBlocksInUse  int // referenced by running sequences
	GPUBlocksCached int // holding a cached block hash, in use or free
	CPUBlocksUsed   int
	KVCacheUsage    float64 // GPUBlocksInUse / pool size
	// GPUEvictedBlocks counts cached GPU blocks dropped to make room, backed up or not.
	GPUEvictedBlocks int64
}

// Histogram is a Prometheus histogram: per-bucket counts (not cumulative) for Bounds plus
// the +Inf overflow as the last element.
type Histogram struct {
	Bounds []float64
	Counts []uint64
	Count  uint64
	Sum    float64
}

func newHistogram(bounds []float64) Histogram {
	return Histogram{Bounds: bounds, Counts: make([]uint64, len(bounds)+1)}
}

func (h *Histogram) observe(v float64) {
	i, _ := slices.BinarySearch(h.Bounds, v)
	h.Counts[i]++
	h.Count++
	h.Sum += v
}

func (h Histogram) clone() Histogram {
	h.Counts = slices.Clone(h.Counts)
	return h
}

// Bucket bounds as vLLM declares them.
var (
	ttftBounds = []float64{0.001, 0.005, 0.01, 0.02, 0.04, 0.06, 0.08, 0.1, 0.25, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0, 160.0, 640.0, 2560.0}
	itlBounds = []float64{0.01, 0.025, 0.05, 0.075, 0.1, 0.15, 0.2, 0.3, 0.4, 0.5, 0.75, 1.0,
		2.5, 5.0, 7.5, 10.0, 20.0, 40.0, 80.0}
	e2eBounds = []float64{0.3, 0.5, 0.8, 1.0, 1.5, 2.0, 2.5, 5.0, 10.0, 15.0, 20.0, 30.0, 40.0,
		50.0, 60.0, 120.0, 240.0, 480.0, 960.0, 1920.0, 7680.0}
	offloadSizeBounds = []float64{1e6, 1e7, 1e8, 1.5e8, 2e8, 1e9, 1e10}
)

func newCounters() Counters {
	return Counters{
		GPUToCPUSize:      newHistogram(offloadSizeBounds),
		CPUToGPUSize:      newHistogram(offloadSizeBounds),
		TimeToFirstToken:  newHistogram(ttftBounds),
		InterTokenLatency: newHistogram(itlBounds),
		E2ERequestLatency: newHistogram(e2eBounds),
	}
}

// busyCounters has every counter moved, so every lazily created series exists.
func busyCounters() Counters {
	c := newCounters()
	for _, f := range []*int64{&c.PrefixCacheQueries, &c.PrefixCacheHits, &c.ExternalPrefixCacheQueries, &c.ExternalPrefixCacheHits,
		&c.PromptTokens, &c.PromptTokensLocalCompute, &c.PromptTokensLocalCacheHit, &c.PromptTokensExternalKVTransfer, &c.PromptTokensCached,
		&c.GenerationTokens, &c.Preemptions, &c.FullyCachedPrompts, &c.RequestsStop, &c.GPUToCPUBytes, &c.CPUToGPUBytes,
		&c.StoresSkipped, &c.AllocationFailures, &c.GPUEvictedBlocks} {
		*f = 1 << 20
	}
	for _, h := range []*Histogram{&c.GPUToCPUSize, &c.CPUToGPUSize} {
		h.Count = 1
	}
	return c
}

func (c Counters) clone() Counters {
	c.GPUToCPUSize = c.GPUToCPUSize.clone()
	c.CPUToGPUSize = c.CPUToGPUSize.clone()
	c.TimeToFirstToken = c.TimeToFirstToken.clone()
	c.InterTokenLatency = c.InterTokenLatency.clone()
	c.E2ERequestLatency = c.E2ERequestLatency.clone()
	return c
}

// WriteMetrics writes c as the profile's dialect writes its Prometheus text exposition:
// vLLM V1's by default, shaped by p's metric switches and dialect version (names, offload
// generations, lazy series, data-parallel engines).
func WriteMetrics(w io.Writer, p Profile, c Counters) error {
	switch p.Dialect {
	case DialectSGLang:
		return writeSGLang(w, p, c)
	case DialectTRTLLM:
		return writeTRTLLM(w, p, c)
	case DialectLlamaCpp:
		return writeLlamaCpp(w, p, c)
	}
	x := exposition{model: p.ServedModelName, engines: max(p.DataParallelEngines, 1), values: p.MetricValues,
		lazyHeaders: p.MultiprocessExposition, offset: p.CounterOffset}
	if len(p.OmitMetrics) > 0 {
		x.omit = make(map[string]bool, len(p.OmitMetrics))
		for _, name := range p.OmitMetrics {
			x.omit[name] = true
		}
	}
	prefix, usage := "vllm:prefix_cache", "vllm:kv_cache_usage_perc"
	if p.LegacyNames {
		prefix, usage = "vllm:gpu_prefix_cache", "vllm:gpu_cache_usage_perc"
	}

	x.family("vllm:num_requests_running", "gauge", "Number of requests in model execution batches.")
	x.count(nil, int64(c.Running))
	x.family("vllm:num_requests_waiting", "gauge", "Number of requests waiting to be processed.")
	x.count(nil, int64(c.Waiting))
	x.family(usage, "gauge", "KV-cache usage. 1 means 100 percent usage.")
	x.fraction(nil, c.KVCacheUsage)
	x.family(prefix+"_queries_total", "counter", "Prefix cache queries, in terms of number of queried tokens.")
	x.count(nil, c.PrefixCacheQueries)
	x.family(prefix+"_hits_total", "counter", "Prefix cache hits, in terms of number of cached tokens.")
	x.count(nil, c.PrefixCacheHits)
	x.family("vllm:external_prefix_cache_queries_total", "counter", "External prefix cache queries from KV connector cross-instance cache sharing, in terms of number of queried tokens.")
	x.count(nil, c.ExternalPrefixCacheQueries)
	x.family("vllm:external_prefix_cache_hits_total", "counter", "External prefix cache hits from KV connector cross-instance cache sharing, in terms of number of cached tokens.")
	x.count(nil, c.ExternalPrefixCacheHits)
	x.family("vllm:num_preemptions_total", "counter", "Cumulative number of preemption from the engine.")
	x.count(nil, c.Preemptions)
	x.family("vllm:prompt_tokens_total", "counter", "Number of prefill tokens processed.")
	x.count(nil, c.PromptTokens)
	x.family("vllm:prompt_tokens_by_source_total", "counter", "Number of prompt tokens by source.")
	x.count([]string{"source", "local_compute"}, c.PromptTokensLocalCompute)
	x.count([]string{"source", "local_cache_hit"}, c.PromptTokensLocalCacheHit)
	x.count([]string{"source", "external_kv_transfer"}, c.PromptTokensExternalKVTransfer)
	x.family("vllm:prompt_tokens_cached_total", "counter", "Number of cached prompt tokens (local + external).")
	x.count(nil, c.PromptTokensCached)
	if p.vllmVersion() == VLLMRecomputed {
		x.family("vllm:prompt_tokens_recomputed_total", "counter", "Number of cached prompt tokens recomputed for forward pass.")
		x.count(nil, c.FullyCachedPrompts)
	}
	if p.CachedBySourceMetrics {
		x.family("vllm:prompt_tokens_cached_by_source_total", "counter", "Number of cached prompt tokens by the tier that served them.")
		x.count([]string{"source", "device"}, c.PromptTokensLocalCacheHit)
		x.count([]string{"source", "host"}, c.PromptTokensExternalKVTransfer)
	}
	if sources := p.cachedSources(c); sources != nil {
		x.family("vllm:prompt_tokens_cached_by_source_total", "counter", "Number of cached prompt tokens by the tier that served them.")
		for _, src := range sources {
			if x.used(src.tokens) {
				x.count([]string{"source", src.name}, src.tokens)
			}
		}
	}
	x.family("vllm:generation_tokens_total", "counter", "Number of generation tokens processed.")
	x.count(nil, c.GenerationTokens)
	x.family("vllm:request_success_total", "counter", "Count of successfully processed requests.")
	x.count([]string{"finished_reason", "stop"}, c.RequestsStop)
	x.count([]string{"finished_reason", "length"}, c.RequestsLength)
	x.count([]string{"finished_reason", "abort"}, c.RequestsAbort)
	x.family("vllm:time_to_first_token_seconds", "histogram", "Histogram of time to first token in seconds.")
	x.histogram(nil, c.TimeToFirstToken)
	x.family("vllm:inter_token_latency_seconds", "histogram", "Histogram of inter-token latency in seconds.")
	x.histogram(nil, c.InterTokenLatency)
	x.family("vllm:e2e_request_latency_seconds", "histogram", "Histogram of e2e request latency in seconds.")
	x.histogram(nil, c.E2ERequestLatency)

	x.family("vllm:cache_config_info", "gauge", "Information of the LLMEngine CacheConfig")
	backend, size := p.offloadConfig()
	for i := 0; i < x.engines; i++ {
		// vLLM leaves model_name off this family.
		x.sample("vllm:cache_config_info", []string{
			"block_size", strconv.Itoa(p.BlockSize),
			"cache_dtype", p.CacheDtype,
			"enable_prefix_caching", "True",
			"engine", strconv.Itoa(i),
			"gpu_memory_utilization", "0.9",
			"kv_offloading_backend", backend,
			"kv_offloading_size", size,
			"num_cpu_blocks", "None",
			"num_gpu_blocks", strconv.FormatUint(share(uint64(p.NumGPUBlocks), i, x.engines), 10),
		}, 1)
	}
	writeOffload(&x, p, c)
	if p.Dialect == DialectLMCache {
		writeLMCache(&x, p, c)
	}
	_, err := w.Write(x.buf.Bytes())
	return err
}

// offloadConfig is vllm:cache_config_info's kv_offloading_backend and kv_offloading_size: a
// native tier's size, or LMCache's when the multi-process connector was asked for with
// --kv-offloading-backend lmcache (which then ignores it).
func (p Profile) offloadConfig() (backend, size string) {
	switch {
	case p.Dialect == DialectVLLM && p.CPUBlocks() > 0:
		return "native", formatFloat(p.CPUOffloadGiB)
	case p.Dialect == DialectLMCache && p.DialectVersion == LMCacheMultiProcess:
		return "lmcache", formatFloat(p.CPUOffloadGiB)
	}
	// A connector configured apart (LMCache's environment, KVBM) is not vLLM's kv_offloading_size.
	return "None", "None"
}

// offloadDirection is one direction of the native connector's transfers.
type offloadDirection struct {
	name    string // transfer_type of the labelled family
	flat    string // "store" or "load" of the flat families
	bytes   int64
	seconds float64
	size    Histogram
}

// writeOffload writes the native offloading connector's families as the dialect version's
// vLLM does: none (before its metrics, or the simple CPU connector), the labelled family
// with each direction created on its first transfer, or the flat families eager or bound on
// first use beside the labelled family.
func writeOffload(x *exposition, p Profile, c Counters) {
	dirs := []offloadDirection{
		{"GPU_to_CPU", "store", c.GPUToCPUBytes, c.GPUToCPUSeconds, c.GPUToCPUSize},
		{"CPU_to_GPU", "load", c.CPUToGPUBytes, c.CPUToGPUSeconds, c.CPUToGPUSize},
	}
	used := func(d offloadDirection) bool { return d.size.Count > 0 }
	always := func(offloadDirection) bool { return true }
	switch v := p.vllmVersion(); {
	case p.Dialect != DialectVLLM && v == "":
		// LMCache and KVBM: their connector, not vLLM's native one; the switches decide.
	case v == VLLMBeforeMetrics || v == VLLMSimpleOffload:
		return
	case v == VLLMLabelled || v == VLLMRecomputed:
		writeLabelledOffload(x, dirs, used)
		return
	case v == VLLMFlatEager:
		writeLabelledOffload(x, dirs, always)
		writeFlatOffload(x, dirs, always, p, c)
		return
	case v == VLLMFlatLazy || v == VLLMDiagnostics || v == VLLMCachedBySource || v == VLLMTiered || v == VLLMNewSource:
		writeLabelledOffload(x, dirs, always)
		writeFlatOffload(x, dirs, used, p, c)
		if v == VLLMTiered {
			writeTiering(x, c)
		}
		if v != VLLMFlatLazy {
			x.family("vllm:kv_offload_allocation_failure_total", "counter", "Number of KV offload store allocation attempts that failed.")
			if c.AllocationFailures > 0 {
				x.count(nil, c.AllocationFailures)
			}
			// Every request looks its blocks up; the model takes no time to do it.
			x.family("vllm:kv_offload_lookup_sync_delay_seconds", "histogram", "Histogram of synchronous KV offload lookup delay, in seconds.")
			if n := uint64(max(c.RequestsStop+c.RequestsLength+c.RequestsAbort, 0)); n > 0 {
				x.histogram(nil, durations(n, 0))
			}
		}
		return
	}
	// The compatibility shape of earlier kvbench: switches, every family eager.
	if p.LabelledOffloadMetrics {
		present := always
		if p.LazyOffloadSeries {
			present = used // early versions create a transfer_type's series on its first transfer
		}
		writeLabelledOffload(x, dirs, present)
	}
	if p.FlatOffloadMetrics && !p.LegacyNames && !p.LazyOffloadSeries {
		writeFlatOffload(x, dirs, always, p, c)
		x.family("vllm:kv_offload_allocation_failure_total", "counter", "Number of KV offload store allocation attempts that failed.")
		x.count(nil, c.AllocationFailures) // only injected: stores never wait on pinned blocks here
		x.family("vllm:kv_offload_cpu_cache_usage_perc", "gauge", "Fraction of CPU KV-cache space currently pinned by active transfers (0.0 = idle, 1.0 = saturated).")
		x.fraction(nil, 0) // transfers are instantaneous in the model: nothing stays pinned
	}
}

// cachedSource is one source of vllm:prompt_tokens_cached_by_source_total.
type cachedSource struct {
	name   string
	tokens int64
}

// cachedSources are the by-source family's sources the version writes, nil where it has no
// such family: GPU hits are device, external ones the source the connector names.
func (p Profile) cachedSources(c Counters) []cachedSource {
	external := ""
	switch {
	case p.vllmVersion() == VLLMCachedBySource:
		external = "host"
	case p.vllmVersion() == VLLMTiered:
		external = "disk"
	case p.vllmVersion() == VLLMNewSource:
		external = "cxl"
	case p.Dialect == DialectLMCache && p.version() == LMCacheBySource:
		external = "external_unspecified"
	default:
		return nil
	}
	return []cachedSource{{"device", c.PromptTokensLocalCacheHit}, {external, c.PromptTokensExternalKVTransfer}}
}

// writeTiering writes the tiering spec's families for one fs tier behind the CPU tier:
// every store cascades to it, every reload is promoted from it. Each tier's series is
// created on its first transfer; the usage gauges are set for every tier on each pass.
func writeTiering(x *exposition, c Counters) {
	tier := []string{"tier", "1:fs"}
	x.family("vllm:kv_offload_tiering_read_bytes_total", "counter", "Total bytes read from secondary tiers into the primary tier.")
	if x.used(c.CPUToGPUBytes) {
		x.count(tier, c.CPUToGPUBytes)
	}
	x.family("vllm:kv_offload_tiering_write_bytes_total", "counter", "Total bytes written from the primary tier to secondary tiers.")
	if x.used(c.GPUToCPUBytes) {
		x.count(tier, c.GPUToCPUBytes)
	}
	x.family("vllm:kv_offload_tiering_primary_read_usage_perc", "gauge", "Current fraction of primary-tier space used by reads to secondary tiers, labeled by tier.")
	x.fraction(tier, 0)
	x.family("vllm:kv_offload_tiering_primary_write_usage_perc", "gauge", "Current fraction of primary-tier space used by writes from secondary tiers, labeled by tier.")
	x.fraction(tier, 0)
}

// writeLabelledOffload writes the deprecated labelled family, a direction's series where
// present says so.
func writeLabelledOffload(x *exposition, dirs []offloadDirection, present func(offloadDirection) bool) {
	x.family("vllm:kv_offload_total_bytes_total", "counter", "Number of bytes offloaded by KV connector")
	for _, d := range dirs {
		if present(d) {
			x.count([]string{"transfer_type", d.name}, d.bytes)
		}
	}
	x.family("vllm:kv_offload_total_time_total", "counter", "Total time measured by all KV offloading operations")
	for _, d := range dirs {
		if present(d) {
			x.seconds([]string{"transfer_type", d.name}, d.seconds)
		}
	}
	x.family("vllm:kv_offload_size", "histogram", "Histogram of KV offload transfer size, in bytes.")
	for _, d := range dirs {
		if present(d) {
			x.histogram([]string{"transfer_type", d.name}, d.size)
		}
	}
}

// writeFlatOffload writes the flat families of June 2026, a direction's where present says
// so, and the store_threshold filter's counter when one is set (bound on its first skip
// where the directions are bound on first use).
func writeFlatOffload(x *exposition, dirs []offloadDirection, present func(offloadDirection) bool, p Profile, c Counters) {
	for _, d := range dirs {
		x.family("vllm:kv_offload_"+d.flat+"_bytes_total", "counter", "Total bytes "+d.flat+"d, "+offloadWords(d.flat)+".")
		if present(d) {
			x.count(nil, d.bytes)
		}
		x.family("vllm:kv_offload_"+d.flat+"_time_total", "counter", "Total "+d.flat+" time, "+offloadWords(d.flat)+", in seconds.")
		if present(d) {
			x.seconds(nil, d.seconds)
		}
		x.family("vllm:kv_offload_"+d.flat+"_size", "histogram", "Histogram of KV offload "+d.flat+" operation size, in bytes.")
		if present(d) {
			x.histogram(nil, d.size)
		}
	}
	if p.StoreThreshold >= 2 {
		x.family("vllm:kv_offload_stores_skipped_total", "counter", "Number of KV offload stores skipped by the store_threshold reuse filter.")
		eager := present(offloadDirection{}) // the eager shapes present every direction
		if eager || c.StoresSkipped > 0 {
			x.count(nil, c.StoresSkipped)
		}
	}
}

func offloadWords(dir string) string {
	if dir == "store" {
		return "GPU to offload storage"
	}
	return "offload storage to GPU"
}

// metricFamilies names the families p's /metrics exposes once everything has happened
// (lazy families included), faults aside.
func (p Profile) metricFamilies() map[string]bool {
	p.OmitMetrics, p.MetricValues = nil, nil
	var b bytes.Buffer
	_ = WriteMetrics(&b, p, busyCounters())
	names := map[string]bool{}
	for _, n := range familyNames(b.Bytes()) {
		names[n] = true
	}
	p.dialectFamilies(names)
	return names
}

// familyNames lists the families an exposition declares.
func familyNames(text []byte) []string {
	var out []string
	for _, line := range strings.Split(string(text), "\n") {
		if rest, ok := strings.CutPrefix(line, "# TYPE "); ok {
			out = append(out, strings.Fields(rest)[0])
		}
	}
	return out
}

// exposition builds the text format, one series per engine label for each value.
type exposition struct {
	buf     bytes.Buffer
	model   string
	engines int
	name    string // current family
	// omit and values are the omit_metrics and metric_values faults, by family name.
	omit   map[string]bool
	values map[string]float64
	skip   bool // the current family is omitted
	pinned bool // the current family's samples all read value
	value  float64
	// fixed, when not nil, replaces vLLM's engine and model_name labels (other dialects).
	fixed []string
	// lazyHeaders: a family's HELP and TYPE lines are written with its first sample, so a
	// family without series is not declared at all (prometheus_client's multiprocess
	// collector); header holds them until then.
	lazyHeaders bool
	header      string
	// offset is added to every counter sample: a server that has run a while.
	offset int64
	typ    string // the current family's type
	// format writes a sample value; nil means formatFloat (Python's client).
	format func(float64) string
}

func (x *exposition) family(name, typ, help string) {
	x.name, x.typ = name, typ
	x.skip = x.omit[name]
	x.value, x.pinned = x.values[name]
	x.header = ""
	if x.skip {
		return
	}
	h := "# HELP " + name + " " + help + "\n# TYPE " + name + " " + typ + "\n"
	if x.lazyHeaders {
		x.header = h
		return
	}
	x.buf.WriteString(h)
}

// used reports whether a lazily created counter series exists: once the count moved, or
// from the start on a server that has run a while (a counter offset).
func (x *exposition) used(v int64) bool { return v > 0 || x.offset > 0 }

// count writes an integer total split across engines.
func (x *exposition) count(labels []string, v int64) {
	if x.typ == "counter" {
		v += x.offset
	}
	for i := 0; i < x.engines; i++ {
		x.sample(x.name, x.labels(labels, i), float64(share(uint64(max(v, 0)), i, x.engines)))
	}
}

// seconds writes a float total divided evenly across engines.
func (x *exposition) seconds(labels []string, v float64) {
	for i := 0; i < x.engines; i++ {
		x.sample(x.name, x.labels(labels, i), v/float64(x.engines))
	}
}

// fraction writes the same ratio on every engine.
func (x *exposition) fraction(labels []string, v float64) {
	for i := 0; i < x.engines; i++ {
		x.sample(x.name, x.labels(labels, i), v)
	}
}

func (x *exposition) histogram(labels []string, h Histogram) {
	for i := 0; i < x.engines; i++ {
		base := x.labels(labels, i)
		cumulative := uint64(0)
		for b, n := range h.Counts {
			cumulative += n
			le := "+Inf"
			if b < len(h.Bounds) {
				le = formatFloat(h.Bounds[b])
			}
			x.sample(x.name+"_bucket", append(slices.Clone(base), "le", le), float64(share(cumulative, i, x.engines)))
		}
		x.sample(x.name+"_count", base, float64(share(h.Count, i, x.engines)))
		x.sample(x.name+"_sum", base, h.Sum/float64(x.engines))
	}
}

func (x *exposition) labels(extra []string, engine int) []string {
	if x.fixed != nil {
		return append(slices.Clone(x.fixed), extra...)
	}
	l := append([]string{"engine", strconv.Itoa(engine), "model_name", x.model}, extra...)
	return l
}

// sample writes one line with labels (name, value pairs) sorted by name, as vLLM does.
func (x *exposition) sample(name string, labels []string, v float64) {
	if x.skip {
		return
	}
	if x.pinned {
		v = x.value
	}
	if x.header != "" {
		x.buf.WriteString(x.header)
		x.header = ""
	}
	format := formatFloat
	if x.format != nil {
		format = x.format
	}
	type pair struct{ k, v string }
	pairs := make([]pair, 0, len(labels)/2)
	for i := 0; i+1 < len(labels); i += 2 {
		pairs = append(pairs, pair{labels[i], labels[i+1]})
	}
	slices.SortFunc(pairs, func(a, b pair) int { return strings.Compare(a.k, b.k) })
	x.buf.WriteString(name)
	if len(pairs) == 0 { // KVBM's unlabelled Rust counters, llama.cpp's
		x.buf.WriteString(" " + format(v) + "\n")
		return
	}
	x.buf.WriteByte('{')
	for i, p := range pairs {
		if i > 0 {
			x.buf.WriteByte(',')
		}
		x.buf.WriteString(p.k + `="` + labelEscaper.Replace(p.v) + `"`)
	}
	x.buf.WriteString("} " + format(v) + "\n")
}

var labelEscaper = strings.NewReplacer(`\`, `\\`, `"`, `\"`, "\n", `\n`)

// share is engine i's part of a total v split over n engines: floor(v/n), plus one for the
// first v mod n engines. Each part never decreases as v grows, and the parts sum to v.
func share(v uint64, i, n int) uint64 {
	q, r := v/uint64(n), v%uint64(n)
	if uint64(i) < r {
		q++
	}
	return q
}

// formatFloat writes values the way Python's client does for the common cases: "4.0" for
// small integers, shortest exponent form for large ones.
func formatFloat(v float64) string {
	switch {
	case math.IsInf(v, 1):
		return "+Inf"
	case v == math.Trunc(v) && math.Abs(v) < 1e6:
		return strconv.FormatFloat(v, 'f', 1, 64)
	default:
		return strconv.FormatFloat(v, 'g', -1, 64)
	}
}

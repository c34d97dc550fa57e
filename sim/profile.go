package sim

import (
	"bytes"
	"embed"
	"errors"
	"fmt"
	"os"
	"path"
	"path/filepath"
	"slices"
	"sort"
	"strings"
	"time"

	"github.com/BurntSushi/toml"
)

//go:embed profiles/*.toml
var profileFiles embed.FS

// ErrUnknownProfile is returned for a profile name that is not embedded.
var ErrUnknownProfile = errors.New("unknown simulator profile")

// Profile describes one simulated server: its cache geometry, its speed, the shape of its
// /metrics and the faults it injects. Field names follow the TOML keys.
type Profile struct {
	Name        string `toml:"name"`
	Description string `toml:"description"`

	// Model is the repository name (/v1/models root); ServedModelName is what requests
	// and the model_name label use.
	Model           string `toml:"model"`
	ServedModelName string `toml:"served_model_name"`
	Version         string `toml:"version"`
	MaxModelLen     int    `toml:"max_model_len"`

	BlockSize    int    `toml:"block_size"`
	NumGPUBlocks int    `toml:"num_gpu_blocks"`
	CacheDtype   string `toml:"cache_dtype"`
	// CPUOffloadGiB sizes the CPU tier; 0 disables offloading.
	CPUOffloadGiB float64 `toml:"cpu_offload_gib"`
	// StoreBytesPerToken fills the CPU tier and the GPU_to_CPU counters; LoadBytesPerToken
	// feeds CPU_to_GPU (equal to the store figure when unset).
	StoreBytesPerToken int64 `toml:"store_bytes_per_token"`
	LoadBytesPerToken  int64 `toml:"load_bytes_per_token"`
	// StoreThreshold is vLLM's store_threshold (kv_connector_extra_config): with 2 or more a
	// block is stored only once it has been looked up that many times, and each skipped
	// store counts in vllm:kv_offload_stores_skipped_total (served only then).
	StoreThreshold int `toml:"store_threshold"`
	// AllocationFailEveryNthStore: block stores n, 2n, ... find no room in the CPU tier and
	// count in vllm:kv_offload_allocation_failure_total instead.
	AllocationFailEveryNthStore int `toml:"allocation_fail_every_nth_store"`

	// Speed divides every modelled duration; Options.Speed overrides it.
	Speed                  float64 `toml:"speed"`
	PrefillTokensPerSecond float64 `toml:"prefill_tokens_per_second"`
	// PrefillSlowdownPer100k slows each computed token by this fraction per 100k tokens of
	// context before it (attention cost grows with context).
	PrefillSlowdownPer100k float64       `toml:"prefill_slowdown_per_100k"`
	DecodeTokensPerSecond  float64       `toml:"decode_tokens_per_second"`
	CPUToGPUBytesPerSecond float64       `toml:"cpu_to_gpu_bytes_per_second"`
	GPUToCPUBytesPerSecond float64       `toml:"gpu_to_cpu_bytes_per_second"`
	RequestOverhead        time.Duration `toml:"request_overhead"`
	// ReloadLatency is the fixed cost of a prefill that loads from the CPU tier beyond the
	// copy at cpu_to_gpu_bytes_per_second (the lookup, the engine step spent waiting for the
	// load); it is not counted in the load seconds, which time the copy alone. With it a
	// short prompt recomputes faster than it reloads, so a reload curve has a break-even.
	ReloadLatency time.Duration `toml:"reload_latency"`
	// JitterFraction multiplies each request's durations by a factor in
	// [1-JitterFraction, 1+JitterFraction] drawn from (JitterSeed, request number).
	JitterFraction float64 `toml:"jitter_fraction"`
	JitterSeed     uint64  `toml:"jitter_seed"`

	// Output: a request naturally produces a reasoning part then an answer, each length
	// drawn per prompt from its range; max_tokens cuts it short (finish_reason "length").
	DefaultMaxTokens   int    `toml:"default_max_tokens"`
	ReasoningTokensMin int    `toml:"reasoning_tokens_min"`
	ReasoningTokensMax int    `toml:"reasoning_tokens_max"`
	AnswerTokensMin    int    `toml:"answer_tokens_min"`
	AnswerTokensMax    int    `toml:"answer_tokens_max"`
	ReasoningField     string `toml:"reasoning_field"` // "reasoning" (new vLLM) or "reasoning_content" (<= v0.11)
	OutputSeed         uint64 `toml:"output_seed"`

	// Dialect is the server the engine passes for (see Dialects): vllm, lmcache, sglang,
	// kvbm, trtllm or llamacpp; DialectVersion the upstream version of its exposition
	// (DialectVersions; the dialect's default when empty). TensorParallelSize gives LMCache
	// one series per rank (worker_id), and SGLang's radix families a series per rank (the
	// newest version) or the ranks' sum (before it).
	Dialect            string `toml:"dialect"`
	DialectVersion     string `toml:"dialect_version"`
	TensorParallelSize int    `toml:"tensor_parallel_size"`
	// MultiprocessExposition writes vLLM's /metrics as prometheus_client's multiprocess
	// collector does (PROMETHEUS_MULTIPROC_DIR): a family without series is not declared.
	// SGLang and TensorRT-LLM always write so.
	MultiprocessExposition bool `toml:"multiprocess_exposition"`
	// CounterOffset starts every counter sample at this value, as on a server that has run a
	// while (llama.cpp's 6-digit printing shows above 10^6). Each series is offset, so sums
	// across series no longer add up.
	CounterOffset int64 `toml:"counter_offset"`
	// KVBMTier is the KVBM tier the model's offload tier passes for: host (default) or disk.
	KVBMTier string `toml:"kvbm_tier"`
	// StorageBackend makes SGLang's host tier pass for its storage tier (L3) of this backend
	// class (e.g. HiCacheFile): hits are storage_<backend> hits prefetched into host.
	StorageBackend string `toml:"storage_backend"`
	// SlidingWindowPool gives SGLang a second, sliding-window pool (pool="swa") whose
	// load-back and backup series move with the kv pool's.
	SlidingWindowPool bool `toml:"sliding_window_pool"`

	// Metrics shape.
	LegacyNames               bool `toml:"legacy_names"`
	LazyOffloadSeries         bool `toml:"lazy_offload_series"`
	FlatOffloadMetrics        bool `toml:"flat_offload_metrics"`
	LabelledOffloadMetrics    bool `toml:"labelled_offload_metrics"`
	DataParallelEngines       int  `toml:"data_parallel_engines"`
	EnablePromptTokensDetails bool `toml:"enable_prompt_tokens_details"`
	// CachedBySourceMetrics serves the proposed vllm:prompt_tokens_cached_by_source_total
	// {source="device"|"host"}: cached prompt tokens split by the tier that served them.
	CachedBySourceMetrics bool `toml:"cached_by_source_metrics"`

	// DataParallel runs this many independent engines (replicas), each with the profile's
	// GPU pool and CPU tier, behind one endpoint; Router ("round-robin" or
	// "prefix-affinity") picks the replica of each generation request.
	DataParallel int    `toml:"data_parallel"`
	Router       string `toml:"router"`

	// Faults, all off at 0.
	FailEveryNthRequest  int           `toml:"fail_every_nth_request"`  // generation requests n, 2n, ... get a 500
	CutStreamAfterTokens int           `toml:"cut_stream_after_tokens"` // streams end without [DONE] after K tokens
	RestartAtRequest     int           `toml:"restart_at_request"`      // the Rth generation request finds counters and caches reset
	MetricsDelay         time.Duration `toml:"metrics_delay"`           // /metrics answers after this wall time (not scaled)
	MalformedSSEAtToken  int           `toml:"malformed_sse_at_token"`  // a broken data: line precedes the Kth token's chunk
	// HangEveryNthRequest: generation requests n, 2n, ... are read and never answered.
	HangEveryNthRequest int `toml:"hang_every_nth_request"`
	// HangPaths are routes ("/v1/models", "/tokenize", ...) whose every request is read and
	// never answered. A hang ends only when the client goes away or the server closes.
	HangPaths []string `toml:"hang_paths"`
	// MetricsFault kills /metrics after MetricsFaultAfter good scrapes: "error" answers 500,
	// "hang" never answers.
	MetricsFault      string `toml:"metrics_fault"`
	MetricsFaultAfter int    `toml:"metrics_fault_after"`
	// OmitMetrics are metric families (as exposed, e.g. "vllm:prefix_cache_hits_total")
	// left out of /metrics, as on a server that lacks them.
	OmitMetrics []string `toml:"omit_metrics"`
	// MetricValues pins every sample of a family to a value: nan, inf, -inf or a number.
	MetricValues map[string]float64 `toml:"metric_values"`
	// CorruptReload makes every block loaded from the CPU tier hold other KV than was stored:
	// a reloaded prompt's output then differs from the one its first computation gave.
	CorruptReload bool `toml:"corrupt_reload"`

	// BatchProfile models concurrency (batch.go).
	BatchProfile
}

// Routes are the paths the server answers; HangPaths must name some of them.
var Routes = []string{"/v1/chat/completions", "/v1/completions", "/v1/models", "/tokenize", "/version", "/health", "/metrics",
	TRTLLMMetricsPath, "/props", "/apply-template"}

// Metrics fault modes.
const (
	MetricsFaultError = "error"
	MetricsFaultHang  = "hang"
)

// defaultProfile holds the values a profile file does not set.
func defaultProfile() Profile {
	return Profile{
		Version:                   "0.11.2+kvbench.sim",
		CacheDtype:                "auto",
		BlockSize:                 16,
		Speed:                     1,
		DefaultMaxTokens:          256,
		AnswerTokensMin:           16,
		AnswerTokensMax:           64,
		ReasoningField:            "reasoning",
		FlatOffloadMetrics:        true,
		LabelledOffloadMetrics:    true,
		DataParallelEngines:       1,
		EnablePromptTokensDetails: true,
		Dialect:                   DialectVLLM,
	}
}

// ProfileNames returns the embedded profiles' names, sorted.
func ProfileNames() []string {
	entries, err := profileFiles.ReadDir("profiles")
	if err != nil {
		return nil
	}
	var names []string
	for _, e := range entries {
		names = append(names, strings.TrimSuffix(e.Name(), ".toml"))
	}
	sort.Strings(names)
	return names
}

// LoadProfile returns the embedded profile called name, defaults filled in and validated.
func LoadProfile(name string) (Profile, error) {
	file := path.Join("profiles", name+".toml")
	data, err := profileFiles.ReadFile(file)
	if err != nil || strings.ContainsAny(name, "/\\") {
		return Profile{}, fmt.Errorf("%w %q (have %s)", ErrUnknownProfile, name, strings.Join(ProfileNames(), ", "))
	}
	p, err := ParseProfile(file, data)
	if err != nil {
		return Profile{}, err
	}
	if p.Name == "" {
		p.Name = name
	}
	return p, nil
}

// LoadProfileFile reads a profile from a TOML file, defaults filled in and validated; the
// file name stands in for a missing name.
func LoadProfileFile(file string) (Profile, error) {
	data, err := os.ReadFile(file)
	if err != nil {
		return Profile{}, err
	}
	p, err := ParseProfile(file, data)
	if err != nil {
		return Profile{}, err
	}
	if p.Name == "" {
		p.Name = strings.TrimSuffix(filepath.Base(file), filepath.Ext(file))
	}
	return p, nil
}

// ParseProfile decodes a profile from TOML, rejecting unknown keys, and validates it.
func ParseProfile(file string, data []byte) (Profile, error) {
	p := defaultProfile()
	md, err := toml.NewDecoder(bytes.NewReader(data)).Decode(&p)
	if err != nil {
		var pe toml.ParseError
		if errors.As(err, &pe) {
			return Profile{}, fmt.Errorf("%s: %s", file, pe.ErrorWithPosition())
		}
		return Profile{}, fmt.Errorf("%s: %w", file, err)
	}
	if undecoded := md.Undecoded(); len(undecoded) > 0 {
		keys := make([]string, len(undecoded))
		for i, k := range undecoded {
			keys[i] = k.String()
		}
		return Profile{}, fmt.Errorf("%s: unknown keys %s", file, strings.Join(keys, ", "))
	}
	if err := p.Validate(); err != nil {
		return Profile{}, fmt.Errorf("%s: %w", file, err)
	}
	return p, nil
}

// Validate checks that p describes a server that can run, filling derived defaults
// (load bytes per token, served name, one DP engine).
func (p *Profile) Validate() error {
	if p.LoadBytesPerToken == 0 {
		p.LoadBytesPerToken = p.StoreBytesPerToken
	}
	if p.GPUToCPUBytesPerSecond == 0 {
		p.GPUToCPUBytesPerSecond = p.CPUToGPUBytesPerSecond
	}
	if p.ServedModelName == "" {
		p.ServedModelName = p.Model
	}
	if p.DataParallelEngines == 0 {
		p.DataParallelEngines = 1
	}
	var problems []string
	check := func(ok bool, format string, args ...any) {
		if !ok {
			problems = append(problems, fmt.Sprintf(format, args...))
		}
	}
	check(p.ServedModelName != "", "model is empty")
	check(p.BlockSize > 0, "block_size %d must be > 0", p.BlockSize)
	check(p.NumGPUBlocks > 0, "num_gpu_blocks %d must be > 0", p.NumGPUBlocks)
	check(p.MaxModelLen > 0 && p.MaxModelLen <= p.NumGPUBlocks*p.BlockSize,
		"max_model_len %d must be in 1..num_gpu_blocks*block_size (%d)", p.MaxModelLen, p.NumGPUBlocks*p.BlockSize)
	check(p.CPUOffloadGiB >= 0, "cpu_offload_gib %g must be >= 0", p.CPUOffloadGiB)
	check(p.CPUOffloadGiB == 0 || p.StoreBytesPerToken > 0, "store_bytes_per_token must be > 0 with a CPU tier")
	check(p.LoadBytesPerToken >= 0, "load_bytes_per_token %d must be >= 0", p.LoadBytesPerToken)
	check(p.Speed > 0, "speed %g must be > 0", p.Speed)
	check(p.PrefillTokensPerSecond > 0, "prefill_tokens_per_second must be > 0")
	check(p.PrefillSlowdownPer100k >= 0, "prefill_slowdown_per_100k must be >= 0")
	check(p.DecodeTokensPerSecond > 0, "decode_tokens_per_second must be > 0")
	check(p.CPUOffloadGiB == 0 || p.CPUToGPUBytesPerSecond > 0, "cpu_to_gpu_bytes_per_second must be > 0 with a CPU tier")
	check(p.RequestOverhead >= 0, "request_overhead must be >= 0")
	check(p.ReloadLatency >= 0, "reload_latency must be >= 0")
	check(p.JitterFraction >= 0 && p.JitterFraction < 1, "jitter_fraction %g must be in [0, 1)", p.JitterFraction)
	check(p.DefaultMaxTokens > 0, "default_max_tokens must be > 0")
	check(p.ReasoningTokensMin >= 0 && p.ReasoningTokensMin <= p.ReasoningTokensMax,
		"reasoning_tokens_min..max %d..%d is not a range", p.ReasoningTokensMin, p.ReasoningTokensMax)
	check(p.AnswerTokensMin >= 1 && p.AnswerTokensMin <= p.AnswerTokensMax,
		"answer_tokens_min..max %d..%d is not a range of at least one token", p.AnswerTokensMin, p.AnswerTokensMax)
	check(p.ReasoningField == "reasoning" || p.ReasoningField == "reasoning_content",
		"reasoning_field %q must be reasoning or reasoning_content", p.ReasoningField)
	check(p.DataParallelEngines >= 1, "data_parallel_engines %d must be >= 1", p.DataParallelEngines)
	if p.DataParallel == 0 {
		p.DataParallel = 1
	}
	if p.Router == "" {
		p.Router = RouterRoundRobin
	}
	check(p.DataParallel >= 1, "data_parallel %d must be >= 1", p.DataParallel)
	check(p.DataParallel == 1 || p.DataParallelEngines == 1, "data_parallel and data_parallel_engines cannot both be above 1")
	check(slices.Contains(Routers, p.Router), "router %q must be one of %s", p.Router, strings.Join(Routers, ", "))
	check(p.FailEveryNthRequest >= 0 && p.CutStreamAfterTokens >= 0 && p.RestartAtRequest >= 0 &&
		p.MetricsDelay >= 0 && p.MalformedSSEAtToken >= 0, "fault settings must be >= 0")
	check(p.HangEveryNthRequest >= 0 && p.MetricsFaultAfter >= 0, "fault settings must be >= 0")
	check(p.StoreThreshold >= 0 && p.AllocationFailEveryNthStore >= 0, "store_threshold and allocation_fail_every_nth_store must be >= 0")
	for _, path := range p.HangPaths {
		check(slices.Contains(Routes, path), "hang_paths: %q is not a route (have %s)", path, strings.Join(Routes, ", "))
	}
	check(p.MetricsFault == "" || p.MetricsFault == MetricsFaultError || p.MetricsFault == MetricsFaultHang,
		"metrics_fault %q must be %s or %s", p.MetricsFault, MetricsFaultError, MetricsFaultHang)
	if err := checkDialect(*p); err != nil {
		problems = append(problems, err.Error())
	}
	check(p.TensorParallelSize >= 0, "tensor_parallel_size %d must be >= 0", p.TensorParallelSize)
	check(p.CounterOffset >= 0, "counter_offset %d must be >= 0", p.CounterOffset)
	if len(p.OmitMetrics) > 0 || len(p.MetricValues) > 0 {
		exposed := p.metricFamilies()
		for _, name := range p.OmitMetrics {
			check(exposed[name], "omit_metrics: this profile exposes no metric %q", name)
		}
		for name := range p.MetricValues {
			check(exposed[name], "metric_values: this profile exposes no metric %q", name)
		}
	}
	problems = append(problems, p.BatchProfile.problems()...)
	if len(problems) > 0 {
		return fmt.Errorf("invalid profile %q: %s", p.Name, strings.Join(problems, "; "))
	}
	return nil
}

// CPUBlocks is the CPU tier's size in blocks: floor(GiB * 2^30 / (stored bytes per block)).
func (p Profile) CPUBlocks() int {
	if p.CPUOffloadGiB <= 0 || p.StoreBytesPerToken <= 0 {
		return 0
	}
	return int(p.CPUOffloadGiB * (1 << 30) / float64(p.StoreBytesPerToken*int64(p.BlockSize)))
}

// Summary is a one-line description of p's cache geometry and speed.
func (p Profile) Summary() string {
	gpu := p.NumGPUBlocks * p.BlockSize
	cpu := p.CPUBlocks() * p.BlockSize
	verdict := "CPU tier larger than GPU pool: a valid reload setup"
	if cpu <= gpu {
		verdict = "CPU tier not larger than GPU pool: reload cannot be proven"
	}
	return fmt.Sprintf("%s: model %s, GPU pool %d tokens (%d blocks of %d), CPU tier %d tokens (%g GiB at %d B/token stored, %d loaded), max_model_len %d, speed %gx; %s",
		p.Name, p.ServedModelName, gpu, p.NumGPUBlocks, p.BlockSize, cpu, p.CPUOffloadGiB,
		p.StoreBytesPerToken, p.LoadBytesPerToken, p.MaxModelLen, p.Speed, verdict) + p.replicasSummary()
}

// Faults lists the faults p injects by profile key, "" when it injects none.
func (p Profile) Faults() string {
	var out []string
	add := func(on bool, key string, v any) {
		if on {
			out = append(out, fmt.Sprintf("%s = %v", key, v))
		}
	}
	add(p.FailEveryNthRequest > 0, "fail_every_nth_request", p.FailEveryNthRequest)
	add(p.CutStreamAfterTokens > 0, "cut_stream_after_tokens", p.CutStreamAfterTokens)
	add(p.MalformedSSEAtToken > 0, "malformed_sse_at_token", p.MalformedSSEAtToken)
	add(p.RestartAtRequest > 0, "restart_at_request", p.RestartAtRequest)
	add(p.MetricsDelay > 0, "metrics_delay", fmt.Sprintf("%q", p.MetricsDelay))
	add(p.MetricsFault != "", "metrics_fault", fmt.Sprintf("%q", p.MetricsFault))
	add(p.MetricsFault != "" && p.MetricsFaultAfter > 0, "metrics_fault_after", p.MetricsFaultAfter)
	add(p.HangEveryNthRequest > 0, "hang_every_nth_request", p.HangEveryNthRequest)
	add(p.AllocationFailEveryNthStore > 0, "allocation_fail_every_nth_store", p.AllocationFailEveryNthStore)
	add(p.CorruptReload, "corrupt_reload", true)
	add(len(p.HangPaths) > 0, "hang_paths", fmt.Sprintf("%q", p.HangPaths))
	add(len(p.OmitMetrics) > 0, "omit_metrics", fmt.Sprintf("%q", p.OmitMetrics))
	names := make([]string, 0, len(p.MetricValues))
	for name := range p.MetricValues {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		out = append(out, fmt.Sprintf("metric_values.%q = %v", name, p.MetricValues[name]))
	}
	return strings.Join(out, ", ")
}

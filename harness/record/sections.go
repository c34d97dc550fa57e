package record

// ArtifactRef names a file of the run and its sha256.
type ArtifactRef struct {
	Step       string `json:"-"`
	Path       string `json:"path"`
	SHA256     string `json:"sha256"`
	Repetition int    `json:"repetition,omitempty"`
}

// Cache is the record's cache section: the KV setup the run measured against, each figure
// with where it came from.
type Cache struct {
	MaxModelLen            int     `json:"max_model_len,omitempty"`
	GPUKVCacheTokens       int     `json:"gpu_kv_cache_tokens"`
	GPUKVCacheTokensSource string  `json:"gpu_kv_cache_tokens_source"`
	BlockSize              int     `json:"block_size,omitempty"`
	BlockSizeSource        string  `json:"block_size_source,omitempty"`
	CPUOffloadGiB          float64 `json:"cpu_offload_gib"`
	CPUOffloadGiBSource    string  `json:"cpu_offload_gib_source"`
	// CPUMmapBytes is the offload tier's mapped size; no counter shows it (a probe can).
	CPUMmapBytes               *int64   `json:"cpu_mmap_bytes"`
	KVDtype                    *string  `json:"kv_dtype"`
	PrefixCaching              *bool    `json:"prefix_caching"`
	StoreBytesPerTokenMeasured *float64 `json:"store_bytes_per_token_measured"`
	LoadBytesPerTokenMeasured  *float64 `json:"load_bytes_per_token_measured"`
}

// ProbeResult is one probe command's outcome; Output holds its JSON stdout.
type ProbeResult struct {
	Name       string   `json:"-"`
	When       string   `json:"when"`
	OK         bool     `json:"ok"`
	ExitCode   int      `json:"exit_code"`
	DurationMS float64  `json:"duration_ms"`
	Output     any      `json:"output,omitempty"`
	Error      string   `json:"error,omitempty"`
	StderrTail string   `json:"stderr_tail,omitempty"`
	Command    []string `json:"command"`
}

// GateResult is one gate's outcome.
type GateResult struct {
	Gate   Gate   `json:"gate"`
	Passed bool   `json:"passed"`
	Reason string `json:"reason"`
}

// SequenceSection is a sequence step in the run record (seed 001's eviction_sequence).
type SequenceSection struct {
	Artifact                 string   `json:"artifact"`
	Requests                 int      `json:"requests"`
	Concurrency              int      `json:"concurrency"`
	PlannedContextTokensEach any      `json:"planned_context_tokens_each"` // a number, or a list when they differ
	PrefixQueriesAfter       *float64 `json:"prefix_queries_after"`
	GPUPrefixHitsAfter       *float64 `json:"gpu_prefix_hits_after"`
	ExternalPrefixHitsAfter  *float64 `json:"external_prefix_hits_after"`
	GPUToCPUBytesAfter       *float64 `json:"gpu_to_cpu_bytes_after"`
	CPUToGPUBytesAfter       *float64 `json:"cpu_to_gpu_bytes_after"`
	VisibleAnswerPasses      int      `json:"visible_answer_passes"`
	ReasoningOnlyFailures    int      `json:"reasoning_only_failures"`
	FailedRequestIndices     []int    `json:"failed_request_indices"`

	PromptTokens       []*int   `json:"prompt_tokens"`
	DeltaScope         string   `json:"delta_scope"`
	GPUToCPUBytesDelta *float64 `json:"gpu_to_cpu_bytes_delta"`
	// StoreTokensDelta is the GPU->host store in tokens, for engines that count tokens or
	// blocks instead of bytes (SGLang, KVBM, LMCache); absent on vLLM's native offloading.
	StoreTokensDelta    *float64   `json:"gpu_to_host_tokens_delta,omitempty"`
	StoreProven         bool       `json:"store_proven"`
	PeakBlockOccupancy  *float64   `json:"sampled_peak_block_occupancy_fraction"`
	PeakActiveSequences *float64   `json:"sampled_engine_active_max"`
	CountersValid       bool       `json:"counters_valid"`
	InvalidReasons      []string   `json:"invalid_reasons,omitempty"`
	Interrupted         bool       `json:"interrupted,omitempty"`
	TimeToFirstOutputMS []*float64 `json:"time_to_first_output_ms"`
	// WarmCaches is set when the step's requests came back cached beyond what the run could
	// have cached (WarmSteps): the step measured the server's earlier caches, not this run.
	WarmCaches *WarmCaches `json:"warm_caches,omitempty"`
}

// ReplaySection is a replay step in the run record (seed 001's replay).
type ReplaySection struct {
	Artifact                        string   `json:"artifact"`
	ExactPromptIdentity             string   `json:"exact_prompt_identity"`
	IdentityMatchesOriginal         bool     `json:"identity_matches_original"`
	ReplayOf                        string   `json:"replay_of"`
	PlannedContextTokens            int      `json:"planned_context_tokens"`
	PromptTokens                    *int     `json:"prompt_tokens"`
	CachedPromptTokens              *int     `json:"cached_prompt_tokens"`
	CachedFraction                  *float64 `json:"cached_fraction"`
	GPUPrefixHitsBefore             *float64 `json:"gpu_prefix_hits_before"`
	GPUPrefixHitsAfter              *float64 `json:"gpu_prefix_hits_after"`
	GPUPrefixHitsDelta              *float64 `json:"gpu_prefix_hits_delta"`
	ExternalPrefixHitsBefore        *float64 `json:"external_prefix_hits_before"`
	ExternalPrefixHitsAfter         *float64 `json:"external_prefix_hits_after"`
	ExternalPrefixHitsDelta         *float64 `json:"external_prefix_hits_delta"`
	CPUToGPUBytesBefore             *float64 `json:"cpu_to_gpu_bytes_before"`
	CPUToGPUBytesAfter              *float64 `json:"cpu_to_gpu_bytes_after"`
	CPUToGPUBytesDelta              *float64 `json:"cpu_to_gpu_bytes_delta"`
	CPUToGPUSecondsDelta            *float64 `json:"cpu_to_gpu_seconds_delta"`
	GPUToCPUBytesDelta              *float64 `json:"gpu_to_cpu_bytes_delta"`
	TimeToFirstOutputMS             *float64 `json:"time_to_first_output_ms"`
	TimeToFirstVisibleTokenMS       *float64 `json:"time_to_first_visible_token_ms"`
	EndToEndMS                      *float64 `json:"end_to_end_ms"`
	EffectivePrefillTokensPerSecond *float64 `json:"effective_prefill_tokens_per_second"`
	DecodeTokensPerSecond           *float64 `json:"decode_tokens_per_second"`
	OutputTokens                    int      `json:"output_tokens"`
	VisibleAnswer                   bool     `json:"visible_answer"`

	Verdict       Verdict `json:"verdict"`
	VerdictReason string  `json:"verdict_reason"`
	// Evidence is the decision's reasoning: notes, coverage, diagnosis (its counters are the
	// fields above).
	Evidence                    *Decision `json:"evidence"`
	OriginalTimeToFirstOutputMS *float64  `json:"original_time_to_first_output_ms"`
	PeakBlockOccupancy          *float64  `json:"sampled_peak_block_occupancy_fraction"`
	SetupValid                  Answer    `json:"setup_valid"`
	SetupReason                 string    `json:"setup_reason,omitempty"`
	Interpretation              string    `json:"interpretation"`
	Capacity                    *Capacity `json:"capacity,omitempty"`
	Error                       string    `json:"error,omitempty"`
	// ReloadFidelity, OffloadGain and ReloadBandwidth are what the replay's output, its
	// cold twin and its load counters say of the reload (fidelity.go, gain.go).
	ReloadFidelity  *ReloadFidelity  `json:"reload_fidelity"`
	OffloadGain     *OffloadGain     `json:"offload_gain"`
	ReloadBandwidth *ReloadBandwidth `json:"reload_bandwidth"`
}

// ControlSection is a control run as one section (seed 001's offload8_control).
type ControlSection struct {
	Sequence                string   `json:"sequence"`
	Artifacts               []string `json:"artifacts"`
	GPUKVCacheTokens        int      `json:"gpu_kv_cache_tokens"`
	CPUOffloadGiB           float64  `json:"cpu_offload_gib"`
	CPUToGPUBytesAfter      *float64 `json:"cpu_to_gpu_bytes_after"`
	ExternalPrefixHitsAfter *float64 `json:"external_prefix_hits_after"`
	GPUPrefixHitsAfter      *float64 `json:"gpu_prefix_hits_after"`
	ReplayCachedFraction    *float64 `json:"replay_cached_fraction"`
	ReplayVerdict           Verdict  `json:"replay_verdict"`
	SetupValid              Answer   `json:"setup_valid"`
	Interpretation          string   `json:"interpretation"`
}

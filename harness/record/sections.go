package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

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
	Gate   scenarios.Gate `json:"gate"`
	Passed bool           `json:"passed"`
	Reason string         `json:"reason"`
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

	Verdict       verdict.Verdict `json:"verdict"`
	VerdictReason string          `json:"verdict_reason"`
	// Evidence is the decision's reasoning: notes, coverage, diagnosis (its counters are the
	// fields above).
	Evidence                    *Verdict        `json:"evidence"`
	OriginalTimeToFirstOutputMS *float64        `json:"original_time_to_first_output_ms"`
	PeakBlockOccupancy          *float64        `json:"sampled_peak_block_occupancy_fraction"`
	SetupValid                  capacity.Answer `json:"setup_valid"`
	SetupReason                 string          `json:"setup_reason,omitempty"`
	Interpretation              string          `json:"interpretation"`
	Capacity                    *Capacity       `json:"capacity,omitempty"`
	Error                       string          `json:"error,omitempty"`
	// ReloadFidelity, OffloadGain and ReloadBandwidth are what the replay's output, its
	// cold twin and its load counters say of the reload (fidelity.go, gain.go).
	ReloadFidelity  *ReloadFidelity  `json:"reload_fidelity"`
	OffloadGain     *OffloadGain     `json:"offload_gain"`
	ReloadBandwidth *ReloadBandwidth `json:"reload_bandwidth"`
}

// ControlSection is a control run as one section (seed 001's offload8_control).
type ControlSection struct {
	Sequence                string          `json:"sequence"`
	Artifacts               []string        `json:"artifacts"`
	GPUKVCacheTokens        int             `json:"gpu_kv_cache_tokens"`
	CPUOffloadGiB           float64         `json:"cpu_offload_gib"`
	CPUToGPUBytesAfter      *float64        `json:"cpu_to_gpu_bytes_after"`
	ExternalPrefixHitsAfter *float64        `json:"external_prefix_hits_after"`
	GPUPrefixHitsAfter      *float64        `json:"gpu_prefix_hits_after"`
	ReplayCachedFraction    *float64        `json:"replay_cached_fraction"`
	ReplayVerdict           verdict.Verdict `json:"replay_verdict"`
	SetupValid              capacity.Answer `json:"setup_valid"`
	Interpretation          string          `json:"interpretation"`
}

// BuildSections computes each step's section from one repetition's steps; artifacts[i] is
// the file step i was written to ("" when unknown).
func BuildSections(steps []Step, artifacts []string) []Section {
	out := make([]Section, 0, len(steps))
	for i, st := range steps {
		artifact := ""
		if i < len(artifacts) {
			artifact = artifacts[i]
		}
		s := Section{Step: st.Step}
		switch st.Kind {
		case KindReplay:
			rs := replaySection(st, steps, artifact)
			s.Replay = &rs
		case KindConversation:
			cs := ConversationOf(st, artifact)
			s.Conversation = &cs
		case KindTrace:
			ts := TraceOf(st, artifact)
			s.Trace = &ts
		default:
			ss := sequenceSection(st, artifact)
			s.Sequence = &ss
		}
		out = append(out, s)
	}
	return out
}

func sequenceSection(st Step, artifact string) SequenceSection {
	s := SequenceSection{
		Artifact:             artifact,
		Requests:             len(st.Requests),
		Concurrency:          st.Concurrency,
		DeltaScope:           st.DeltaScope,
		FailedRequestIndices: []int{},
		CountersValid:        true,
		Interrupted:          st.Interrupted,
	}
	planned := make([]int, len(st.Requests))
	uniform := true
	for i, r := range st.Requests {
		planned[i] = r.PlannedTokens
		uniform = uniform && r.PlannedTokens == st.Requests[0].PlannedTokens
		s.PromptTokens = append(s.PromptTokens, r.Result.PromptTokens)
		s.TimeToFirstOutputMS = append(s.TimeToFirstOutputMS, r.Result.TimeToFirstOutputMS)
		switch {
		case r.Result.Failed():
			s.FailedRequestIndices = append(s.FailedRequestIndices, r.IndexInStep)
		case r.Result.ReasoningOnly:
			s.ReasoningOnlyFailures++
			s.FailedRequestIndices = append(s.FailedRequestIndices, r.IndexInStep)
		case r.Result.VisibleAnswer:
			s.VisibleAnswerPasses++
		}
	}
	if uniform && len(planned) > 0 {
		s.PlannedContextTokensEach = planned[0]
	} else {
		s.PlannedContextTokensEach = planned
	}
	if c := st.Span; c != nil {
		s.PrefixQueriesAfter = c.After(metrics.GPUPrefixQueries)
		s.GPUPrefixHitsAfter = c.After(metrics.GPUPrefixHits)
		s.ExternalPrefixHitsAfter = c.After(metrics.ExternalPrefixHits)
		s.GPUToCPUBytesAfter = c.After(metrics.StoreBytes)
		s.CPUToGPUBytesAfter = c.After(metrics.LoadBytes)
		s.GPUToCPUBytesDelta = c.Delta(metrics.StoreBytes)
		s.StoreTokensDelta = c.Delta(metrics.StoreTokens)
		s.StoreProven = s.GPUToCPUBytesDelta != nil && *s.GPUToCPUBytesDelta > 0 ||
			s.StoreTokensDelta != nil && *s.StoreTokensDelta > 0
	}
	s.CountersValid, s.InvalidReasons = st.SpanValidity()
	s.PeakBlockOccupancy, s.PeakActiveSequences = st.Sampled.PeakKVUsage, st.Sampled.PeakRunning
	return s
}

// replaySection computes a replay step's section from its step and the repetition's steps
// (the replayed request's timing and identity).
func replaySection(st Step, steps []Step, artifact string) ReplaySection {
	s := ReplaySection{Artifact: artifact, SetupValid: capacity.Unknown}
	if len(st.Requests) == 0 {
		v := Undecided("the run stopped before the replay was sent")
		s.Verdict, s.VerdictReason, s.Evidence, s.SetupValid, s.Interpretation = v.Verdict, v.Reason, v, v.SetupValid, v.Interpretation
		return s
	}
	r := st.Requests[0]
	res := r.Result
	s.ExactPromptIdentity = r.Prompt.Identity
	if r.ReplayOf != nil {
		s.ReplayOf = fmt.Sprintf("%s[%d]", r.ReplayOf.Step, r.ReplayOf.Request)
		if orig := findRequest(steps, r.ReplayOf); orig != nil {
			s.IdentityMatchesOriginal = orig.Prompt.Identity == r.Prompt.Identity
			s.OriginalTimeToFirstOutputMS = orig.Result.TimeToFirstOutputMS
		}
	}
	s.PlannedContextTokens = r.PlannedTokens
	s.PromptTokens, s.CachedPromptTokens = res.PromptTokens, res.CachedPromptTokens
	s.CachedFraction = verdict.CachedFraction(res.PromptTokens, res.CachedPromptTokens)
	c := r.Counters
	if c == nil {
		c = st.Span
	}
	if c != nil {
		s.GPUPrefixHitsBefore, s.GPUPrefixHitsAfter, s.GPUPrefixHitsDelta = c.Before(metrics.GPUPrefixHits), c.After(metrics.GPUPrefixHits), c.Delta(metrics.GPUPrefixHits)
		s.ExternalPrefixHitsBefore, s.ExternalPrefixHitsAfter, s.ExternalPrefixHitsDelta = c.Before(metrics.ExternalPrefixHits), c.After(metrics.ExternalPrefixHits), c.Delta(metrics.ExternalPrefixHits)
		s.CPUToGPUBytesBefore, s.CPUToGPUBytesAfter, s.CPUToGPUBytesDelta = c.Before(metrics.LoadBytes), c.After(metrics.LoadBytes), c.Delta(metrics.LoadBytes)
		s.CPUToGPUSecondsDelta = c.Delta(metrics.LoadSeconds)
		s.GPUToCPUBytesDelta = c.Delta(metrics.StoreBytes)
	}
	s.TimeToFirstOutputMS, s.TimeToFirstVisibleTokenMS, s.EndToEndMS = res.TimeToFirstOutputMS, res.TimeToFirstVisibleTokenMS, res.EndToEndMS
	s.EffectivePrefillTokensPerSecond, s.DecodeTokensPerSecond = res.EffectivePrefillTokensPerSecond, res.DecodeTokensPerSecond
	s.OutputTokens, s.VisibleAnswer = res.OutputTokens, res.VisibleAnswer
	s.Error = res.Error
	if r.Samples != nil {
		s.PeakBlockOccupancy = r.Samples.PeakKVUsage
	} else {
		s.PeakBlockOccupancy = st.Sampled.PeakKVUsage
	}
	v := r.Verdict
	if v == nil {
		v = Undecided("the run ended before the replay's verdict was decided")
	}
	s.Verdict, s.VerdictReason, s.Evidence = v.Verdict, v.Reason, v
	s.SetupValid, s.SetupReason, s.Interpretation, s.Capacity = v.SetupValid, v.SetupReason, v.Interpretation, v.Capacity
	return s
}

// controlSection computes a control run's section from repetition 0's steps and sections.
func controlSection(sc *scenarios.Scenario, cache Cache, steps []Step, sections []Section, artifacts []string) ControlSection {
	cs := ControlSection{
		Sequence:         sc.Study.Sequence,
		GPUKVCacheTokens: cache.GPUKVCacheTokens,
		CPUOffloadGiB:    cache.CPUOffloadGiB,
		SetupValid:       capacity.Unknown,
		Artifacts:        artifacts,
	}
	if n := len(steps); n > 0 && steps[n-1].Span != nil {
		c := steps[n-1].Span
		cs.CPUToGPUBytesAfter, cs.ExternalPrefixHitsAfter, cs.GPUPrefixHitsAfter = c.After(metrics.LoadBytes), c.After(metrics.ExternalPrefixHits), c.After(metrics.GPUPrefixHits)
	}
	// The control's replay is its last replay step.
	for i := len(sections) - 1; i >= 0; i-- {
		if rp := sections[i].Replay; rp != nil {
			cs.ReplayCachedFraction, cs.ReplayVerdict = rp.CachedFraction, rp.Verdict
			cs.SetupValid, cs.Interpretation = rp.SetupValid, rp.Interpretation
			break
		}
	}
	return cs
}

func findRequest(steps []Step, ref *ReplayRef) *Request {
	for i := range steps {
		if steps[i].Step != ref.Step {
			continue
		}
		for j := range steps[i].Requests {
			if steps[i].Requests[j].IndexInStep == ref.Request {
				return &steps[i].Requests[j]
			}
		}
	}
	return nil
}

// MeasuredBytesPerToken divides a repetition's store bytes by the tokens it computed and its
// load bytes by its external hits (seed 001: ~20,790 stored, ~8,833 loaded), over the joined
// span of its steps, so a counter reset (or an unread step) anywhere in it leaves them
// unknown. Nil when a counter is absent or nothing moved.
func MeasuredBytesPerToken(steps []Step) (store, load *float64) {
	d := SpanOf(steps)
	if d == nil || !d.Valid {
		return nil, nil
	}
	if sb, ok := d.Value(metrics.StoreBytes); ok && sb > 0 {
		if computed, ok := d.ComputedTokens(); ok && computed > 0 {
			v := sb / computed
			store = &v
		}
	}
	if lb, ok := d.Value(metrics.LoadBytes); ok && lb > 0 {
		load = d.PerToken(metrics.LoadBytes, metrics.ExternalPrefixHits)
	}
	return store, load
}

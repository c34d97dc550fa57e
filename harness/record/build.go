package record

import (
	"encoding/json"
	"fmt"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// RunInfo is what a run knows besides its step artifacts.
type RunInfo struct {
	Scenario       *scenarios.Scenario
	ObservedAt     time.Time
	Status         string
	StopReason     string
	KvbenchVersion string
	ServerVersion  string
	ServedModel    string
	// ModelRoot is what the server says it loaded (vLLM's /v1/models root), the model's repo
	// when the scenario names none.
	ModelRoot string
	Cache     Cache
	// Preflight is the preflight report as JSON.
	Preflight json.RawMessage
	Probes    []ProbeResult
	Gates     []GateResult
	Artifacts []ArtifactRef
	// Repetitions holds every pass over the steps when the scenario repeats (repetition 0
	// is the steps Build gets); with one pass it may be empty.
	Repetitions []Repetition
}

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

	Verdict                     string               `json:"verdict"`
	VerdictReason               string               `json:"verdict_reason"`
	Evidence                    *verdict.Replay      `json:"evidence"`
	OriginalTimeToFirstOutputMS *float64             `json:"original_time_to_first_output_ms"`
	PeakBlockOccupancy          *float64             `json:"sampled_peak_block_occupancy_fraction"`
	SetupValid                  capacity.Answer      `json:"setup_valid"`
	Interpretation              string               `json:"interpretation"`
	Capacity                    *capacity.Assessment `json:"capacity,omitempty"`
	Error                       string               `json:"error,omitempty"`
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
	ReplayVerdict           string          `json:"replay_verdict"`
	SetupValid              capacity.Answer `json:"setup_valid"`
	Interpretation          string          `json:"interpretation"`
}

// Build computes the run record from the run's info and its step artifacts.
func Build(info RunInfo, steps []StepArtifact) *Run {
	sc := info.Scenario
	r := &Run{
		Schema:     RunSchema,
		ObservedAt: info.ObservedAt.UTC().Format(time.RFC3339),
		Status:     info.Status,
		StopReason: info.StopReason,
		Model:      sc.Model,
		Runtime:    sc.Runtime,
		Topology:   sc.Topology,
		Probes:     info.Probes,
		Gates:      info.Gates,
		Preflight:  info.Preflight,
		Artifacts:  info.Artifacts,
		References: sc.Sources,
		Kvbench:    Kvbench{Version: info.KvbenchVersion},
		Scenario:   sc,
	}
	if r.Model.ServedName == "" {
		r.Model.ServedName = info.ServedModel
	}
	if r.Model.Repo == "" {
		r.Model.Repo = info.ModelRoot
	}
	if r.Runtime.Engine == "" {
		r.Runtime.Engine = info.ServerVersion // what /version says, when the scenario names none
	}
	r.Cache = info.Cache
	r.Cache.StoreBytesPerTokenMeasured, r.Cache.LoadBytesPerTokenMeasured = MeasuredBytesPerToken(steps)

	r.Sections = BuildSections(steps, info.Artifacts)
	// A failed repeated run keeps the repetitions it finished, however few.
	if len(info.Repetitions) > 1 || (info.Status == StatusFailed && len(info.Repetitions) > 0) {
		rs := BuildRepeats(info.Repetitions)
		r.Repeats = &rs
	}
	if sc.Study.Role == "control" && sc.Study.Key != "" {
		cs := BuildControl(sc, r.Cache, steps, r.Sections, info.Artifacts)
		r.Control = &cs
	}
	return r
}

// BuildSections computes each step's section from one repetition's artifacts; artifacts name
// the files they were written to (repetition 0's).
func BuildSections(steps []StepArtifact, artifacts []ArtifactRef) []Section {
	artifactOf := map[string]string{}
	for _, a := range artifacts {
		if a.Step != "" && a.Repetition == 0 {
			artifactOf[a.Step] = a.Path
		}
	}
	var out []Section
	for _, st := range steps {
		s := Section{Step: st.Step}
		switch st.Kind {
		case "replay":
			rs := BuildReplay(st, steps, artifactOf[st.Step])
			s.Replay = &rs
		case KindConversation:
			cs := ConversationOf(st, artifactOf[st.Step])
			s.Conversation = &cs
		default:
			ss := sequenceSection(st, artifactOf[st.Step])
			s.Sequence = &ss
		}
		out = append(out, s)
	}
	return out
}

func sequenceSection(st StepArtifact, artifact string) SequenceSection {
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
	if c := st.Counters; c != nil {
		s.PrefixQueriesAfter = c.AfterValue(metrics.GPUPrefixQueries)
		s.GPUPrefixHitsAfter = c.AfterValue(metrics.GPUPrefixHits)
		s.ExternalPrefixHitsAfter = c.AfterValue(metrics.ExternalPrefixHits)
		s.GPUToCPUBytesAfter = c.AfterValue(metrics.StoreBytes)
		s.CPUToGPUBytesAfter = c.AfterValue(metrics.LoadBytes)
		s.GPUToCPUBytesDelta = c.DeltaValue(metrics.StoreBytes)
		s.StoreTokensDelta = c.DeltaValue(metrics.StoreTokens)
		s.StoreProven = s.GPUToCPUBytesDelta != nil && *s.GPUToCPUBytesDelta > 0 ||
			s.StoreTokensDelta != nil && *s.StoreTokensDelta > 0
		s.CountersValid = c.Delta.Valid
		s.InvalidReasons = c.Delta.InvalidReasons
	}
	if st.CountersError != "" {
		s.CountersValid = false
		s.InvalidReasons = append(s.InvalidReasons, "counters not read: "+st.CountersError)
	}
	s.PeakBlockOccupancy, s.PeakActiveSequences = st.Samples.PeakKVUsage, st.Samples.PeakRunning
	return s
}

// BuildReplay computes a replay step's section from its artifact and the run's earlier steps
// (the replayed request's timing and identity).
func BuildReplay(st StepArtifact, steps []StepArtifact, artifact string) ReplaySection {
	s := ReplaySection{Artifact: artifact, SetupValid: capacity.Unknown}
	if len(st.Requests) == 0 {
		s.Verdict, s.VerdictReason = verdict.Invalid, "the run stopped before the replay was sent"
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
		c = st.Counters
	}
	if c != nil {
		s.GPUPrefixHitsBefore, s.GPUPrefixHitsAfter, s.GPUPrefixHitsDelta = c.BeforeValue(metrics.GPUPrefixHits), c.AfterValue(metrics.GPUPrefixHits), c.DeltaValue(metrics.GPUPrefixHits)
		s.ExternalPrefixHitsBefore, s.ExternalPrefixHitsAfter, s.ExternalPrefixHitsDelta = c.BeforeValue(metrics.ExternalPrefixHits), c.AfterValue(metrics.ExternalPrefixHits), c.DeltaValue(metrics.ExternalPrefixHits)
		s.CPUToGPUBytesBefore, s.CPUToGPUBytesAfter, s.CPUToGPUBytesDelta = c.BeforeValue(metrics.LoadBytes), c.AfterValue(metrics.LoadBytes), c.DeltaValue(metrics.LoadBytes)
		s.CPUToGPUSecondsDelta = c.DeltaValue(metrics.LoadSeconds)
		s.GPUToCPUBytesDelta = c.DeltaValue(metrics.StoreBytes)
	}
	s.TimeToFirstOutputMS, s.TimeToFirstVisibleTokenMS, s.EndToEndMS = res.TimeToFirstOutputMS, res.TimeToFirstVisibleTokenMS, res.EndToEndMS
	s.EffectivePrefillTokensPerSecond, s.DecodeTokensPerSecond = res.EffectivePrefillTokensPerSecond, res.DecodeTokensPerSecond
	s.OutputTokens, s.VisibleAnswer = res.OutputTokens, res.VisibleAnswer
	s.Error = res.Error
	s.PeakBlockOccupancy = r.Samples.PeakKVUsage
	if r.Verdict != nil {
		s.Verdict, s.VerdictReason, s.Evidence = r.Verdict.Verdict, r.Verdict.Reason, r.Verdict
	}
	s.Capacity = st.Capacity
	if st.Capacity != nil {
		s.SetupValid = st.Capacity.CanProveReload
	}
	s.Interpretation = Interpretation(r.Verdict, st.Capacity)
	return s
}

// BuildControl computes a control run's section from one repetition's artifacts and their
// sections (BuildSections); artifacts name the files they were written to.
func BuildControl(sc *scenarios.Scenario, cache Cache, steps []StepArtifact, sections []Section, artifacts []ArtifactRef) ControlSection {
	cs := ControlSection{
		Sequence:         sc.Study.Sequence,
		GPUKVCacheTokens: cache.GPUKVCacheTokens,
		CPUOffloadGiB:    cache.CPUOffloadGiB,
		SetupValid:       capacity.Unknown,
	}
	for _, a := range artifacts {
		if a.Step != "" && a.Repetition == 0 {
			cs.Artifacts = append(cs.Artifacts, a.Path)
		}
	}
	if n := len(steps); n > 0 && steps[n-1].Counters != nil {
		c := steps[n-1].Counters
		cs.CPUToGPUBytesAfter, cs.ExternalPrefixHitsAfter, cs.GPUPrefixHitsAfter = c.AfterValue(metrics.LoadBytes), c.AfterValue(metrics.ExternalPrefixHits), c.AfterValue(metrics.GPUPrefixHits)
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

func findRequest(steps []StepArtifact, ref *scenarios.ReplayRef) *Request {
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

// MeasuredBytesPerToken divides the run's store bytes by the tokens it computed and its load
// bytes by its external hits (seed 001: ~20,790 stored, ~8,833 loaded). Nil when a counter
// is absent or nothing moved.
func MeasuredBytesPerToken(steps []StepArtifact) (store, load *float64) {
	var first, last *metrics.Window
	for i := range steps {
		if steps[i].Counters == nil {
			continue
		}
		if first == nil {
			first = steps[i].Counters
		}
		last = steps[i].Counters
	}
	if first == nil {
		return nil, nil
	}
	d := metrics.Diff(first.Before, last.After)
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

// Interpretation says in words what a replay showed and whether the setup could prove a
// reload, as seed 001's offload8_control does.
func Interpretation(v *verdict.Replay, a *capacity.Assessment) string {
	var parts []string
	if v != nil {
		parts = append(parts, v.Sentence())
		if len(v.Diagnosis) > 0 {
			var why []string
			for _, d := range v.Diagnosis {
				why = append(why, d.Detail)
			}
			parts = append(parts, "Why: "+strings.Join(why, "; ")+".")
		}
	}
	if a != nil {
		parts = append(parts, a.Conclusion())
	}
	return strings.Join(parts, " ")
}

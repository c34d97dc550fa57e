package record

import (
	"fmt"
	"math"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Run statuses.
const (
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
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
	Preflight any
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

	PromptTokens        []*int     `json:"prompt_tokens"`
	DeltaScope          string     `json:"delta_scope"`
	GPUToCPUBytesDelta  *float64   `json:"gpu_to_cpu_bytes_delta"`
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
func Build(info RunInfo, steps []StepArtifact) Object {
	sc := info.Scenario
	var o Object
	o.Set("schema", RunSchema)
	o.Set("observed_at", info.ObservedAt.UTC().Format(time.RFC3339))
	o.Set("status", info.Status)
	if info.StopReason != "" {
		o.Set("stop_reason", info.StopReason)
	}
	model := sc.Model
	if model.ServedName == "" {
		model.ServedName = info.ServedModel
	}
	if model.Repo == "" {
		model.Repo = info.ModelRoot
	}
	o.Set("model", model)
	runtime := sc.Runtime
	if runtime.Engine == "" {
		runtime.Engine = info.ServerVersion // what /version says, when the scenario names none
	}
	o.Set("runtime", runtime)
	if len(sc.Topology) > 0 {
		o.Set("topology", sc.Topology)
	} else {
		o.Set("topology", map[string]any{})
	}
	cache := info.Cache
	cache.StoreBytesPerTokenMeasured, cache.LoadBytesPerTokenMeasured = MeasuredBytesPerToken(steps)
	o.Set("cache", cache)

	artifactOf := map[string]string{}
	for _, a := range info.Artifacts {
		if a.Step != "" && a.Repetition == 0 {
			artifactOf[a.Step] = a.Path
		}
	}
	ids := make([]string, 0, len(steps))
	replays := map[string]ReplaySection{}
	for _, st := range steps {
		ids = append(ids, st.Step)
		if st.Kind == "replay" {
			r := replaySection(st, steps, artifactOf[st.Step])
			replays[st.Step] = r
			o.Set(st.Step, r)
		} else {
			o.Set(st.Step, sequenceSection(st, artifactOf[st.Step]))
		}
	}
	o.Set("steps", ids)
	if len(info.Repetitions) > 1 {
		o.Set("repeats", BuildRepeats(info.Repetitions))
	}
	if sc.Study.Role == "control" && sc.Study.Key != "" {
		o.Set(sc.Study.Key, controlSection(sc, cache, steps, replays, info.Artifacts))
	}
	if len(info.Probes) > 0 {
		var probes Object
		for _, p := range info.Probes {
			probes.Set(p.Name, p)
		}
		o.Set("probes", probes)
	}
	if len(info.Gates) > 0 {
		o.Set("gates", info.Gates)
	}
	if info.Preflight != nil {
		o.Set("preflight", info.Preflight)
	}
	var sources []any
	for _, a := range info.Artifacts {
		sources = append(sources, a)
	}
	for _, s := range sc.Sources {
		sources = append(sources, s)
	}
	o.Set("sources", sources)
	o.Set("kvbench", map[string]string{"version": info.KvbenchVersion})
	o.Set("scenario", sc)
	return o
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
		s.PrefixQueriesAfter = after(c, metrics.GPUPrefixQueries)
		s.GPUPrefixHitsAfter = after(c, metrics.GPUPrefixHits)
		s.ExternalPrefixHitsAfter = after(c, metrics.ExternalPrefixHits)
		s.GPUToCPUBytesAfter = after(c, metrics.StoreBytes)
		s.CPUToGPUBytesAfter = after(c, metrics.LoadBytes)
		s.GPUToCPUBytesDelta = delta(c, metrics.StoreBytes)
		s.StoreProven = s.GPUToCPUBytesDelta != nil && *s.GPUToCPUBytesDelta > 0
		s.CountersValid = c.Delta.Valid
		s.InvalidReasons = c.Delta.InvalidReasons
	}
	s.PeakBlockOccupancy, s.PeakActiveSequences = st.Samples.PeakKVUsage, st.Samples.PeakRunning
	return s
}

func replaySection(st StepArtifact, steps []StepArtifact, artifact string) ReplaySection {
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
		s.GPUPrefixHitsBefore, s.GPUPrefixHitsAfter, s.GPUPrefixHitsDelta = before(c, metrics.GPUPrefixHits), after(c, metrics.GPUPrefixHits), delta(c, metrics.GPUPrefixHits)
		s.ExternalPrefixHitsBefore, s.ExternalPrefixHitsAfter, s.ExternalPrefixHitsDelta = before(c, metrics.ExternalPrefixHits), after(c, metrics.ExternalPrefixHits), delta(c, metrics.ExternalPrefixHits)
		s.CPUToGPUBytesBefore, s.CPUToGPUBytesAfter, s.CPUToGPUBytesDelta = before(c, metrics.LoadBytes), after(c, metrics.LoadBytes), delta(c, metrics.LoadBytes)
		s.CPUToGPUSecondsDelta = delta(c, metrics.LoadSeconds)
		s.GPUToCPUBytesDelta = delta(c, metrics.StoreBytes)
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

func controlSection(sc *scenarios.Scenario, cache Cache, steps []StepArtifact, replays map[string]ReplaySection, artifacts []ArtifactRef) ControlSection {
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
		cs.CPUToGPUBytesAfter, cs.ExternalPrefixHitsAfter, cs.GPUPrefixHitsAfter = after(c, metrics.LoadBytes), after(c, metrics.ExternalPrefixHits), after(c, metrics.GPUPrefixHits)
	}
	// The control's replay is its last replay step.
	for i := len(steps) - 1; i >= 0; i-- {
		if r, ok := replays[steps[i].Step]; ok {
			cs.ReplayCachedFraction, cs.ReplayVerdict = r.CachedFraction, r.Verdict
			cs.SetupValid, cs.Interpretation = r.SetupValid, r.Interpretation
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

func before(c *Counters, k metrics.Counter) *float64 { return reading(c.Before.Counters[k]) }
func after(c *Counters, k metrics.Counter) *float64  { return reading(c.After.Counters[k]) }

func reading(r metrics.Reading) *float64 {
	if !r.Present {
		return nil
	}
	v := r.Value
	return &v
}

func delta(c *Counters, k metrics.Counter) *float64 {
	v, ok := c.Delta.Value(k)
	if !ok {
		return nil
	}
	return &v
}

// MeasuredBytesPerToken divides the run's store bytes by the tokens it computed and its load
// bytes by its external hits (seed 001: ~20,790 stored, ~8,833 loaded). Nil when a counter
// is absent or nothing moved.
func MeasuredBytesPerToken(steps []StepArtifact) (store, load *float64) {
	var first, last *Counters
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
		if computed, ok := ComputedTokens(d); ok && computed > 0 {
			v := sb / computed
			store = &v
		}
	}
	if lb, ok := d.Value(metrics.LoadBytes); ok && lb > 0 {
		if hits, ok := d.Value(metrics.ExternalPrefixHits); ok && hits > 0 {
			v := lb / hits
			load = &v
		}
	}
	return store, load
}

// ComputedTokens is the prompt tokens a delta computed (not served from any cache): the
// local_compute source where the server splits by source, else queries minus both hits.
func ComputedTokens(d metrics.Delta) (float64, bool) {
	if v, ok := d.Value(metrics.PromptTokensLocalCompute); ok {
		return v, true
	}
	q, ok1 := d.Value(metrics.GPUPrefixQueries)
	g, ok2 := d.Value(metrics.GPUPrefixHits)
	if !ok1 || !ok2 {
		return 0, false
	}
	e, _ := d.Value(metrics.ExternalPrefixHits)
	return q - g - e, true
}

// Interpretation says in words what a replay showed and whether the setup could prove a
// reload, as seed 001's offload8_control does.
func Interpretation(v *verdict.Replay, a *capacity.Assessment) string {
	var b strings.Builder
	if v != nil {
		switch v.Verdict {
		case verdict.CPUReload:
			b.WriteString("The replay was reloaded from the CPU tier.")
		case verdict.GPUHit:
			b.WriteString("The replay remained in GPU cache.")
		case verdict.Recompute:
			b.WriteString("The replay was recomputed beyond the shared prefix.")
		case verdict.Partial:
			b.WriteString("The replay was served only partly from cache.")
		case verdict.Invalid:
			b.WriteString("The replay's measurement is invalid: " + v.Reason + ".")
		default:
			b.WriteString("The tier that served the replay could not be determined.")
		}
	}
	if a == nil {
		return b.String()
	}
	s := a.Setup
	per := "stated"
	if s.StoreBytesSource == "measured" {
		per = "measured"
	}
	sentence := ""
	g := func(x float64) string { return capacity.Group(int(math.Round(x))) }
	switch {
	case a.TierLargerThanGPU == capacity.No && s.CPUOffloadGiB > 0:
		sentence = fmt.Sprintf("At the %s bytes per stored token (%s), the %g GiB CPU tier (about %s tokens) was smaller than the %s-token GPU KV tier and was not a valid GPU-eviction reload setup.", per, g(s.StoreBytesPerToken), s.CPUOffloadGiB, g(a.CPUTierTokens), capacity.Group(s.GPUKVTokens))
	case a.TierLargerThanGPU == capacity.No:
		sentence = "No CPU offload tier was configured, so the run could not prove a reload."
	case a.EvictionPressure == capacity.No:
		sentence = fmt.Sprintf("The sequence's %s unique tokens fit in the %s-token GPU KV pool, so the replayed prompt was not evicted and the run could not prove a reload.", capacity.Group(a.UniqueTokens), capacity.Group(s.GPUKVTokens))
	case a.TierHoldsSequence == capacity.No:
		sentence = fmt.Sprintf("The sequence's %s unique tokens overflowed the CPU tier's %s, so the replayed prompt could not survive there until the replay.", capacity.Group(a.UniqueTokens), g(a.CPUTierTokens))
	case a.CanProveReload == capacity.Yes:
		sentence = fmt.Sprintf("At the %s bytes per stored token (%s), the %g GiB CPU tier (about %s tokens) was larger than the %s-token GPU KV tier and the sequence's %s unique tokens pushed the replayed prompt out of GPU memory: a valid GPU-eviction reload setup.", per, g(s.StoreBytesPerToken), s.CPUOffloadGiB, g(a.CPUTierTokens), capacity.Group(s.GPUKVTokens), capacity.Group(a.UniqueTokens))
	default:
		sentence = "Whether the setup could prove a reload is unknown: " + strings.Join(a.Findings, " ")
	}
	if b.Len() > 0 {
		b.WriteByte(' ')
	}
	b.WriteString(sentence)
	return b.String()
}

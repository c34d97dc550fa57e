package derive

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// BuildSections computes each step's section from one repetition's steps; artifacts[i] is
// the file step i was written to ("" when unknown).
func BuildSections(steps []Step, artifacts []string) []record.Section {
	out := make([]record.Section, 0, len(steps))
	for i, st := range steps {
		artifact := ""
		if i < len(artifacts) {
			artifact = artifacts[i]
		}
		s := record.Section{Step: st.Step}
		switch st.Kind {
		case record.KindReplay:
			rs := replaySection(st, steps, artifact)
			s.Replay = &rs
		case record.KindConversation:
			cs := ConversationOf(st, artifact)
			s.Conversation = &cs
		case record.KindTrace:
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

func sequenceSection(st Step, artifact string) record.SequenceSection {
	s := record.SequenceSection{
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
func replaySection(st Step, steps []Step, artifact string) record.ReplaySection {
	s := record.ReplaySection{Artifact: artifact, SetupValid: capacity.Unknown}
	if len(st.Requests) == 0 {
		v := verdict.Undecided("the run stopped before the replay was sent")
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
		v = verdict.Undecided("the run ended before the replay's verdict was decided")
	}
	s.Verdict, s.VerdictReason, s.Evidence = v.Verdict, v.Reason, v
	s.SetupValid, s.SetupReason, s.Interpretation, s.Capacity = v.SetupValid, v.SetupReason, v.Interpretation, v.Capacity
	return s
}

// controlSection computes a control run's section from repetition 0's steps and sections.
func controlSection(sc *scenarios.Scenario, cache record.Cache, steps []Step, sections []record.Section, artifacts []string) record.ControlSection {
	cs := record.ControlSection{
		Sequence:         sc.Study.Sequence,
		GPUKVCacheTokens: cache.GPUKVCacheTokens,
		CPUOffloadGiB:    cache.CPUOffloadGiB,
		SetupValid:       capacity.Unknown,
		Artifacts:        artifacts,
	}
	// The seed's "after" is right after the control's last request: when that is a replay,
	// its own scrapes, not the step's end, which comes after the cold twin (request 1).
	if n := len(steps); n > 0 {
		c := steps[n-1].Span
		if last := steps[n-1]; last.Kind == record.KindReplay && len(last.Requests) > 1 {
			c = last.Requests[0].Counters
		}
		if c != nil {
			cs.CPUToGPUBytesAfter, cs.ExternalPrefixHitsAfter, cs.GPUPrefixHitsAfter = c.After(metrics.LoadBytes), c.After(metrics.ExternalPrefixHits), c.After(metrics.GPUPrefixHits)
		}
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

func findRequest(steps []Step, ref *record.ReplayRef) *record.Request {
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
		if computed, ok := ComputedTokens(d); ok && computed > 0 {
			v := sb / computed
			store = &v
		}
	}
	if lb, ok := d.Value(metrics.LoadBytes); ok && lb > 0 {
		load = d.PerToken(metrics.LoadBytes, metrics.ExternalPrefixHits)
	}
	return store, load
}

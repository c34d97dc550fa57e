package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// SeedRule says how a repetition's prompts differ from the first's. A server's caches cannot
// be reset, so sending the same bytes again would turn the cold sequence into cache hits.
const SeedRule = "repetition k builds its prompts with seed = prompt.seed + k: the same shapes with fresh bytes, so every repetition's sequence is cold and its replay meaningful"

// RepeatMetrics are the per-request measurements summarized across repetitions.
type RepeatMetrics struct {
	TimeToFirstOutputMS             stats.Summary `json:"time_to_first_output_ms"`
	DecodeTokensPerSecond           stats.Summary `json:"decode_tokens_per_second"`
	EffectivePrefillTokensPerSecond stats.Summary `json:"effective_prefill_tokens_per_second"`
	CachedFraction                  stats.Summary `json:"cached_fraction"`
	LoadBytesPerToken               stats.Summary `json:"load_bytes_per_token"`
}

// RepeatRequest is one request position of a step (index in step) across repetitions.
type RepeatRequest struct {
	IndexInStep int           `json:"index_in_step"`
	Metrics     RepeatMetrics `json:"metrics"`
}

// RepeatStep summarizes one step across repetitions. For a replay, Verdicts lists each
// repetition's verdict in order: a disagreement is reported, never averaged away.
type RepeatStep struct {
	Step          string            `json:"-"`
	Kind          string            `json:"kind"`
	Requests      []RepeatRequest   `json:"requests"`
	Verdicts      []verdict.Verdict `json:"verdicts,omitempty"`
	VerdictsAgree *bool             `json:"verdicts_agree,omitempty"`
	StoreBytes    stats.Summary     `json:"gpu_to_cpu_bytes_delta"`
}

// RepeatsSection is the run record's "repeats" section.
type RepeatsSection struct {
	Count       int          `json:"count"`
	SeedRule    string       `json:"seed_rule"`
	Repetitions []Repetition `json:"repetitions"`
	// Steps summarizes each step, in step order (an object keyed by step id).
	Steps         RepeatSteps `json:"steps"`
	VerdictsAgree bool        `json:"verdicts_agree"`
	// Disagreements names each replay whose repetitions reached different verdicts.
	Disagreements []string `json:"disagreements"`
}

// RequestMetric is one named per-request measurement; nil when absent.
type RequestMetric func(r Request) *float64

// Per-request measurements by name, as the repeats section, verify and compare use them.
var RequestMetrics = map[string]RequestMetric{
	"time_to_first_output_ms":             func(r Request) *float64 { return r.Result.TimeToFirstOutputMS },
	"time_to_first_visible_token_ms":      func(r Request) *float64 { return r.Result.TimeToFirstVisibleTokenMS },
	"end_to_end_ms":                       func(r Request) *float64 { return r.Result.EndToEndMS },
	"decode_tokens_per_second":            func(r Request) *float64 { return r.Result.DecodeTokensPerSecond },
	"effective_prefill_tokens_per_second": func(r Request) *float64 { return r.Result.EffectivePrefillTokensPerSecond },
	"cached_fraction": func(r Request) *float64 {
		return verdict.CachedFraction(r.Result.PromptTokens, r.Result.CachedPromptTokens)
	},
	"load_bytes_per_token": LoadBytesPerToken,
}

// LoadBytesPerToken is a request's CPU->GPU bytes over its external prefix-cache hits; nil
// when either counter is absent, the request's counters were step-scoped, or nothing loaded.
func LoadBytesPerToken(r Request) *float64 {
	return r.Counters.PerToken(metrics.LoadBytes, metrics.ExternalPrefixHits)
}

// BuildRepeats summarizes reps (repetition 0 first) step by step and request by request.
func BuildRepeats(reps []Repetition) RepeatsSection {
	rs := RepeatsSection{Count: len(reps), SeedRule: SeedRule, Repetitions: reps, VerdictsAgree: true, Disagreements: []string{}}
	if len(reps) == 0 {
		return rs
	}
	for si, first := range reps[0].Steps {
		st := RepeatStep{Step: first.Step, Kind: first.Kind, Requests: []RepeatRequest{}}
		var store []*float64
		for _, rep := range reps {
			if si < len(rep.Steps) && rep.Steps[si].Span != nil {
				store = append(store, rep.Steps[si].Span.Delta(metrics.StoreBytes))
			} else {
				store = append(store, nil)
			}
		}
		st.StoreBytes = stats.Summarize(store)
		for ri := range first.Requests {
			rr := RepeatRequest{IndexInStep: first.Requests[ri].IndexInStep}
			collect := func(name string) stats.Summary {
				var vals []*float64
				for _, rep := range reps {
					if si < len(rep.Steps) && ri < len(rep.Steps[si].Requests) {
						vals = append(vals, RequestMetrics[name](rep.Steps[si].Requests[ri]))
					} else {
						vals = append(vals, nil)
					}
				}
				return stats.Summarize(vals)
			}
			rr.Metrics = RepeatMetrics{
				TimeToFirstOutputMS:             collect("time_to_first_output_ms"),
				DecodeTokensPerSecond:           collect("decode_tokens_per_second"),
				EffectivePrefillTokensPerSecond: collect("effective_prefill_tokens_per_second"),
				CachedFraction:                  collect("cached_fraction"),
				LoadBytesPerToken:               collect("load_bytes_per_token"),
			}
			st.Requests = append(st.Requests, rr)
		}
		if first.Kind == KindReplay {
			for _, rep := range reps {
				st.Verdicts = append(st.Verdicts, rep.Verdict(first.Step))
			}
			agree := true
			for _, v := range st.Verdicts {
				agree = agree && v == st.Verdicts[0]
			}
			st.VerdictsAgree = &agree
			if !agree {
				rs.VerdictsAgree = false
				rs.Disagreements = append(rs.Disagreements, fmt.Sprintf("%s: %v", first.Step, st.Verdicts))
			}
		}
		rs.Steps = append(rs.Steps, st)
	}
	return rs
}

// Missing stands for the verdict of a replay a repetition stopped before.
const Missing verdict.Verdict = "missing"

// Verdict is the verdict of step id's replayed request in this repetition, from its derived
// section; Missing when the repetition stopped before sending it.
func (rep Repetition) Verdict(id string) verdict.Verdict {
	for i, st := range rep.Steps {
		if st.Step == id && len(st.Requests) > 0 && i < len(rep.Sections) && rep.Sections[i].Replay != nil {
			return rep.Sections[i].Replay.Verdict
		}
	}
	return Missing
}

// RepeatSteps are the steps' summaries; their JSON is an object keyed by step id.
type RepeatSteps []RepeatStep

// MarshalJSON writes the steps keyed by id, in step order.
func (s RepeatSteps) MarshalJSON() ([]byte, error) {
	return marshalKeyed(s, func(st RepeatStep) string { return st.Step })
}

// UnmarshalJSON reads the steps keyed by id, in order.
func (s *RepeatSteps) UnmarshalJSON(data []byte) error {
	steps, err := unmarshalKeyed(data, func(st *RepeatStep, id string) { st.Step = id })
	*s = steps
	return err
}

package derive

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// RequestMetric is one named per-request measurement; nil when absent.
type RequestMetric func(r record.Request) *float64

// Per-request measurements by name, as the repeats section, verify and compare use them.
var RequestMetrics = map[string]RequestMetric{
	"time_to_first_output_ms":             func(r record.Request) *float64 { return r.Result.TimeToFirstOutputMS },
	"time_to_first_visible_token_ms":      func(r record.Request) *float64 { return r.Result.TimeToFirstVisibleTokenMS },
	"end_to_end_ms":                       func(r record.Request) *float64 { return r.Result.EndToEndMS },
	"decode_tokens_per_second":            func(r record.Request) *float64 { return r.Result.DecodeTokensPerSecond },
	"effective_prefill_tokens_per_second": func(r record.Request) *float64 { return r.Result.EffectivePrefillTokensPerSecond },
	"cached_fraction": func(r record.Request) *float64 {
		return verdict.CachedFraction(r.Result.PromptTokens, r.Result.CachedPromptTokens)
	},
	"load_bytes_per_token": LoadBytesPerToken,
}

// LoadBytesPerToken is a request's CPU->GPU bytes over its external prefix-cache hits; nil
// when either counter is absent, the request's counters were step-scoped, or nothing loaded.
func LoadBytesPerToken(r record.Request) *float64 {
	return r.Counters.PerToken(metrics.LoadBytes, metrics.ExternalPrefixHits)
}

// BuildRepeats summarizes reps (repetition 0 first) step by step and request by request.
func BuildRepeats(reps []Repetition) record.RepeatsSection {
	rs := record.RepeatsSection{Count: len(reps), SeedRule: record.SeedRule, Repetitions: make([]record.Repetition, 0, len(reps)), VerdictsAgree: true, Disagreements: []string{}}
	for _, rep := range reps {
		rs.Repetitions = append(rs.Repetitions, rep.Repetition)
	}
	if len(reps) == 0 {
		return rs
	}
	for si, first := range reps[0].Steps {
		st := record.RepeatStep{Step: first.Step, Kind: first.Kind, Requests: []record.RepeatRequest{}}
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
			rr := record.RepeatRequest{IndexInStep: first.Requests[ri].IndexInStep}
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
			rr.Metrics = record.RepeatMetrics{
				TimeToFirstOutputMS:             collect("time_to_first_output_ms"),
				DecodeTokensPerSecond:           collect("decode_tokens_per_second"),
				EffectivePrefillTokensPerSecond: collect("effective_prefill_tokens_per_second"),
				CachedFraction:                  collect("cached_fraction"),
				LoadBytesPerToken:               collect("load_bytes_per_token"),
			}
			st.Requests = append(st.Requests, rr)
		}
		if first.Kind == record.KindReplay {
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

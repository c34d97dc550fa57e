package derive

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// EvaluateGates checks each gate against the run's step sections.
func EvaluateGates(gates []scenarios.Gate, sections []record.Section) []record.GateResult {
	out := make([]record.GateResult, 0, len(gates))
	for _, g := range gates {
		var sec record.Section
		for _, s := range sections {
			if s.Step == g.Step {
				sec = s
			}
		}
		var fails, passes []string
		check := func(ok bool, pass, fail string) {
			if ok {
				passes = append(passes, pass)
			} else {
				fails = append(fails, fail)
			}
		}
		switch {
		case sec.Replay != nil:
			s := sec.Replay
			if g.Verdict != "" {
				check(s.Verdict == g.Verdict, "verdict "+string(s.Verdict), fmt.Sprintf("verdict %s, want %s (%s)", s.Verdict, g.Verdict, s.VerdictReason))
			}
			if g.MinCachedFraction > 0 {
				check(s.CachedFraction != nil && *s.CachedFraction >= g.MinCachedFraction,
					fmt.Sprintf("cached fraction %s >= %s", units.Fraction(s.CachedFraction), units.Exact(g.MinCachedFraction)),
					fmt.Sprintf("cached fraction %s, want >= %s", units.Fraction(s.CachedFraction), units.Exact(g.MinCachedFraction)))
			}
			if g.MaxTimeToFirstOutputMS > 0 {
				check(s.TimeToFirstOutputMS != nil && *s.TimeToFirstOutputMS <= g.MaxTimeToFirstOutputMS,
					fmt.Sprintf("time to first output %s ms <= %s", units.MS(s.TimeToFirstOutputMS), units.Exact(g.MaxTimeToFirstOutputMS)),
					fmt.Sprintf("time to first output %s ms, want <= %s", units.MS(s.TimeToFirstOutputMS), units.Exact(g.MaxTimeToFirstOutputMS)))
			}
			if g.MinDecodeTokensPerSec > 0 {
				check(s.DecodeTokensPerSecond != nil && *s.DecodeTokensPerSecond >= g.MinDecodeTokensPerSec,
					fmt.Sprintf("decode %s tokens/s >= %s", units.Rate(s.DecodeTokensPerSecond), units.Exact(g.MinDecodeTokensPerSec)),
					fmt.Sprintf("decode %s tokens/s, want >= %s", units.Rate(s.DecodeTokensPerSecond), units.Exact(g.MinDecodeTokensPerSec)))
			}
			if g.RequireValidSetup {
				check(s.SetupValid == capacity.Yes, "valid reload setup", "setup cannot prove a reload ("+string(s.SetupValid)+"): "+s.Interpretation)
			}
			if g.MaxFailedRequests != nil {
				failed := b2i(s.Error != "")
				check(failed <= *g.MaxFailedRequests, fmt.Sprintf("%d failed", failed), fmt.Sprintf("%d failed requests, want <= %d", failed, *g.MaxFailedRequests))
			}
			if g.RequireStore {
				check(s.GPUToCPUBytesDelta != nil && *s.GPUToCPUBytesDelta > 0, "store bytes grew", "no GPU->CPU store bytes during the step")
			}
			if g.RequireIdenticalOutput {
				pass, fail := identicalOutput(s.ReloadFidelity)
				check(fail == "", pass, fail)
			}
			if g.RequireOnTime {
				fails = append(fails, "require_on_time applies to open-loop trace steps only")
			}
		case sec.Sequence != nil:
			s := sec.Sequence
			if g.RequireStore {
				moved := fmt.Sprintf("%s bytes", units.Count(s.GPUToCPUBytesDelta))
				if s.StoreTokensDelta != nil {
					moved += fmt.Sprintf(", %s tokens", units.Count(s.StoreTokensDelta))
				}
				fail := "store not proven: GPU->CPU " + moved
				if w := s.WarmCaches; w != nil {
					fail += "; " + w.Reason
				}
				check(s.StoreProven, "store proven ("+moved+")", fail)
			}
			if g.MaxFailedRequests != nil {
				n := len(s.FailedRequestIndices)
				check(n <= *g.MaxFailedRequests, fmt.Sprintf("%d failed", n), fmt.Sprintf("%d failed requests %v, want <= %d", n, s.FailedRequestIndices, *g.MaxFailedRequests))
			}
			if g.Verdict != "" || g.MinCachedFraction > 0 || g.RequireValidSetup || g.RequireIdenticalOutput {
				fails = append(fails, "verdict, cached fraction, setup validity and identical output apply to replay steps only")
			}
			if g.RequireOnTime {
				fails = append(fails, "require_on_time applies to open-loop trace steps only")
			}
		case sec.Conversation != nil:
			c := sec.Conversation
			passes, fails = loadGate(g, "conversation", c.TTFTMS.P90, c.FailedRequests, c.StoreBytesDelta, passes, fails)
		case sec.Trace != nil:
			t := sec.Trace
			passes, fails = loadGate(g, "trace", t.TTFTMS.P90, t.FailedRequests, t.StoreBytesDelta, passes, fails)
			if g.RequireOnTime {
				pass, fail := onTime(t)
				check(fail == "", pass, fail)
			}
		default:
			fails = append(fails, "the step was not measured")
		}
		r := record.GateResult{Gate: g, Passed: len(fails) == 0}
		if r.Passed {
			r.Reason = strings.Join(passes, "; ")
		} else {
			r.Reason = strings.Join(fails, "; ")
		}
		out = append(out, r)
	}
	return out
}

// identicalOutput words the require_identical_output check of a replay: what passed, or why
// it failed ("" when it passed).
func identicalOutput(f *record.ReloadFidelity) (pass, fail string) {
	switch {
	case f == nil:
		return "", "the replay's output was not compared with its original's"
	case !f.Compared:
		return "", "the replay's output was not compared with its original's: " + f.Reason
	case !*f.Identical:
		return "", "output not identical: " + f.Finding
	}
	n, unit := f.ComparedBytes, "bytes"
	if f.ComparedTokens != nil {
		n, unit = f.ComparedTokens, "tokens"
	}
	return fmt.Sprintf("output identical to the original's (%d %s compared)", *n, unit), ""
}

// implicitGates fail what a run did not do although asked: each step whose requests failed
// (an error, not a reasoning-only answer) in any repetition, unless a gate of the scenario
// sets max_failed_requests for that step; and each replay whose measurement was invalid
// (counters reset, unread or contaminated), unless a gate of the scenario names that step;
// likewise each overlapping step (trace, conversation) whose counters the server reset
// during it, since its tier shares were not measured; and, in a scenario with gates, each step some of whose requests another model answered.
func implicitGates(gates []scenarios.Gate, reps []Repetition) []record.GateResult {
	allowFailures, gated := map[string]bool{}, map[string]bool{}
	for _, g := range gates {
		gated[g.Step] = true
		if g.MaxFailedRequests != nil {
			allowFailures[g.Step] = true
		}
	}
	var order []string
	failed, total, invalid, mismatched := map[string]int{}, map[string]int{}, map[string]int{}, map[string]int{}
	firstFailure, firstInvalid, firstMismatch := map[string]string{}, map[string]string{}, map[string]string{}
	reset, firstReset := map[string]int{}, map[string]string{}
	for _, rep := range reps {
		for _, st := range rep.Steps {
			if _, seen := total[st.Step]; !seen {
				order = append(order, st.Step)
			}
			if why := spanReset(st); why != "" {
				reset[st.Step]++
				if firstReset[st.Step] == "" {
					firstReset[st.Step] = why
				}
			}
			for _, q := range st.Requests {
				if q.ColdTwin != nil {
					continue // a twin's failure shows in the replay's offload gain, not as the step's
				}
				total[st.Step]++
				if q.Result.ModelMismatch() {
					mismatched[st.Step]++
					if firstMismatch[st.Step] == "" {
						firstMismatch[st.Step] = q.Result.ModelMismatchNote()
					}
				}
				switch {
				case q.Result.Failed():
					failed[st.Step]++
					if firstFailure[st.Step] == "" {
						firstFailure[st.Step] = q.Result.Error
					}
				case q.Verdict != nil && q.Verdict.Verdict == verdict.Invalid:
					invalid[st.Step]++
					if firstInvalid[st.Step] == "" {
						firstInvalid[st.Step] = q.Verdict.Reason
					}
				}
			}
		}
	}
	var out []record.GateResult
	zero := 0
	for _, id := range order {
		if failed[id] > 0 && !allowFailures[id] {
			out = append(out, record.GateResult{
				Gate:   scenarios.Gate{Step: id, MaxFailedRequests: &zero, Implicit: true},
				Reason: fmt.Sprintf("%d of %d requests failed (first: %s); set max_failed_requests in a gate on this step if failures are expected", failed[id], total[id], firstFailure[id]),
			})
		}
		if mismatched[id] > 0 && len(gates) > 0 {
			out = append(out, record.GateResult{
				Gate:   scenarios.Gate{Step: id, Implicit: true},
				Reason: fmt.Sprintf("%d of %d requests were answered by another model (first: %s)", mismatched[id], total[id], firstMismatch[id]),
			})
		}
		if invalid[id] > 0 && !gated[id] {
			out = append(out, record.GateResult{
				Gate:   scenarios.Gate{Step: id, Implicit: true},
				Reason: fmt.Sprintf("the replay's measurement is invalid in %d of %d repetition(s): %s", invalid[id], len(reps), firstInvalid[id]),
			})
		}
		if reset[id] > 0 && !gated[id] {
			out = append(out, record.GateResult{
				Gate:   scenarios.Gate{Step: id, Implicit: true},
				Reason: fmt.Sprintf("the server restarted during the step in %d of %d repetition(s), so its tier shares were not measured: %s", reset[id], len(reps), firstReset[id]),
			})
		}
	}
	return out
}

// spanReset is why an overlapping step's counters were reset during it ("" when they were
// not, or the step's requests were measured one by one, where the replays' verdicts say it).
func spanReset(st Step) string {
	if st.DeltaScope != record.ScopeStep || st.Span == nil {
		return ""
	}
	for i, kind := range st.Span.InvalidKinds {
		if kind == metrics.InvalidReset && i < len(st.Span.InvalidReasons) {
			return st.Span.InvalidReasons[i]
		}
	}
	return ""
}

// EvaluateRepeatedGates checks the gates against every repetition's sections: a gate passes
// only when it passes in all of them, and a failure names the repetition.
func EvaluateRepeatedGates(gates []scenarios.Gate, reps []Repetition) []record.GateResult {
	if len(reps) == 0 {
		return EvaluateGates(gates, nil)
	}
	out := EvaluateGates(gates, reps[0].Sections)
	for _, rep := range reps[1:] {
		for i, g := range EvaluateGates(gates, rep.Sections) {
			if g.Passed {
				continue
			}
			reason := fmt.Sprintf("repetition %d: %s", rep.Index, g.Reason)
			if out[i].Passed {
				out[i].Passed, out[i].Reason = false, reason
			} else if !strings.Contains(out[i].Reason, reason) {
				out[i].Reason += "; " + reason
			}
		}
	}
	return out
}

// GatesOf is the gates' results on a run's repetitions: each scenario gate across all of them
// (EvaluateRepeatedGates), then the gate kvbench adds to a step whose requests failed.
func GatesOf(gates []scenarios.Gate, reps []Repetition) []record.GateResult {
	return append(EvaluateRepeatedGates(gates, reps), implicitGates(gates, reps)...)
}

// CheckGates is the gates' results on the run's repetitions, the same for a run that just
// ended and one read back from disk.
func (r *Run) CheckGates() []record.GateResult {
	var gates []scenarios.Gate
	if r.Scenario != nil {
		gates = r.Scenario.Gates
	}
	return GatesOf(gates, r.Repetitions)
}

// loadGate checks a gate on a step of overlapping requests (a conversation or a trace step,
// kind): max_time_to_first_output_ms bounds the step's TTFT p90, max_failed_requests its
// failed requests, require_store its store bytes.
func loadGate(g scenarios.Gate, kind string, ttftP90 *float64, failed int, storeBytes *float64, passes, fails []string) ([]string, []string) {
	check := func(ok bool, pass, fail string) {
		if ok {
			passes = append(passes, pass)
		} else {
			fails = append(fails, fail)
		}
	}
	if g.MaxTimeToFirstOutputMS > 0 {
		check(ttftP90 != nil && *ttftP90 <= g.MaxTimeToFirstOutputMS,
			fmt.Sprintf("TTFT p90 %s ms <= %s", units.MS(ttftP90), units.Exact(g.MaxTimeToFirstOutputMS)),
			fmt.Sprintf("TTFT p90 %s ms, want <= %s", units.MS(ttftP90), units.Exact(g.MaxTimeToFirstOutputMS)))
	}
	if g.MaxFailedRequests != nil {
		check(failed <= *g.MaxFailedRequests, fmt.Sprintf("%d failed", failed), fmt.Sprintf("%d failed requests, want <= %d", failed, *g.MaxFailedRequests))
	}
	if g.RequireStore {
		check(storeBytes != nil && *storeBytes > 0, "store bytes grew", "no GPU->CPU store bytes during the step")
	}
	if g.Verdict != "" || g.MinCachedFraction > 0 || g.RequireValidSetup || g.MinDecodeTokensPerSec > 0 {
		fails = append(fails, "verdict, cached fraction, decode rate and setup validity do not apply to "+kind+" steps")
	}
	if g.RequireOnTime && kind != "trace" {
		fails = append(fails, "require_on_time applies to open-loop trace steps only")
	}
	return passes, fails
}

// onTime words a trace step's require_on_time check: what passed, or why it failed ("" when
// it passed).
func onTime(t *record.TraceSection) (pass, fail string) {
	switch {
	case t.Mode != record.TraceOpenLoop:
		return "", "require_on_time applies to open-loop trace steps only (this one is a closed loop)"
	case t.DispatchLagMS.P99 == nil:
		return "", "no request was sent, so none went out on time"
	case t.DispatchBehind != nil:
		return "", t.DispatchBehind.Finding
	}
	return fmt.Sprintf("on time: dispatch lag p99 %s ms <= %s", units.MS(t.DispatchLagMS.P99), units.Exact(DispatchBehindP99MS)), ""
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

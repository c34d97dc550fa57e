package derive

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/scenarios"
)

// outputComparison is two outputs compared on one basis.
type outputComparison struct {
	basis      string
	identical  bool
	compared   int
	first      *int
	lenA, lenB int
	truncated  bool
}

// compareOutputs compares two requests' outputs on the best basis both have; ok is false,
// with why, when they cannot be compared.
func compareOutputs(a, b *record.Result) (c outputComparison, why string) {
	switch {
	case a.Failed():
		return c, "the original request failed"
	case b.Failed():
		return c, "the request failed"
	case a.OutputTokenIDs != nil && b.OutputTokenIDs != nil:
		c = diverge(a.OutputTokenIDs, b.OutputTokenIDs, a.OutputTokenIDsTruncated, b.OutputTokenIDsTruncated)
		c.basis = record.BasisTokenIDs
	case a.OutputText != "" && b.OutputText != "":
		c = diverge([]byte(a.OutputText), []byte(b.OutputText), a.OutputTextTruncated, b.OutputTextTruncated)
		c.basis = record.BasisText
	case a.OutputText == "" && b.OutputText == "" && (a.Answer != "" || b.Answer != ""):
		c = diverge([]byte(a.Answer), []byte(b.Answer), a.AnswerTruncated, b.AnswerTruncated)
		c.basis = record.BasisAnswer
	default:
		return c, "the two requests kept no output to compare (no token ids, no text)"
	}
	return c, ""
}

// diverge finds the first index where a and b differ; a shorter output that was cut where
// kvbench stopped keeping it is compared as far as it goes.
func diverge[T comparable](a, b []T, cutA, cutB bool) outputComparison {
	n := min(len(a), len(b))
	c := outputComparison{compared: n, lenA: len(a), lenB: len(b), truncated: cutA || cutB}
	for i := 0; i < n; i++ {
		if a[i] != b[i] {
			c.first = &i
			return c
		}
	}
	shorterCut := len(a) < len(b) && cutA || len(b) < len(a) && cutB
	if len(a) != len(b) && !shorterCut {
		c.first = &n
		return c
	}
	c.identical = true
	return c
}

// reloadFidelity compares the replay's output with its original's (and the cold twin's,
// when there is one), for a replay at temperature 0.
func reloadFidelity(sc *scenarios.Scenario, replay, original, twin *record.Request, kvDtype *string) *record.ReloadFidelity {
	f := &record.ReloadFidelity{}
	if original == nil {
		f.Reason = "the replayed request is not in the run"
		return f
	}
	if t := stepTemperature(sc, replay.Step, original.Step); t > 0 {
		f.Reason = "temperature " + units.Exact(t) + " samples the output: only a greedy (temperature 0) replay must repeat its original"
		return f
	}
	c, why := compareOutputs(&original.Result, &replay.Result)
	if why != "" {
		f.Reason = why
		return f
	}
	f.Compared, f.Basis, f.Identical, f.FirstDivergence = true, c.basis, &c.identical, c.first
	f.OriginalLength, f.ReplayLength, f.Truncated = c.lenA, c.lenB, c.truncated
	n := c.compared
	if c.basis == record.BasisTokenIDs {
		f.ComparedTokens = &n
	} else {
		f.ComparedBytes = &n
	}
	if twin != nil {
		if tc, why := compareOutputs(&original.Result, &twin.Result); why == "" && tc.basis == c.basis {
			f.ColdTwinIdentical, f.ColdTwinFirstDivergence = &tc.identical, tc.first
		}
	}
	if !c.identical {
		f.Finding = fidelityFinding(f, kvDtype)
	}
	return f
}

// fidelityFinding words a divergence: what it may be and what the cold twin says.
func fidelityFinding(f *record.ReloadFidelity, kvDtype *string) string {
	unit, of := "token", f.OriginalLength
	if f.Basis != record.BasisTokenIDs {
		unit = "byte"
	}
	var b strings.Builder
	fmt.Fprintf(&b, "the replay's output differs from its original's from %s %d on (of %d, compared by %s): possible KV corruption on reload",
		unit, *f.FirstDivergence, of, strings.ReplaceAll(f.Basis, "_", " "))
	dtype := ""
	if kvDtype != nil && strings.Contains(strings.ToLower(*kvDtype), "fp8") {
		dtype = " (this server's is " + *kvDtype + ")"
	}
	fmt.Fprintf(&b, "; batch-variant kernels (a greedy output that changes with the batch it ran in) or a lossy KV cache dtype%s can change it too", dtype)
	switch {
	case f.ColdTwinIdentical == nil:
		b.WriteString("; no cold twin output to tell them apart")
	case *f.ColdTwinIdentical:
		b.WriteString("; the cold twin, recomputing the same prompt, reproduced the original: the difference came with the reload (its KV, or the few tokens a reload leaves to compute, which run in a smaller batch than a whole prefill does)")
	default:
		at := ""
		if f.ColdTwinFirstDivergence != nil {
			at = fmt.Sprintf(" (from %s %d)", unit, *f.ColdTwinFirstDivergence)
		}
		b.WriteString("; the cold twin differs from the original too" + at + ": the server does not repeat its output even without a reload, so the reload is not shown to be at fault")
	}
	return b.String()
}

// stepTemperature is the larger temperature of the scenario's two steps (0 when unknown).
func stepTemperature(sc *scenarios.Scenario, steps ...string) float64 {
	if sc == nil {
		return 0
	}
	t := 0.0
	for _, id := range steps {
		t = max(t, sc.RequestFor(sc.StepByID(id)).Temperature)
	}
	return t
}

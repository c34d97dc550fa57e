package record

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/scenarios"
)

// Reload fidelity: at temperature 0 a replay must produce the output its original request
// produced, since the KV it reloaded is the same computation. A divergence is a finding:
// possibly KV corrupted on its way back from the host tier, though batch-variant kernels and
// a lossy KV cache dtype change greedy outputs too, which the cold twin (the same prompt
// recomputed) tells apart.

// Bases an output comparison rests on, best first.
const (
	// BasisTokenIDs compares the generated token ids both requests were sent.
	BasisTokenIDs = "token_ids"
	// BasisText compares the generated text both kept (reasoning and content), byte by byte.
	BasisText = "text"
	// BasisAnswer compares the visible answers only: what records written before kvbench
	// kept outputs hold.
	BasisAnswer = "answer"
)

// ReloadFidelity is whether a replay gave its original's output.
type ReloadFidelity struct {
	Compared bool `json:"compared"`
	// Reason says why the outputs were not compared.
	Reason string `json:"reason,omitempty"`
	Basis  string `json:"basis,omitempty"`
	// Identical is null when nothing was compared.
	Identical *bool `json:"identical"`
	// ComparedTokens (token ids) or ComparedBytes (text) is how much of the two outputs was
	// compared: the shorter one's length.
	ComparedTokens *int `json:"compared_tokens"`
	ComparedBytes  *int `json:"compared_bytes,omitempty"`
	// FirstDivergence is the index (token or byte, per the basis) of the first difference;
	// null when identical. An output that is a strict prefix of the other diverges at its end.
	FirstDivergence *int `json:"first_divergence"`
	OriginalLength  int  `json:"original_length"`
	ReplayLength    int  `json:"replay_length"`
	// Truncated: an output was longer than kvbench keeps, and only the kept part was compared.
	Truncated bool `json:"truncated,omitempty"`
	// ColdTwinIdentical is the cold twin's output against the original's on the same basis:
	// a twin that differs too says the server does not reproduce its output without a reload.
	ColdTwinIdentical       *bool `json:"cold_twin_identical"`
	ColdTwinFirstDivergence *int  `json:"cold_twin_first_divergence,omitempty"`
	// Finding names a divergence in words, as the console prints it.
	Finding string `json:"finding,omitempty"`
}

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
func compareOutputs(a, b *Result) (c outputComparison, why string) {
	switch {
	case a.Failed():
		return c, "the original request failed"
	case b.Failed():
		return c, "the request failed"
	case a.OutputTokenIDs != nil && b.OutputTokenIDs != nil:
		c = diverge(a.OutputTokenIDs, b.OutputTokenIDs, a.OutputTokenIDsTruncated, b.OutputTokenIDsTruncated)
		c.basis = BasisTokenIDs
	case a.OutputText != "" && b.OutputText != "":
		c = diverge([]byte(a.OutputText), []byte(b.OutputText), a.OutputTextTruncated, b.OutputTextTruncated)
		c.basis = BasisText
	case a.OutputText == "" && b.OutputText == "" && (a.Answer != "" || b.Answer != ""):
		c = diverge([]byte(a.Answer), []byte(b.Answer), a.AnswerTruncated, b.AnswerTruncated)
		c.basis = BasisAnswer
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
func reloadFidelity(sc *scenarios.Scenario, replay, original, twin *Request, kvDtype *string) *ReloadFidelity {
	f := &ReloadFidelity{}
	if original == nil {
		f.Reason = "the replayed request is not in the run"
		return f
	}
	if t := stepTemperature(sc, replay.Step, original.Step); t > 0 {
		f.Reason = fmt.Sprintf("temperature %g samples the output: only a greedy (temperature 0) replay must repeat its original", t)
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
	if c.basis == BasisTokenIDs {
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
		f.Finding = f.finding(kvDtype)
	}
	return f
}

// finding words a divergence: what it may be and what the cold twin says.
func (f *ReloadFidelity) finding(kvDtype *string) string {
	unit, of := "token", f.OriginalLength
	if f.Basis != BasisTokenIDs {
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

// Words says in a line whether the outputs matched, and on what.
func (f *ReloadFidelity) Words() string {
	switch {
	case f == nil:
		return "not compared"
	case !f.Compared:
		return "not compared: " + f.Reason
	case !*f.Identical:
		return "DIFFERENT: " + f.Finding
	}
	n, unit := f.ComparedBytes, "bytes of "+f.Basis
	if f.ComparedTokens != nil {
		n, unit = f.ComparedTokens, "token ids"
	}
	s := fmt.Sprintf("identical to the original's output (%d %s compared", *n, unit)
	if f.Truncated {
		s += ", as far as kvbench keeps them"
	}
	if f.ColdTwinIdentical != nil && *f.ColdTwinIdentical {
		s += "; the cold twin's too"
	}
	return s + ")"
}

package compare

import (
	"bytes"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
)

// unrepeated is the baseline fixture cut to its first repetition, its sequence requests'
// TTFTs (and the prefill rates that follow from them) changed by edit.
func unrepeated(t *testing.T, edit func(i int, ttft float64) float64) *runs.Run {
	t.Helper()
	r := load(t, "baseline")
	r.Repetitions = r.Repetitions[:1]
	for i := range r.Repetitions[0].Steps[0].Requests {
		res := &r.Repetitions[0].Steps[0].Requests[i].Result
		if res.TimeToFirstOutputMS == nil || res.EffectivePrefillTokensPerSecond == nil {
			t.Fatalf("request %d has no TTFT", i)
		}
		ttft := edit(i, *res.TimeToFirstOutputMS)
		rate := *res.EffectivePrefillTokensPerSecond * *res.TimeToFirstOutputMS / ttft
		res.TimeToFirstOutputMS, res.EffectivePrefillTokensPerSecond = &ttft, &rate
	}
	return r
}

// TestUnrepeatedRunsCannotTellMillisecondsFromARegression: of two unrepeated runs, a TTFT
// (and prefill rate) change past the tolerance but under TTFTFloorMS is cannot_tell with a
// warning that states the floor, not a regression; past the floor it is a regression still.
func TestUnrepeatedRunsCannotTellMillisecondsFromARegression(t *testing.T) {
	base := unrepeated(t, func(_ int, ttft float64) float64 { return ttft })
	cand := unrepeated(t, func(i int, ttft float64) float64 {
		if i == 1 {
			return ttft + 2*TTFTFloorMS // well past the floor
		}
		return ttft*1.15 + 1 // +15% > the 10% tolerance, and under 25 ms for a ~100 ms TTFT
	})
	res := mustCompare(t, base, cand, Options{Tolerance: DefaultTolerance})
	if res.TTFTFloorMS == nil || *res.TTFTFloorMS != TTFTFloorMS || !strings.Contains(res.Noise, "under 25 ms cannot be told from noise") {
		t.Fatalf("floor %v, noise %q", res.TTFTFloorMS, res.Noise)
	}
	want := []string{"sequence[1] time_to_first_output_ms", "sequence[1] effective_prefill_tokens_per_second"}
	if got := judged(res, stats.Regressed); !slices.Equal(got, want) {
		t.Fatalf("regressed %q, want %q", got, want)
	}
	var tell []string
	for _, i := range []string{"0", "2", "3"} {
		tell = append(tell, "sequence["+i+"] time_to_first_output_ms", "sequence["+i+"] effective_prefill_tokens_per_second")
	}
	if got := judged(res, stats.CannotTell); !slices.Equal(got, tell) {
		t.Fatalf("cannot_tell %q, want %q", got, tell)
	}
	if !res.Regression || len(res.Findings) != 2 || len(res.Warnings) != 6 {
		t.Fatalf("findings %q, warnings %q", res.Findings, res.Warnings)
	}
	if w := res.Warnings[0]; !strings.HasPrefix(w, "sequence[0] time_to_first_output_ms rose ") || !strings.Contains(w, "under the 25 ms floor of unrepeated runs: cannot tell noise from a regression") {
		t.Errorf("warning %q", w)
	}
	var text bytes.Buffer
	if err := res.WriteText(&text); err != nil || !strings.Contains(text.String(), "WARNING: sequence[0] time_to_first_output_ms rose") || !strings.Contains(text.String(), "cannot_tell") {
		t.Errorf("text %v:\n%s", err, text.String())
	}

	// Only noise: no regression, so compare exits 0, and the warnings say what it could not tell.
	quiet := unrepeated(t, func(_ int, ttft float64) float64 { return ttft*1.15 + 1 })
	res = mustCompare(t, base, quiet, Options{Tolerance: DefaultTolerance})
	if res.Regression || res.Regressions() != nil || len(res.Warnings) != 8 {
		t.Fatalf("regression %v, findings %q, warnings %d", res.Regression, res.Findings, len(res.Warnings))
	}
	var md bytes.Buffer
	if err := res.WriteMarkdown(&md); err != nil || !strings.HasPrefix(md.String(), "## kvbench compare: No regression") || !strings.Contains(md.String(), "> **Cannot tell:** sequence[0]") {
		t.Errorf("markdown %v:\n%s", err, md.String())
	}

	// A faster candidate under the floor is no improvement either.
	fast := unrepeated(t, func(_ int, ttft float64) float64 { return ttft * 0.85 })
	res = mustCompare(t, base, fast, Options{Tolerance: DefaultTolerance})
	if len(judged(res, stats.Improved)) != 0 || len(res.Warnings) != 8 || !strings.Contains(res.Warnings[0], "cannot tell noise from an improvement") {
		t.Errorf("improved %q, warnings %q", judged(res, stats.Improved), res.Warnings)
	}

	// Repeated runs measure their noise: no floor.
	if res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance}); res.TTFTFloorMS != nil || len(res.Warnings) != 0 || len(judged(res, stats.CannotTell)) != 0 {
		t.Errorf("repeated runs: floor %v, warnings %q", res.TTFTFloorMS, res.Warnings)
	}
}

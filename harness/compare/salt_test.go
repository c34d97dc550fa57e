package compare

import (
	"errors"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// salted makes r a run of the same shapes with fresh bytes: its scenario's salt set and every
// prompt's identity changed, as a salted run's are.
func salted(r *runs.Run, salt string) *runs.Run {
	r.Scenario.Prompt.Salt = salt
	for k := range r.Repetitions {
		for i := range r.Repetitions[k].Steps {
			for j := range r.Repetitions[k].Steps[i].Requests {
				r.Repetitions[k].Steps[i].Requests[j].Prompt.Identity += "-" + salt
			}
		}
	}
	return r
}

// TestCompareRunsOfEqualShapesWhateverTheirSalt: a candidate of fresh bytes (another salt)
// compares with the baseline, saying so; one that changed its seed or a plan does not, nor
// does one of the same salt whose bytes differ.
func TestCompareRunsOfEqualShapesWhateverTheirSalt(t *testing.T) {
	b := load(t, "baseline")
	res := mustCompare(t, b, salted(load(t, "baseline"), "2f9c1d"), Options{Tolerance: DefaultTolerance})
	if res.Regression || len(res.Mismatches) != 0 || res.Candidate.Salt != "2f9c1d" ||
		res.Salted != "the runs sent fresh bytes of the same shapes (prompt salt: baseline none, candidate 2f9c1d), compared by shape" {
		t.Fatalf("regression %v, mismatches %v, salted %q", res.Regression, res.Mismatches, res.Salted)
	}
	var text strings.Builder
	res.WriteText(&text)
	if !strings.Contains(text.String(), "prompts: the runs sent fresh bytes of the same shapes") {
		t.Errorf("text output does not say the prompts were salted:\n%s", text.String())
	}
	// Two salted runs of different salts compare as well.
	if _, err := Compare(salted(load(t, "baseline"), "a1"), salted(load(t, "baseline"), "b2"), Options{Tolerance: DefaultTolerance}); err != nil {
		t.Errorf("two salts: %v", err)
	}

	changed := []struct {
		name  string
		edit  func(*runs.Run)
		field string
	}{
		{"a changed seed", func(r *runs.Run) { r.Repetitions[0].Seed++ }, "prompt shape (salts differ) of sequence[0]"},
		{"a changed plan", func(r *runs.Run) { r.Repetitions[0].Steps[0].Requests[2].PlannedTokens = 1700 }, "prompt shape (salts differ) of sequence[2]"},
		{"a changed shared prefix", func(r *runs.Run) { r.Scenario.Prompt.SharedPrefixTokens = 256 }, "prompt shape (salts differ) of sequence[0]"},
		{"the same salt, other bytes", func(r *runs.Run) { r.Scenario.Prompt.Salt = "" }, "prompt identity of sequence[0]"},
	}
	for _, c := range changed {
		cand := salted(load(t, "baseline"), "2f9c1d")
		c.edit(cand)
		_, err := Compare(b, cand, Options{Tolerance: DefaultTolerance})
		var mm *MismatchError
		if !errors.As(err, &mm) || mm.Mismatches[0].Field != c.field {
			t.Errorf("%s: %v, want a mismatch of %s", c.name, err, c.field)
		}
	}
}

// TestCompareRefusesWarmCaches: a run whose cold sequence came back cached (last night's
// prompts still in the server's CPU tier) is not comparable, as candidate or baseline: the
// error names the side, the step and warm caches, and the CLI exits 2 (ErrMismatch).
func TestCompareRefusesWarmCaches(t *testing.T) {
	warm := func() *runs.Run {
		r := load(t, "baseline")
		for k := range r.Repetitions {
			for j := range r.Repetitions[k].Steps[0].Requests {
				q := &r.Repetitions[k].Steps[0].Requests[j]
				cached := *q.Result.PromptTokens - 8
				q.Result.CachedPromptTokens = &cached
			}
		}
		r.Derive(r.Repetitions)
		return r
	}
	for _, side := range []string{"candidate", "baseline"} {
		b, c := load(t, "baseline"), warm()
		if side == "baseline" {
			b, c = c, b
		}
		_, err := Compare(b, c, Options{Tolerance: DefaultTolerance, AllowMismatch: true})
		var we *WarmError
		if !errors.Is(err, ErrWarmCaches) || !errors.Is(err, ErrMismatch) || !errors.As(err, &we) || we.Side != side {
			t.Fatalf("%s warm: %v", side, err)
		}
		for _, want := range []string{side + " (", "measured warm caches, so the runs are not comparable: warm caches: step sequence is a cold sequence, yet 4 of its 4 requests came back", "; repetition 1: warm caches: step sequence", "--salt random"} {
			if !strings.Contains(err.Error(), want) {
				t.Errorf("%s warm: %q lacks %q", side, err, want)
			}
		}
	}
	if _, err := Compare(load(t, "baseline"), load(t, "baseline"), Options{Tolerance: DefaultTolerance}); err != nil {
		t.Errorf("the cold fixtures: %v", err)
	}
}

package claims

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/scenarios"
)

// The fixtures: seed 001's claim and the demo's eviction+replay run it describes.
var (
	seedClaim = filepath.Join("..", "..", "cmd", "kvbench", "testdata", "claims", "seed001-replay.toml")
	demoRun   = filepath.Join("..", "..", "internal", "study", "testdata", "demo", "eviction-6x150k-replay-20261201T060008Z")
)

// TestVerifyFilesIsVerifyOfWhatItLoads: the record of VerifyFiles is Verify's of the claim
// and runs it names; a claim or a run that does not load is an error naming it.
func TestVerifyFilesIsVerifyOfWhatItLoads(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	got, err := VerifyFiles(seedClaim, []string{demoRun}, "test", at)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := Load(seedClaim)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runs.Load(demoRun)
	if err != nil {
		t.Fatal(err)
	}
	want := Verify(claim, []*runs.Run{r}, "test", at)
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) || len(got.Results) == 0 || len(got.Runs) != 1 {
		t.Fatalf("VerifyFiles:\n%s\nwant Verify's:\n%s", gj, wj)
	}
	if _, err := VerifyFiles("no-such-claim.toml", []string{demoRun}, "test", at); err == nil || !strings.Contains(err.Error(), "no-such-claim.toml") {
		t.Errorf("a missing claim: %v", err)
	}
	if _, err := VerifyFiles(seedClaim, []string{demoRun, t.TempDir()}, "test", at); !errors.Is(err, runs.ErrNotRun) {
		t.Errorf("a directory that is not a run: %v, want runs.ErrNotRun", err)
	}
}

// TestMeasureMatchesOldCurveNames: a claim naming a curve point's replay by its exact size
// (kvbench's names before size classes) reads the step a newer run names by its class.
func TestMeasureMatchesOldCurveNames(t *testing.T) {
	r, err := runs.Load(demoRun)
	if err != nil {
		t.Fatal(err)
	}
	want := Measure([]*runs.Run{r}, Expectation{Step: "replay", Metric: "cached_fraction"})
	for k := range r.Repetitions {
		for i := range r.Repetitions[k].Sections {
			if s := &r.Repetitions[k].Sections[i]; s.Step == "replay" {
				s.Step = "curve_128k_replay"
			}
		}
	}
	r.Scenario.Curves = []scenarios.Curve{{ID: "curve", Points: []scenarios.CurveSteps{{Tokens: 130000, Sequence: "curve_128k", Replay: "curve_128k_replay"}}}}
	for i := range r.Repetitions[0].Steps {
		if st := &r.Repetitions[0].Steps[i]; st.Step == "replay" {
			st.Step = "curve_128k_replay"
		}
	}
	got := Measure([]*runs.Run{r}, Expectation{Step: "curve_130000_replay", Metric: "cached_fraction"})
	if got.Missing != "" || len(got.Numbers) == 0 || len(got.Numbers) != len(want.Numbers) || *got.Numbers[0] != *want.Numbers[0] {
		t.Fatalf("measured %+v under the old name, want %+v", got, want)
	}
}

// curveRun is the demo run with its replay renamed into the one point (130,000 planned
// tokens) of a reload curve "curve", as a curve run names it.
func curveRun(t *testing.T) *runs.Run {
	t.Helper()
	r, err := runs.Load(demoRun)
	if err != nil {
		t.Fatal(err)
	}
	for k := range r.Repetitions {
		for i := range r.Repetitions[k].Sections {
			if s := &r.Repetitions[k].Sections[i]; s.Step == "replay" {
				s.Step = "curve_128k_replay"
			}
		}
		for i := range r.Repetitions[k].Steps {
			if st := &r.Repetitions[k].Steps[i]; st.Step == "replay" {
				st.Step = "curve_128k_replay"
			}
		}
	}
	r.Scenario.Curves = []scenarios.Curve{{ID: "curve", Points: []scenarios.CurveSteps{{Tokens: 130000, Sequence: "curve_128k", Replay: "curve_128k_replay"}}}}
	return r
}

// TestCurveClaimsJudgeEveryPointInRange: a claim over a curve's points reads each point in
// its size range, from the run's one curve or the curve its step names, and says why when
// none is there.
func TestCurveClaimsJudgeEveryPointInRange(t *testing.T) {
	rs := []*runs.Run{curveRun(t)}
	from := func(n int) *int { return &n }
	cases := []struct {
		name string
		e    Expectation
		want Status
		why  string
	}{
		{"prompt tokens of every point", Expectation{Metric: "reload_curve.prompt_tokens", FromTokens: from(4096), AtLeast: f(100000)}, Reproduced, "1 of 1 point(s) from 4096 tokens hold it"},
		{"verdict of the curve named", Expectation{Step: "curve", Metric: "reload_curve.verdict", Equals: "cpu_reload"}, Reproduced, "1 of 1 point(s) hold it"},
		{"a point out of bounds", Expectation{Metric: "reload_curve.prompt_tokens", AtMost: f(1000)}, NotReproduced, "curve_128k_replay (130000 tokens) not_reproduced: median 126919 > 1000"},
		{"no point in range", Expectation{Metric: "reload_curve.prompt_tokens", FromTokens: from(200000), AtLeast: f(1)}, NotMeasurable, `curve "curve" has no point from 200000 tokens`},
		{"a misspelt curve", Expectation{Step: "curv", Metric: "reload_curve.prompt_tokens", AtLeast: f(1)}, NotMeasurable, `no run has a reload curve "curv" (did you mean "curve"?)`},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Evaluate(c.e, Measure(rs, c.e))
			if r.Status != c.want || !strings.Contains(r.Why, c.why) {
				t.Fatalf("%s: %s, want %s: %s", r.Status, r.Why, c.want, c.why)
			}
			if c.want != NotMeasurable && (len(r.Points) != 1 || r.Points[0].Step != "curve_128k_replay" || r.Points[0].Tokens != 130000 || r.Step != "curve") {
				t.Fatalf("points %+v, step %q", r.Points, r.Step)
			}
		})
	}
	// The demo has no curve: a curve claim says so.
	plain, err := runs.Load(demoRun)
	if err != nil {
		t.Fatal(err)
	}
	e := Expectation{Metric: "reload_curve.gain", AtLeast: f(2)}
	if r := Evaluate(e, Measure([]*runs.Run{plain}, e)); r.Status != NotMeasurable || r.Why != "no run has a reload curve" {
		t.Errorf("%s: %s", r.Status, r.Why)
	}
}

// TestUnknownStepSuggestsTheNearest: a step no run measured names the nearest step the runs
// have, by the names claims give curve points (their size class).
func TestUnknownStepSuggestsTheNearest(t *testing.T) {
	rs := []*runs.Run{curveRun(t)}
	for step, want := range map[string]string{
		"curve_128_replay": `no run has a measured step "curve_128_replay" (did you mean "curve_128k_replay"?)`,
		"eviction_seqence": `no run has a measured step "eviction_seqence" (did you mean "eviction_sequence"?)`,
		"nothing_like_it":  `no run has a measured step "nothing_like_it"`,
	} {
		m := Measure(rs, Expectation{Step: step, Metric: "cached_fraction"})
		if m.Missing != want {
			t.Errorf("%s: %q, want %q", step, m.Missing, want)
		}
	}
}

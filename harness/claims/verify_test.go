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

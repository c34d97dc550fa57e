package derive

import (
	"encoding/json"
	"os"
	"path/filepath"
	"reflect"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// loadDemoRun reads a demo run directory the way runs.Load does, without its checks: the
// record, then its steps assembled and derived.
func loadDemoRun(t *testing.T, dir string) *Run {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var r Run
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	if r.Scenario == nil || r.Scenario.Name == "" {
		t.Fatalf("%s: scenario not parsed", dir)
	}
	rep := Repetition{Repetition: record.Repetition{Status: record.StatusCompleted}}
	for _, a := range r.Artifacts {
		data, err := os.ReadFile(filepath.Join(dir, a.Path))
		if err != nil {
			t.Fatal(err)
		}
		var art record.StepArtifact
		if err := json.Unmarshal(data, &art); err != nil {
			t.Fatal(err)
		}
		rep.Steps, rep.Artifacts = append(rep.Steps, Assemble(art)), append(rep.Artifacts, a.Path)
	}
	r.Derive([]Repetition{rep})
	return &r
}

// TestLoadedRunRederivesItsGates: the gates of a run read back from disk are what the run
// wrote, computed by the same rules from its steps.
func TestLoadedRunRederivesItsGates(t *testing.T) {
	for _, dir := range []string{
		"../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z",
		"../../internal/study/testdata/demo/offload8-control-20261201T060010Z",
	} {
		r := loadDemoRun(t, dir)
		got := r.CheckGates()
		if len(got) == 0 || !reflect.DeepEqual(got, r.Gates) {
			t.Errorf("%s: re-derived gates\n%+v\nwritten\n%+v", dir, got, r.Gates)
		}
		// And the record written again is the file.
		data, err := json.MarshalIndent(r, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "run.json"))
		if string(data)+"\n" != string(want) {
			t.Errorf("%s: derived record differs from run.json", dir)
		}
	}
}

func TestEvaluateGates(t *testing.T) {
	zero, one := 0, 1
	frac, ttft, decode := 0.5, 900.0, 20.0
	store := 4096.0
	sections := []record.Section{
		{Step: "replay", Replay: &record.ReplaySection{Verdict: "recompute", VerdictReason: "no hits", CachedFraction: &frac, TimeToFirstOutputMS: &ttft,
			DecodeTokensPerSecond: &decode, SetupValid: "no", Interpretation: "too small", Error: "timeout"}},
		{Step: "seq", Sequence: &record.SequenceSection{GPUToCPUBytesDelta: &store, StoreProven: true, Requests: 3, FailedRequestIndices: []int{1}}},
		{Step: "cold", Sequence: &record.SequenceSection{GPUToCPUBytesDelta: &store, WarmCaches: &record.WarmCaches{Reason: "warm caches: step cold"}}},
	}
	tests := []struct {
		gate   scenarios.Gate
		passed bool
		reason string
	}{
		{scenarios.Gate{Step: "replay", Verdict: "recompute"}, true, "verdict recompute"},
		{scenarios.Gate{Step: "replay", Verdict: "cpu_reload"}, false, "verdict recompute, want cpu_reload (no hits)"},
		{scenarios.Gate{Step: "replay", MinCachedFraction: 0.9}, false, "cached fraction 0.5000, want >= 0.9"},
		{scenarios.Gate{Step: "replay", MaxTimeToFirstOutputMS: 1000}, true, "time to first output 900.0 ms <= 1000"},
		{scenarios.Gate{Step: "replay", MinDecodeTokensPerSec: 30}, false, "decode 20.0 tokens/s, want >= 30"},
		{scenarios.Gate{Step: "replay", RequireValidSetup: true}, false, "setup cannot prove a reload (no): too small"},
		{scenarios.Gate{Step: "replay", MaxFailedRequests: &zero}, false, "1 failed requests, want <= 0"},
		{scenarios.Gate{Step: "seq", RequireStore: true}, true, "store proven (4096 bytes)"},
		{scenarios.Gate{Step: "seq", MaxFailedRequests: &one}, true, "1 failed"},
		{scenarios.Gate{Step: "cold", RequireStore: true}, false, "store not proven: GPU->CPU 4096 bytes; warm caches: step cold"},
		{scenarios.Gate{Step: "missing", Verdict: "cpu_reload"}, false, "the step was not measured"},
	}
	for _, tt := range tests {
		got := EvaluateGates([]scenarios.Gate{tt.gate}, sections)
		if len(got) != 1 || got[0].Passed != tt.passed || !strings.Contains(got[0].Reason, tt.reason) {
			t.Errorf("%+v: %+v, want passed %v, %q", tt.gate, got, tt.passed, tt.reason)
		}
	}
	// Across repetitions a gate passes only when it passes in every one, and the failure
	// names the repetition.
	pass := []record.Section{{Step: "replay", Replay: &record.ReplaySection{Verdict: "cpu_reload"}}}
	fail := []record.Section{{Step: "replay", Replay: &record.ReplaySection{Verdict: "partial", VerdictReason: "half"}}}
	reps := []Repetition{{Sections: pass}, {Repetition: record.Repetition{Index: 1}, Sections: fail}, {Repetition: record.Repetition{Index: 2}, Sections: fail}}
	got := EvaluateRepeatedGates([]scenarios.Gate{{Step: "replay", Verdict: "cpu_reload"}}, reps)
	if got[0].Passed || got[0].Reason != "repetition 1: verdict partial, want cpu_reload (half); repetition 2: verdict partial, want cpu_reload (half)" {
		t.Errorf("repeated: %+v", got)
	}
}

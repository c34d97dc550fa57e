package runs

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
)

// crashedCopy copies demoRuns[0] (a sequence of 6 and a replay) into a fresh directory as a
// run killed after its first step: run.json says running and lists step 1 only. keepStep2
// keeps step 2's file (written, but run.json was not replaced yet); otherwise step 2 is left
// as its journal, the replay request (with its verdict unless undecided, as a journal of
// kvbench before verdicts were decided at the request's end), plus a line cut short by the kill.
func crashedCopy(t *testing.T, keepStep2, undecided bool) string {
	t.Helper()
	src := demoRuns[0]
	r, err := Load(src)
	if err != nil {
		t.Fatal(err)
	}
	dst := t.TempDir()
	full := r.Repetitions[0]
	r.Status = record.StatusRunning
	r.Artifacts = r.Artifacts[:1]
	first := full
	first.Steps, first.Artifacts = full.Steps[:1], full.Artifacts[:1]
	r.Derive([]derive.Repetition{first}) // run.json as written after step 1
	data, err := json.MarshalIndent(r.Run, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dst, "run.json"), data, 0o644); err != nil {
		t.Fatal(err)
	}
	step1, _ := os.ReadFile(filepath.Join(src, "step-01-eviction_sequence.json"))
	os.WriteFile(filepath.Join(dst, "step-01-eviction_sequence.json"), step1, 0o644)
	if keepStep2 {
		step2, _ := os.ReadFile(filepath.Join(src, "step-02-replay.json"))
		os.WriteFile(filepath.Join(dst, "step-02-replay.json"), step2, 0o644)
		return dst
	}
	q := full.Steps[1].Requests[0]
	if undecided {
		q.Verdict = nil
	}
	j, err := OpenJournal(filepath.Join(dst, JournalName("step-02-replay.json")))
	if err != nil {
		t.Fatal(err)
	}
	if err := j.Append(q); err != nil {
		t.Fatal(err)
	}
	j.Close()
	f, _ := os.OpenFile(j.Path(), os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"step":"replay","index_in_st`)
	f.Close()
	return dst
}

// TestLoadKilledRunWithUnlistedStepFile: a step file written after run.json's last
// replacement is part of the run; the run loads as incomplete, never completed.
func TestLoadKilledRunWithUnlistedStepFile(t *testing.T) {
	r, err := Load(crashedCopy(t, true, false))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusIncomplete || !strings.Contains(r.StopReason, "did not finish") {
		t.Fatalf("status %q (%s)", r.Status, r.StopReason)
	}
	if got := len(r.Repetitions[0].Steps); got != 2 {
		t.Fatalf("%d steps, want 2", got)
	}
	if rp := r.Run.Replay("replay"); rp == nil || rp.Verdict != "cpu_reload" || rp.Artifact != "step-02-replay.json" {
		t.Fatalf("replay section not rebuilt from the unlisted file: %+v", rp)
	}
	if r.Repetitions[0].Status != record.StatusInterrupted {
		t.Fatalf("repetition status %q", r.Repetitions[0].Status)
	}
}

// TestLoadKilledRunRebuildsStepFromJournal: a step killed before its file was written is
// rebuilt from its journal, marked interrupted; a line the kill cut short is dropped.
func TestLoadKilledRunRebuildsStepFromJournal(t *testing.T) {
	r, err := Load(crashedCopy(t, false, false))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusIncomplete {
		t.Fatalf("status %q", r.Status)
	}
	st := r.Step(0, "replay")
	if st == nil || !st.Interrupted || st.Kind != "replay" || len(st.Requests) != 1 {
		t.Fatalf("replay step %+v", st)
	}
	// The replay's verdict was decided before it was journaled: the journal keeps it.
	if rp := r.Run.Replay("replay"); rp == nil || rp.Verdict != "cpu_reload" {
		t.Fatalf("a journaled replay lost its verdict: %+v", rp)
	}
	// A journal line without a verdict (kvbench before verdicts were decided at once) is
	// invalid, in verdict's words.
	old, err := Load(crashedCopy(t, false, true))
	if err != nil {
		t.Fatal(err)
	}
	if rp := old.Run.Replay("replay"); rp == nil || rp.Verdict != "invalid" || !strings.Contains(rp.VerdictReason, "verdict was decided") {
		t.Fatalf("an undecided replay has section %+v, want invalid", rp)
	}
	if n := len(r.Step(0, "eviction_sequence").Requests); n != 6 {
		t.Fatalf("sequence has %d requests", n)
	}
	if got := r.Files[len(r.Files)-1].Path; !strings.HasSuffix(got, ".partial.jsonl") {
		t.Fatalf("the journal is not among the run's files: %s", got)
	}
}

// TestLoadRunKilledBeforeAnyStep: a run directory with only its first run.json (status
// running, no steps) loads as incomplete with one empty repetition.
func TestLoadRunKilledBeforeAnyStep(t *testing.T) {
	r, err := Load(demoRuns[0])
	if err != nil {
		t.Fatal(err)
	}
	info := derive.RunInfo{Scenario: r.Scenario, ObservedAt: time.Now(), Status: record.StatusRunning}
	dir, err := CreateRunDir(t.TempDir(), "x", time.Now(), derive.NewRun(info))
	if err != nil {
		t.Fatal(err)
	}
	got, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if got.Status != record.StatusIncomplete || len(got.Repetitions) != 1 || len(got.Repetitions[0].Steps) != 0 {
		t.Fatalf("status %q, repetitions %+v", got.Status, got.Repetitions)
	}
}

// TestLoadRunWithoutRecord: a directory whose run.json is unreadable (or gone) but whose
// step files and journal are there loads as incomplete, rebuilt from them.
func TestLoadRunWithoutRecord(t *testing.T) {
	for _, corrupt := range []bool{false, true} {
		dir := crashedCopy(t, false, false)
		if corrupt {
			os.WriteFile(filepath.Join(dir, "run.json"), []byte(`{"schema": "anvil-serving.kv-off`), 0o644)
		} else {
			os.Remove(filepath.Join(dir, "run.json"))
		}
		r, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		if r.Status != record.StatusIncomplete || !strings.Contains(r.StopReason, "run.json is unreadable") {
			t.Fatalf("status %q (%s)", r.Status, r.StopReason)
		}
		if r.Scenario.Name != "eviction-6x150k-replay" || len(r.Repetitions[0].Steps) != 2 {
			t.Fatalf("scenario %q, %d steps", r.Scenario.Name, len(r.Repetitions[0].Steps))
		}
		if st := r.Step(0, "replay"); st == nil || st.Kind != "replay" || !st.Interrupted || len(st.Requests) != 1 {
			t.Fatalf("replay %+v", st)
		}
		if n := len(r.Step(0, "eviction_sequence").Requests); n != 6 {
			t.Fatalf("sequence has %d requests", n)
		}
	}
}

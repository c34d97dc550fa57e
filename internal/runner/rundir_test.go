package runner

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/events"
)

// TestRunDirSinkKeepsTheRunAsItGoes: the run directory exists, with a run.json, once the
// run started; a request is journaled the moment it is done; a step's end writes its file
// and drops the journal; the run's end writes the final run.json listing the step.
func TestRunDirSinkKeepsTheRunAsItGoes(t *testing.T) {
	parent := t.TempDir()
	s := NewRunDirSink(parent)
	if err := s.Handle(events.Note{Text: "too early"}); err == nil {
		t.Fatal("an event before RunStarted was taken")
	}
	started := time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC)
	running := &derive.Run{Run: &record.Run{Status: record.StatusRunning}}
	handle := func(e events.Event) {
		t.Helper()
		if err := s.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	handle(events.RunStarted{Scenario: "unit", Started: started, Record: running})
	if want := filepath.Join(parent, "unit-20250102T030405Z"); s.Dir() != want {
		t.Fatalf("dir %q, want %q", s.Dir(), want)
	}
	if status := runStatus(t, s.Dir()); status != record.StatusRunning {
		t.Fatalf("run.json at the start: status %q", status)
	}
	const artifact = "step-01-sequence.json"
	journal := filepath.Join(s.Dir(), runs.JournalName(artifact))
	handle(events.StepStarted{Step: "sequence", Artifact: artifact})
	handle(events.RequestDone{Request: record.Request{Step: "sequence"}})
	if data, err := os.ReadFile(journal); err != nil || strings.Count(string(data), "\n") != 1 {
		t.Fatalf("journal after one request: %q, %v", data, err)
	}
	handle(events.StepDone{Artifact: artifact, Record: running})
	if _, err := os.Stat(filepath.Join(s.Dir(), artifact)); err != nil {
		t.Fatalf("step file: %v", err)
	}
	if _, err := os.Stat(journal); !os.IsNotExist(err) {
		t.Fatalf("journal kept after its step's file was written: %v", err)
	}
	handle(events.RunDone{Record: &derive.Run{Run: &record.Run{Status: record.StatusCompleted}}, Dir: s.Dir()})
	if status := runStatus(t, s.Dir()); status != record.StatusCompleted {
		t.Fatalf("final run.json: status %q", status)
	}
	if err := s.Handle(events.RunStarted{Scenario: "unit", Started: started, Record: running}); err == nil {
		t.Fatal("a second RunStarted was taken: one sink is one run")
	}
}

// TestRunDirSinkRefusesAParentItCannotUse: a run directory that cannot be made is
// RunStarted's error, so the run never starts.
func TestRunDirSinkRefusesAParentItCannotUse(t *testing.T) {
	file := filepath.Join(t.TempDir(), "a-file")
	if err := os.WriteFile(file, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	s := NewRunDirSink(file)
	err := s.Handle(events.RunStarted{Scenario: "unit", Started: time.Now(), Record: &derive.Run{Run: &record.Run{Status: record.StatusRunning}}})
	if err == nil || s.Dir() != "" {
		t.Fatalf("RunStarted under a file: %v, dir %q", err, s.Dir())
	}
}

func runStatus(t *testing.T, dir string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, runs.RunFile))
	if err != nil {
		t.Fatal(err)
	}
	var r struct{ Status string }
	if err := json.Unmarshal(data, &r); err != nil {
		t.Fatal(err)
	}
	return r.Status
}

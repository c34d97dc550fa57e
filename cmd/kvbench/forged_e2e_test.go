package main

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// stopInFirstStep runs crashScenario as a process, sends sig while its second request waits
// at a gate (the first reported finished, the step not), and returns the run directory,
// checked to hold no step file for the first step when killed (only its journal) and the
// first step's file only when stopped.
func stopInFirstStep(t *testing.T, sig syscall.Signal) string {
	t.Helper()
	g := startGate(t, startSim(t, sim.Options{Profile: "tiny", Speed: 1}), preflightChats+1)
	out := t.TempDir()
	c := startChild(t, "run", writeScenario(t, crashScenario), "--endpoint", g.URL()+"/v1", "--out", out)
	g.waitHeld(t)
	c.cmd.Process.Signal(sig)
	c.wait(t, time.Minute)
	dirs := runDirs(t, out)
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	for _, step := range []string{"step-02-second", "step-03-replay"} {
		if m, _ := filepath.Glob(filepath.Join(dirs[0], step+"*")); len(m) > 0 {
			t.Fatalf("the signal landed after the first step: %v (console:\n%s)", m, c.console())
		}
	}
	return dirs[0]
}

// TestAccountingReadsARunKilledInItsFirstStep: a run killed with SIGKILL during its first
// step (no step file, only the step's journal) still gives accounting its measured bytes per
// stored token, rebuilt from the journal as a finished step's would be.
func TestAccountingReadsARunKilledInItsFirstStep(t *testing.T) {
	dir := stopInFirstStep(t, syscall.SIGKILL)
	if _, err := os.Stat(filepath.Join(dir, "step-01-first.json")); !os.IsNotExist(err) {
		t.Fatalf("the first step's file exists (%v): the kill was not in the step", err)
	}
	r, err := runs.Load(dir)
	if err != nil || r.Status != record.StatusIncomplete {
		t.Fatalf("load: %v (%+v)", err, r)
	}
	stdout, stderr, code := runCLI(t, "accounting", dir)
	if code != cli.ExitOK {
		t.Fatalf("accounting: exit %d: %s", code, stderr)
	}
	var summary struct {
		Pool struct {
			Status    string   `json:"status"`
			Measured  *float64 `json:"store_bytes_per_token_measured"`
			TokenSlot int      `json:"runtime_reported_allocated_token_slots"`
		} `json:"pool"`
	}
	if err := json.Unmarshal([]byte(stdout), &summary); err != nil {
		t.Fatalf("accounting output: %v\n%s", err, stdout)
	}
	// The tiny engine stores 2,048 bytes per token; the measured figure counts the prompt
	// tokens the requests computed, a few below the prompt.
	if m := summary.Pool.Measured; summary.Pool.Status != "derived" || m == nil || *m < 1900 || *m > 2100 || *m != *r.Cache.StoreBytesPerTokenMeasured {
		t.Fatalf("accounting pool %+v (measured %v, the loaded run's %v)", summary.Pool, m, r.Cache.StoreBytesPerTokenMeasured)
	}
}

// TestReadersRefuseAnEditedStatus: an interrupted run (stopped in its first step: two of its
// three steps missing, the first step's file interrupted) whose run.json was edited to say
// completed is refused by every reader, exit 2, naming run.json's status and what is
// missing.
func TestReadersRefuseAnEditedStatus(t *testing.T) {
	dir := stopInFirstStep(t, syscall.SIGINT)
	path := filepath.Join(dir, "run.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	edited := bytes.Replace(data, []byte(`"status": "interrupted"`), []byte(`"status": "completed"`), 1)
	if bytes.Equal(edited, data) {
		t.Fatalf("run.json has no interrupted status:\n%s", data)
	}
	if err := os.WriteFile(path, edited, 0o600); err != nil {
		t.Fatal(err)
	}
	want := path + `: status: "completed", but repetition 0 holds steps [first] of the scenario's [first second replay] (missing [second replay])`
	for _, args := range [][]string{
		{"summarize", dir}, {"verify", "testdata/claims/seed001-replay.toml", dir}, {"report", dir, "-o", filepath.Join(t.TempDir(), "r.html")},
		{"compare", dir, dir}, {"accounting", dir}, {"export", dir}, {"push", dir, "http://127.0.0.1:1"},
	} {
		if _, stderr, code := runCLI(t, args...); code != cli.ExitUsage || !strings.Contains(stderr, want) {
			t.Errorf("%s: exit %d: %s\nwant 2 with %s", args[0], code, stderr, want)
		}
	}
}

// TestReadersRefuseImpossibleJournalValues: a killed run's journal line edited to a TTFT of
// -5, or a decode rate of -1e300, is refused by summarize, export and accounting, exit 2,
// naming the journal's file and line and the field.
func TestReadersRefuseImpossibleJournalValues(t *testing.T) {
	dir := stopInFirstStep(t, syscall.SIGKILL)
	journal := filepath.Join(dir, runs.JournalName("step-01-first.json"))
	original, err := os.ReadFile(journal)
	if err != nil {
		t.Fatal(err)
	}
	for field, value := range map[string]float64{"time_to_first_output_ms": -5, "decode_tokens_per_second": -1e300} {
		lines := strings.SplitAfter(string(original), "\n")
		var q map[string]any
		if err := json.Unmarshal([]byte(lines[0]), &q); err != nil {
			t.Fatal(err)
		}
		q["result"].(map[string]any)[field] = value
		line, _ := json.Marshal(q)
		lines[0] = string(line) + "\n"
		if err := os.WriteFile(journal, []byte(strings.Join(lines, "")), 0o600); err != nil {
			t.Fatal(err)
		}
		want := journal + ":1: result." + field + " is "
		for _, args := range [][]string{{"summarize", dir, "--allow-incomplete"}, {"export", dir}, {"accounting", dir}} {
			if _, stderr, code := runCLI(t, args...); code != cli.ExitUsage || !strings.Contains(stderr, want) {
				t.Errorf("%s with %s = %g: exit %d: %s\nwant 2 with %s", args[0], field, value, code, stderr, want)
			}
		}
	}
}

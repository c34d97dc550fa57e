package main

import (
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// traceSection is the trace section "load" of a run record.
func traceSection(t *testing.T, rec map[string]any) record.TraceSection {
	t.Helper()
	var ts record.TraceSection
	raw, _ := json.Marshal(section(t, rec, "load"))
	if err := json.Unmarshal(raw, &ts); err != nil {
		t.Fatal(err)
	}
	return ts
}

// TestTraceReplayWarm: replaying a trace a second time on the same server, whose pools hold
// the whole trace, serves far more from cache than any cache could serve of the trace itself:
// the second run's trace step is warm (WARM CACHES on the console, warm_caches in the record)
// and compare refuses it, exit 2. The first run, from cold caches, is not.
func TestTraceReplayWarm(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: func(p *sim.Profile) {
		p.NumGPUBlocks = 8192
		p.MaxModelLen = 2048
		p.StoreBytesPerToken = 2048
		p.CPUOffloadGiB = float64(320*16*2048) / (1 << 30)
	}})
	dir := t.TempDir()
	file := writeTrace(t, dir, 120, 50)
	sc := traceScenario(t, dir, filepath.Base(file), "concurrency = 1")
	out := t.TempDir()
	var dirs []string
	for night := range 2 {
		rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", filepath.Join(out, []string{"a", "b"}[night]))
		if code != cli.ExitOK {
			t.Fatalf("run %d: exit %d:\n%s", night, code, stderr)
		}
		ts := traceSection(t, rec)
		if ts.Ideal == nil || !ts.CountersValid {
			t.Fatalf("run %d: ideal %v (%s), counters valid %v %q", night, ts.Ideal, ts.IdealUnavailable, ts.CountersValid, ts.InvalidReasons)
		}
		hits := 0.0
		if ts.Tiers.GPU != nil {
			hits += *ts.Tiers.GPU
		}
		if ts.Tiers.Host != nil {
			hits += *ts.Tiers.Host
		}
		t.Logf("run %d: measured %.3f cached, the trace's most %.3f", night, hits, ts.Ideal.MaxHitRate)
		switch warm := ts.WarmCaches != nil; {
		case night == 0 && (warm || strings.Contains(stderr, "WARM CACHES")):
			t.Fatalf("the cold run is warm: %+v\n%s", ts.WarmCaches, stderr)
		case night == 1 && (!warm || !strings.Contains(stderr, "WARM CACHES: warm caches: step load replays a trace")):
			t.Fatalf("the second replay is not warm: %+v\n%s", ts.WarmCaches, stderr)
		}
		d := filepath.Join(out, []string{"a", "b"}[night])
		dirs = append(dirs, filepath.Join(d, onlyEntry(t, d)))
	}
	_, stderr, code := runCLI(t, "compare", dirs[0], dirs[1])
	if code != cli.ExitUsage || !strings.Contains(stderr, "measured warm caches") {
		t.Errorf("compare of a warm replay: exit %d, %s", code, stderr)
	}
}

// TestTraceCounterResetInsideStep: the engine restarting its counters at request 60 of a
// concurrency-4 replay, with no scrape falling across the restart, leaves the step's
// counters below the requests' usage: the step's counters are invalid, the reason naming
// both figures, and no tier share is reported.
func TestTraceCounterResetInsideStep(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: func(p *sim.Profile) {
		p.NumGPUBlocks = 128
		p.MaxModelLen = 2048
		p.StoreBytesPerToken = 2048
		p.CPUOffloadGiB = float64(320*16*2048) / (1 << 30)
		p.RestartAtRequest = 60
		p.MultiprocessExposition = true // no process start time: the usage cross-check alone
	}})
	dir := t.TempDir()
	file := writeTrace(t, dir, 120, 50)
	sc := traceScenario(t, dir, filepath.Base(file), "concurrency = 4\nscrape_interval = \"10m\"")
	rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	ts := traceSection(t, rec)
	t.Logf("exit %d; counters valid %v, reasons %q", code, ts.CountersValid, ts.InvalidReasons)
	if ts.CountersValid || ts.Tiers.GPU != nil || !strings.Contains(strings.Join(ts.InvalidReasons, "; "), "prompt tokens over the step while its requests' usage sums to") {
		t.Fatalf("a reset inside the step went unnoticed: valid %v, GPU share %v, reasons %q\n%s", ts.CountersValid, ts.Tiers.GPU, ts.InvalidReasons, stderr)
	}
	if !strings.Contains(ts.Finding, "counters are not valid") {
		t.Errorf("finding %q", ts.Finding)
	}
	if code == 0 {
		t.Errorf("exit 0 although the step's tier shares were not measured")
	}
}

// TestTraceRestartSeenByProcessStart: a restart at request 8 of 120 costs the counters a few
// requests' tokens, well within the usage cross-check's tolerance, and counters that regrew
// past their old values never go down; the server's process start time moving is what
// shows it, and the step's counters are invalid naming it.
func TestTraceRestartSeenByProcessStart(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: func(p *sim.Profile) {
		p.NumGPUBlocks = 128
		p.MaxModelLen = 2048
		p.RestartAtRequest = 8
	}})
	dir := t.TempDir()
	file := writeTrace(t, dir, 120, 50)
	sc := traceScenario(t, dir, filepath.Base(file), "concurrency = 4\nscrape_interval = \"10m\"")
	rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	ts := traceSection(t, rec)
	reasons := strings.Join(ts.InvalidReasons, "; ")
	t.Logf("exit %d; counters valid %v, reasons %q", code, ts.CountersValid, reasons)
	if ts.CountersValid || ts.Tiers.GPU != nil || !strings.Contains(reasons, "process start time moved") {
		t.Fatalf("a restart inside the step went unnoticed: valid %v, GPU share %v, reasons %q\n%s", ts.CountersValid, ts.Tiers.GPU, reasons, stderr)
	}
	if strings.Contains(reasons, "usage sums to") {
		t.Errorf("the usage cross-check fired too (%q): the case no longer isolates the process start", reasons)
	}
	if code == 0 || !strings.Contains(stderr, "the server restarted during the step") {
		t.Errorf("exit %d: a step whose tier shares were not measured must fail its implicit gate\n%s", code, stderr)
	}
}

// TestConversationCounterResetInsideStep: a conversation step on an engine that restarts its
// counters at request 7 of 9, no scrape falling across the restart, has invalid counters
// naming the counters' and the usage's prompt tokens.
func TestConversationCounterResetInsideStep(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: func(p *sim.Profile) {
		p.RestartAtRequest = 7
		p.MultiprocessExposition = true // no process start time: the usage cross-check alone
	}})
	file := filepath.Join(t.TempDir(), "chat.toml")
	text := strings.Replace(chatScenarioTOML, "scrape_interval = \"20ms\"", "scrape_interval = \"10m\"", 1)
	if err := os.WriteFile(file, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	var cs record.ConversationSection
	raw, _ := json.Marshal(section(t, rec, "chat"))
	if err := json.Unmarshal(raw, &cs); err != nil {
		t.Fatal(err)
	}
	t.Logf("exit %d; counters valid %v, reasons %q", code, cs.CountersValid, cs.InvalidReasons)
	if cs.CountersValid || cs.Tiers.GPU != nil || !strings.Contains(strings.Join(cs.InvalidReasons, "; "), "prompt tokens over the step while its requests' usage sums to") {
		t.Fatalf("a reset inside the conversation went unnoticed: valid %v, GPU share %v, reasons %q\n%s", cs.CountersValid, cs.Tiers.GPU, cs.InvalidReasons, stderr)
	}
}

package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
)

// TestRunRecordsAsItGoes: while a request is being sent, every request before it is already
// on disk: in its step's journal (one line each) or, once the step ended, in the step file
// run.json lists, with run.json saying running until the run ends.
func TestRunRecordsAsItGoes(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	cfg := newConfig(t, unitScenario, chat, m)
	parent := t.TempDir()
	cfg.Sinks = []events.Sink{NewRunDirSink(parent)}
	base := offloadServer(m)
	var seen []string
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		dirs, _ := filepath.Glob(filepath.Join(parent, "unit-*"))
		if len(dirs) != 1 {
			t.Errorf("call %d: run directories %v", n, dirs)
			return base(n, req, p)
		}
		dir := dirs[0]
		status, _ := runFile(t, dir, "status").(string)
		sources, _ := runFile(t, dir, "sources").([]any)
		journal, _ := os.ReadFile(filepath.Join(dir, "step-01-sequence.partial.jsonl"))
		seen = append(seen, fmt.Sprint(status, " ", len(sources), " ", bytes.Count(journal, []byte("\n")), " ", len(stepFiles(t, dir))))
		return base(n, req, p)
	}
	out := run(t, context.Background(), cfg)
	// status, sources listed, journal lines of step 1, step files: the three sequence requests
	// find 0, 1, 2 lines in step 1's journal; the replay finds step 1's file listed instead.
	want := []string{"running 0 0 0", "running 0 1 0", "running 0 2 0", "running 1 0 1"}
	if strings.Join(seen, "; ") != strings.Join(want, "; ") {
		t.Fatalf("on disk at each call:\n got %q\nwant %q", seen, want)
	}
	if runFile(t, out.Dir, "status") != record.StatusCompleted {
		t.Fatalf("final status %v", runFile(t, out.Dir, "status"))
	}
	if j, _ := filepath.Glob(filepath.Join(out.Dir, "*.partial.jsonl")); len(j) > 0 {
		t.Fatalf("journals left after the run: %v", j)
	}
}

// TestConcurrentStepJournalsEachRequestAsItEnds: in a step at concurrency 2, the requests
// that finished are in the journal while later ones still run, not only at the step's end.
func TestConcurrentStepJournalsEachRequestAsItEnds(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	src := strings.Replace(unitScenario, "requests = 3\n", "requests = 4\nconcurrency = 2\n", 1)
	cfg := newConfig(t, src, chat, m)
	parent := t.TempDir()
	cfg.Sinks = []events.Sink{NewRunDirSink(parent)}
	journaled := -1
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		if n != 3 {
			return okResult(300, nil)
		}
		// The fourth call starts only once two of the first three have ended: wait (bounded)
		// for their journal lines.
		dirs, _ := filepath.Glob(filepath.Join(parent, "unit-*"))
		if len(dirs) != 1 {
			t.Errorf("run directories %v", dirs)
			return okResult(300, nil)
		}
		for deadline := time.Now().Add(10 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
			journal, _ := os.ReadFile(filepath.Join(dirs[0], "step-01-sequence.partial.jsonl"))
			if journaled = bytes.Count(journal, []byte("\n")); journaled >= 2 {
				break
			}
		}
		return okResult(300, nil)
	}
	out := run(t, context.Background(), cfg)
	if journaled < 2 {
		t.Fatalf("while the last request ran, the journal held %d finished requests, want >= 2", journaled)
	}
	if a := out.Steps[0]; len(a.Requests) != 4 {
		t.Fatalf("%d requests in the step, want 4", len(a.Requests))
	}
	for i, r := range out.Steps[0].Requests {
		if r.IndexInStep != i {
			t.Fatalf("request %d has index %d: the artifact must keep plan order", i, r.IndexInStep)
		}
	}
}

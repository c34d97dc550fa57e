package runner

import (
	"bytes"
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/record"
)

// TestRunRecordsAsItGoes: while a request is being sent, every request before it is already
// on disk: in its step's journal (one line each) or, once the step ended, in the step file
// run.json lists, with run.json saying running until the run ends.
func TestRunRecordsAsItGoes(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	cfg := newConfig(t, unitScenario, chat, m)
	base := offloadServer(m)
	var seen []string
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		dirs, _ := filepath.Glob(filepath.Join(cfg.ResultsDir, "unit-*"))
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

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// TestDeadMetricsStopsTheRun: when /metrics dies mid-run, the run stops early with status
// failed and the cause named, keeps what it measured, and exits non-zero; the step whose
// last request could not be scraped carries no counter change.
func TestDeadMetricsStopsTheRun(t *testing.T) {
	// Preflight and the first requests scrape fine; then every scrape is a 500.
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) {
		p.MetricsFault, p.MetricsFaultAfter = sim.MetricsFaultError, 6
	}})
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	code := cli.ExitCode(run(context.Background(), []string{"run", "smoke", "--endpoint", srv.URL() + "/v1", "--out", out}, &stdout, &stderr), &stderr)
	if code != cli.ExitRuntime || !strings.Contains(stderr.String(), "/metrics stopped answering") {
		t.Fatalf("exit %d, want %d naming /metrics:\n%s", code, cli.ExitRuntime, stderr.String())
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	r, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != "failed" || !strings.Contains(r.StopReason, "/metrics stopped answering: 3 scrapes in a row failed") {
		t.Fatalf("status %q, stop reason %q", r.Status, r.StopReason)
	}
	measured := 0
	for _, st := range r.Repetitions[0].Steps {
		measured += len(st.Requests)
	}
	if measured == 0 || measured >= 4 {
		t.Fatalf("%d requests measured; want the run to stop before the replay but keep what it had", measured)
	}
	data, _ := os.ReadFile(filepath.Join(dir, "run.json"))
	var rec map[string]any
	json.Unmarshal(data, &rec)
	if seq, ok := rec["sequence"].(map[string]any); ok && seq["counters_valid"] == true {
		t.Fatalf("the sequence's counters are valid although /metrics died in it: %v", seq)
	}
}

package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/export"
	"github.com/anvil-serving/kvbench/internal/study"
)

// TestShardedTraceRuns: two runs with --shard 1/2 and 2/2 on the embedded engine each send
// about half of the window, their requests partition it, each record says its shard, and
// each run's pushes carry a shard label. A shard out of range is bad input.
func TestShardedTraceRuns(t *testing.T) {
	srv, _, _ := traceSim(t, 200)
	dir := t.TempDir()
	const n = 80
	file := writeTrace(t, dir, n, 200)
	sc := traceScenario(t, dir, filepath.Base(file), "concurrency = 4")
	owner := map[int]int{}
	var dirs []string
	var prompt float64
	for k := 1; k <= 2; k++ {
		out := t.TempDir()
		shard := []string{"1/2", "2/2"}[k-1]
		_, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", out, "--shard", shard)
		if code != cli.ExitOK {
			t.Fatalf("run --shard %s: exit %d:\n%s", shard, code, stderr)
		}
		dirs = append(dirs, filepath.Join(out, onlyEntry(t, out)))
		r, err := runs.Load(dirs[k-1])
		if err != nil {
			t.Fatal(err)
		}
		if tr := r.Trace("load"); tr == nil || tr.Shard == nil || tr.Tiers.PromptTokens == nil {
			t.Fatalf("shard %s: run.json's trace section %+v", shard, tr)
		} else {
			prompt += *tr.Tiers.PromptTokens
		}
		st := r.Repetitions[0].Steps[0]
		if sh := st.Trace.Shard; sh == nil || sh.Index != k || sh.Count != 2 {
			t.Fatalf("shard %s: the record's shard is %+v", shard, sh)
		}
		sent := len(st.Requests)
		t.Logf("shard %s sent %d of %d requests", shard, sent, n)
		if sent != st.Trace.PlannedRequests || sent < n/4 || sent > 3*n/4 {
			t.Errorf("shard %s sent %d of %d requests (planned %d), want about half", shard, sent, n, st.Trace.PlannedRequests)
		}
		for _, q := range st.Requests {
			if q.Result.Failed() {
				t.Errorf("shard %s: line %d failed", shard, q.Trace.Line)
			}
			if prev, ok := owner[q.Trace.Line]; ok {
				t.Errorf("line %d sent by shards %d and %d", q.Trace.Line, prev, k)
			}
			owner[q.Trace.Line] = k
		}
		if !slices.Contains(export.Identity(r), export.Label{Name: "shard", Value: shard}) {
			t.Errorf("shard %s: push labels %v, want shard=%s", shard, export.Identity(r), shard)
		}
	}
	if len(owner) != n {
		t.Errorf("the shards sent %d distinct lines of %d", len(owner), n)
	}

	// The join: the window's requests, and the tier split of both shards' counters (they
	// ran one after another, so their changes add up); no ideal, which does not add up.
	stdout, stderr, code := runCLI(t, "summarize", "--shards", dirs[1], dirs[0])
	if code != cli.ExitOK {
		t.Fatalf("summarize --shards: exit %d: %s", code, stderr)
	}
	var joined study.Shards
	if err := json.Unmarshal([]byte(stdout), &joined); err != nil {
		t.Fatal(err)
	}
	if joined.Schema != study.ShardsSchema || joined.Count != 2 || len(joined.Runs) != 2 || joined.Runs[0].Shard != 1 || len(joined.Steps) != 1 {
		t.Fatalf("joined %+v", joined)
	}
	js := joined.Steps[0]
	if js.Requests != n || js.PlannedRequests != n || js.FailedRequests != 0 || js.Ideal != nil || js.IdealUnavailable == "" {
		t.Errorf("joined step %+v: want the window's %d requests and no ideal", js, n)
	}
	if js.Tiers == nil || js.TiersMethod != "sum" || js.Tiers.PromptTokens == nil || *js.Tiers.PromptTokens != prompt {
		t.Errorf("joined tiers %+v (%s, %s): want the shards' prompt tokens summed, %v", js.Tiers, js.TiersMethod, js.TiersUnavailable, prompt)
	}
	whole := t.TempDir()
	if _, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", whole); code != cli.ExitOK {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	for _, bad := range [][]string{{dirs[0]}, {dirs[0], dirs[0]}, {dirs[0], filepath.Join(whole, onlyEntry(t, whole))}} {
		_, stderr, code := runCLI(t, append([]string{"summarize", "--shards"}, bad...)...)
		if code != cli.ExitUsage || strings.Count(strings.TrimSpace(stderr), "\n") != 0 {
			t.Errorf("summarize --shards %v: exit %d, %q; want one line, exit 2", bad, code, stderr)
		}
	}
	for _, bad := range []string{"3/2", "0/1", "1/0", "half"} {
		_, stderr, code := runCLI(t, "run", sc, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--shard", bad)
		if code != cli.ExitUsage || strings.Count(strings.TrimSpace(stderr), "\n") != 0 || !strings.Contains(stderr, "--shard") {
			t.Errorf("--shard %s: exit %d, stderr %q; want one line naming --shard, exit 2", bad, code, stderr)
		}
	}
}

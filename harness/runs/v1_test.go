package runs

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Run directories kvbench wrote before the record owned its schema (step schema v1): a
// seed-study run, a repeated run, and a run killed with -9 in its first step.
const (
	v1Eviction = "testdata/v1/demo-eviction"
	v1Repeated = "testdata/v1/repeated"
	v1Killed   = "testdata/v1/killed"
)

// TestLoadV1Runs: every reader still loads what the previous version wrote, and derives the
// same verdicts and figures from it.
func TestLoadV1Runs(t *testing.T) {
	r, err := Load(v1Eviction)
	if err != nil {
		t.Fatal(err)
	}
	rp := r.Replay("replay")
	if r.Status != record.StatusCompleted || rp == nil || rp.Verdict != verdict.CPUReload || rp.SetupValid != capacity.Yes ||
		!strings.HasPrefix(rp.Interpretation, "The replay was reloaded from the CPU tier. At the measured bytes per stored token") {
		t.Fatalf("seed run: %s %+v", r.Status, rp)
	}
	if s := r.Cache.StoreBytesPerTokenMeasured; s == nil || *s < 20700 || *s > 20900 {
		t.Fatalf("measured bytes per stored token %v", s)
	}
	if sq := r.Sequence("eviction_sequence"); sq == nil || !sq.StoreProven || !sq.CountersValid {
		t.Fatalf("sequence %+v", sq)
	}

	rep, err := Load(v1Repeated)
	if err != nil {
		t.Fatal(err)
	}
	if len(rep.Repetitions) != 2 || rep.Repeats == nil || rep.Repeats.Count != 2 || !rep.Repeats.VerdictsAgree {
		t.Fatalf("repeated: %d repetitions, repeats %+v", len(rep.Repetitions), rep.Repeats)
	}
	if vs := rep.Verdicts("replay"); len(vs) != 2 || vs[0] != verdict.GPUHit || vs[1] != verdict.GPUHit {
		t.Fatalf("verdicts %v", vs)
	}
}

// TestLoadV1KilledRunKeepsItsFigures: a run killed with -9 in its first step is rebuilt from
// its journal the way a finished step is assembled, so the bytes per stored token that
// accounting needs are measured from the journaled requests (the same run after SIGINT gave
// 1,950 for the tiny engine; this one is the seed-sized engine's ~20,790).
func TestLoadV1KilledRunKeepsItsFigures(t *testing.T) {
	r, err := Load(v1Killed)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusIncomplete || len(r.Repetitions) != 1 || len(r.Repetitions[0].Steps) != 1 {
		t.Fatalf("status %s, %d repetitions", r.Status, len(r.Repetitions))
	}
	st := r.Repetitions[0].Steps[0]
	if !st.Interrupted || len(st.Requests) != 2 || st.Span == nil || !st.Span.Valid {
		t.Fatalf("rebuilt step: interrupted %v, %d requests, span %+v", st.Interrupted, len(st.Requests), st.Span)
	}
	if s := r.Cache.StoreBytesPerTokenMeasured; s == nil || *s < 20700 || *s > 20900 {
		t.Fatalf("measured bytes per stored token %v: the journal rebuild dropped the figure", s)
	}
}

// TestJournalRebuildSeesResetBetweenRequests: a counter reset between two journaled
// requests of a killed run's step makes the rebuilt step invalid, as it does live.
func TestJournalRebuildSeesResetBetweenRequests(t *testing.T) {
	sc := &scenarios.Scenario{Name: "killed", Steps: []scenarios.Step{{ID: "seq", Requests: 2, Concurrency: 1}}}
	dir, err := CreateRunDir(t.TempDir(), "killed", time.Now(), derive.NewRun(derive.RunInfo{Scenario: sc, Status: record.StatusRunning}))
	if err != nil {
		t.Fatal(err)
	}
	span := func(before, after float64) *record.Counters {
		read := func(v float64) metrics.Snapshot {
			return metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.StoreBytes: {Value: v, Present: true, Source: "s"}}}
		}
		return derive.NewCounters(read(before), read(after))
	}
	j, err := OpenJournal(filepath.Join(dir, JournalName(ArtifactName(0, 0, "seq"))))
	if err != nil {
		t.Fatal(err)
	}
	// 0 -> 1000, then the server restarts: 10 -> 5000. Each request alone is monotone.
	for i, c := range []*record.Counters{span(0, 1000), span(10, 5000)} {
		if err := j.Append(record.Request{Step: "seq", IndexInStep: i, Ordinal: i, Counters: c}); err != nil {
			t.Fatal(err)
		}
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	r, err := Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Repetitions[0].Steps[0]
	if st.Span == nil || st.Span.Valid || !strings.Contains(st.Span.InvalidReasons[0], "went down from 1000 after request 0 to 10 before request 1") {
		t.Fatalf("the recovered step's span %+v, want invalid across the reset", st.Span)
	}
	if sq := r.Sequence("seq"); sq.CountersValid || sq.GPUToCPUBytesDelta != nil {
		t.Fatalf("section %+v", sq)
	}
	if _, err := os.Stat(filepath.Join(dir, JournalName(ArtifactName(0, 0, "seq")))); err != nil {
		t.Fatal(err)
	}
}

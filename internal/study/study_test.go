package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"os"
	"path/filepath"
	"reflect"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// The fixture under testdata/demo is a `kvbench demo` output (two runs on the embedded
// engine, the study record and the accounting summary) written before the run record was
// typed: these tests prove the records are recomputed byte for byte from the runs' files.
const demoDir = "testdata/demo"

var demoRuns = []string{"eviction-6x150k-replay-20261201T060008Z", "offload8-control-20261201T060010Z"}

func loadDemo(t *testing.T) ([]*runs.Run, string) {
	t.Helper()
	base, err := filepath.Abs(demoDir)
	if err != nil {
		t.Fatal(err)
	}
	var rs []*runs.Run
	for _, d := range demoRuns {
		r, err := runs.Load(filepath.Join(base, d))
		if err != nil {
			t.Fatal(err)
		}
		rs = append(rs, r)
	}
	return rs, base
}

func indented(t *testing.T, v any) []byte {
	t.Helper()
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	return append(data, '\n')
}

func assertSameFile(t *testing.T, path string, got []byte) {
	t.Helper()
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	if !bytes.Equal(got, want) {
		t.Fatalf("%s is not reproduced byte for byte:\n--- got\n%s", path, got)
	}
}

// The study written before the record was typed went through map[string]any, which sorted
// the keys of nested objects (evidence, capacity); sections now keep run.json's field order.
// So the study must equal the old one as JSON, with the same top-level key order.
func TestSummarizeReproducesTheDemoStudy(t *testing.T) {
	rs, base := loadDemo(t)
	rec, err := Summarize(rs, base, false)
	if err != nil {
		t.Fatal(err)
	}
	got := indented(t, rec)
	want, err := os.ReadFile(filepath.Join(demoDir, "study.json"))
	if err != nil {
		t.Fatal(err)
	}
	var g, w any
	if err := json.Unmarshal(got, &g); err != nil {
		t.Fatal(err)
	}
	json.Unmarshal(want, &w)
	if !reflect.DeepEqual(g, w) {
		t.Fatalf("the study differs from the demo's study.json:\n%s", got)
	}
	if gk, wk := topKeys(t, got), topKeys(t, want); !slices.Equal(gk, wk) {
		t.Fatalf("top-level keys %v, want %v", gk, wk)
	}
}

func topKeys(t *testing.T, data []byte) []string {
	t.Helper()
	dec := json.NewDecoder(bytes.NewReader(data))
	dec.Token()
	var keys []string
	for dec.More() {
		k, _ := dec.Token()
		keys = append(keys, k.(string))
		var skip json.RawMessage
		if err := dec.Decode(&skip); err != nil {
			t.Fatal(err)
		}
	}
	return keys
}

func TestSummarizeRefusesMixedSetups(t *testing.T) {
	rs, base := loadDemo(t)
	other := *rs[1].Run
	other.Model.Repo = "another/model"
	rs[1].Run = &other
	_, err := Summarize(rs, base, false)
	if !errors.Is(err, ErrMixed) || !strings.Contains(err.Error(), "model.repo") {
		t.Fatalf("err = %v, want ErrMixed naming model.repo", err)
	}
	if _, err := Summarize(rs, base, true); err != nil {
		t.Fatalf("--allow-mixed: %v", err)
	}
}

func TestAccountingReproducesTheDemoSummary(t *testing.T) {
	rs, base := loadDemo(t)
	rec, err := Accounting(rs, PoolSpec{GPUs: 1}, base)
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, filepath.Join(demoDir, "accounting.json"), indented(t, rec))
}

// TestAccountingReadsWhatAnUnfinishedRunMeasured: a run whose store counters gave no bytes
// per token over the whole run (its server died) sizes its pool from the figure its replay
// measured, and a step with no occupancy sample (a step cut short) is named as not
// accounted rather than refusing the rest; with nothing measured the error says what is
// missing.
func TestAccountingReadsWhatAnUnfinishedRunMeasured(t *testing.T) {
	rs, base := loadDemo(t)
	rs[0].Cache.StoreBytesPerTokenMeasured = nil
	first := &rs[0].Repetitions[0].Steps[0]
	first.Sampled.PeakKVUsage, first.Sampled.IntervalMS = nil, 0
	rec, err := Accounting(rs, PoolSpec{GPUs: 1}, base)
	if err != nil {
		t.Fatal(err)
	}
	if rec.Pool.Status != "derived" || rec.Pool.StoreBytesPerTokenMeasured != 20789.058135655814 || !strings.Contains(rec.Pool.ConfiguredByteSource.Kind, "measured for step replay") {
		t.Errorf("pool %+v", rec.Pool)
	}
	full, _ := loadDemo(t)
	whole, err := Accounting(full, PoolSpec{GPUs: 1}, base)
	if err != nil {
		t.Fatal(err)
	}
	if len(rec.Rows) != len(whole.Rows)-1 {
		t.Errorf("%d rows, want %d (all but the unsampled step)", len(rec.Rows), len(whole.Rows)-1)
	}
	if !slices.ContainsFunc(rec.Limits, func(l string) bool {
		return strings.HasPrefix(l, "Not accounted (1 step): ") && strings.Contains(l, "/"+first.Step+": no kv_usage sample") && strings.Contains(l, "no sample interval was recorded")
	}) {
		t.Errorf("limits do not name the unsampled step: %q", rec.Limits)
	}

	rs, _ = loadDemo(t)
	rs[0].Cache.StoreBytesPerTokenMeasured, rs[0].Cache.GPUKVCacheTokens = nil, 0
	for _, id := range rs[0].ReplayStepIDs() {
		rs[0].Replay(id).Capacity = nil
	}
	_, err = Accounting(rs[:1], PoolSpec{GPUs: 1}, base)
	if err == nil || !strings.Contains(err.Error(), "no bytes per stored token was measured") || !strings.Contains(err.Error(), "no GPU token slots") {
		t.Errorf("nothing to size the pool: %v", err)
	}
}

package study

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
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
		os.WriteFile(filepath.Join(t.TempDir(), "got.json"), got, 0o644)
		t.Fatalf("%s is not reproduced byte for byte:\n--- got\n%s", path, got)
	}
}

func TestSummarizeReproducesTheDemoStudy(t *testing.T) {
	rs, base := loadDemo(t)
	rec, err := Summarize(rs, base, false)
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, filepath.Join(demoDir, "study.json"), indented(t, rec))
}

func TestAccountingReproducesTheDemoSummary(t *testing.T) {
	rs, base := loadDemo(t)
	rec, err := Accounting(rs, PoolSpec{GPUs: 1}, base)
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, filepath.Join(demoDir, "accounting.json"), indented(t, rec))
}

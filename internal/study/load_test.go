package study

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// demoDirs are the demo's run directories as a user names them: relative.
func demoDirs() []string {
	return []string{filepath.Join(demoDir, demoRuns[0]), filepath.Join(demoDir, demoRuns[1])}
}

// TestSummarizeDirsNamesFilesFromTheRecordsDirectory: run directories given relative to the
// working directory, and a record to be written beside them, reproduce the demo's study,
// whose artifact paths are relative to its own directory; a printed study names them as
// absolute paths, which resolve from anywhere.
func TestSummarizeDirsNamesFilesFromTheRecordsDirectory(t *testing.T) {
	rec, err := SummarizeDirs(demoDirs(), filepath.Join(demoDir, "study.json"), false, false)
	if err != nil {
		t.Fatal(err)
	}
	rs, base := loadDemo(t)
	want, err := Summarize(rs, base, false)
	if err != nil {
		t.Fatal(err)
	}
	if got, want := indented(t, rec), indented(t, want); string(got) != string(want) {
		t.Fatalf("SummarizeDirs:\n%s\nwant Summarize's:\n%s", got, want)
	}
	printed, err := SummarizeDirs(demoDirs(), "", false, false)
	if err != nil {
		t.Fatal(err)
	}
	if len(printed.Artifacts) == 0 {
		t.Fatal("a printed study lists no artifacts")
	}
	for _, a := range printed.Artifacts {
		if !filepath.IsAbs(a.Path) {
			t.Errorf("a printed study names %s: want an absolute path", a.Path)
		}
	}
}

// TestSummarizeDirsRefusesUnfinishedRuns: a study record has no status of its own, so a run
// that did not finish is merged only when allowed.
func TestSummarizeDirsRefusesUnfinishedRuns(t *testing.T) {
	dir := filepath.Join(t.TempDir(), demoRuns[0])
	if err := os.CopyFS(dir, os.DirFS(filepath.Join(demoDir, demoRuns[0]))); err != nil {
		t.Fatal(err)
	}
	path := filepath.Join(dir, "run.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec["status"], rec["stop_reason"] = "interrupted", "received SIGTERM"
	if data, err = json.Marshal(rec); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	dirs := []string{dir, filepath.Join(demoDir, demoRuns[1])}
	_, err = SummarizeDirs(dirs, "", false, false)
	want := "summarize: " + dir + " is interrupted (received SIGTERM): not every step was measured (--allow-incomplete to merge it anyway)"
	if err == nil || err.Error() != want {
		t.Fatalf("an interrupted run: %v, want %q", err, want)
	}
	if _, err := SummarizeDirs(dirs, "", false, true); err != nil {
		t.Fatalf("allowed: %v", err)
	}
}

func TestAccountingDirsReproducesTheDemoSummary(t *testing.T) {
	rec, err := AccountingDirs(demoDirs(), PoolSpec{GPUs: 1}, filepath.Join(demoDir, "accounting.json"))
	if err != nil {
		t.Fatal(err)
	}
	assertSameFile(t, filepath.Join(demoDir, "accounting.json"), indented(t, rec))
	if _, err := AccountingDirs([]string{demoDir}, PoolSpec{GPUs: 1}, ""); err == nil || !strings.Contains(err.Error(), demoDir) {
		t.Errorf("a directory that is not a run: %v", err)
	}
}

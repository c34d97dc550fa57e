package main

import (
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
)

// copyRunDir copies a run directory's files into a fresh directory, so a test that writes
// at it (and a kvbench that wrongly obeys) never touches testdata.
func copyRunDir(t *testing.T, src string) string {
	t.Helper()
	dst := filepath.Join(t.TempDir(), filepath.Base(src))
	if err := os.MkdirAll(dst, 0o755); err != nil {
		t.Fatal(err)
	}
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		in, err := os.Open(filepath.Join(src, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		out, err := os.Create(filepath.Join(dst, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		if _, err := io.Copy(out, in); err != nil {
			t.Fatal(err)
		}
		in.Close()
		out.Close()
	}
	return dst
}

// TestNoWriterReplacesARecord: every file a user names for kvbench to write is refused,
// exit 2 in one line, when it is inside a run directory or an existing kvbench record; the
// run stays loadable and complete, its files byte for byte as they were.
func TestNoWriterReplacesARecord(t *testing.T) {
	run := copyRunDir(t, filepath.Join("testdata", "compare", "baseline"))
	claim := filepath.Join("testdata", "claims", "seed001-replay.toml")
	before := map[string]string{}
	entries, _ := os.ReadDir(run)
	for _, e := range entries {
		sum, err := runs.FileSHA256(filepath.Join(run, e.Name()))
		if err != nil {
			t.Fatal(err)
		}
		before[e.Name()] = sum
	}
	// A study record outside any run directory: a record all the same.
	study := filepath.Join(t.TempDir(), "study.json")
	if _, errOut, code := runCLI(t, "summarize", run, "--out", study); code != cli.ExitOK {
		t.Fatalf("summarize: exit %d %s", code, errOut)
	}
	studySum, _ := runs.FileSHA256(study)

	cases := []struct {
		name string
		args []string
		want string
	}{
		{"export over run.json", []string{"export", run, "-o", filepath.Join(run, "run.json")}, "inside a kvbench run directory"},
		{"export over a step file", []string{"export", run, "-o", filepath.Join(run, "step-01-sequence.json")}, "inside a kvbench run directory"},
		{"export into the run", []string{"export", run, "-o", filepath.Join(run, "kvbench.prom")}, "inside a kvbench run directory"},
		{"export over a study record", []string{"export", run, "-o", study}, "is a kvbench record"},
		{"report into the run", []string{"report", run, "-o", filepath.Join(run, "report.html")}, "inside a kvbench run directory"},
		{"summarize into the run", []string{"summarize", run, "--out", filepath.Join(run, "study.json")}, "inside a kvbench run directory"},
		{"summarize over a study", []string{"summarize", run, "--out", study}, "is a kvbench record"},
		{"accounting into the run", []string{"accounting", run, "--out", filepath.Join(run, "accounting.json")}, "inside a kvbench run directory"},
		{"verify --out into the run", []string{"verify", claim, run, "--out", filepath.Join(run, "verify.json")}, "inside a kvbench run directory"},
		{"verify --out over a study", []string{"verify", claim, run, "--out", study}, "is a kvbench record"},
		{"run --out inside the run", []string{"run", "smoke", "--endpoint", "http://127.0.0.1:1/v1", "--out", run}, "inside a kvbench run directory"},
		{"run --cpuprofile over run.json", []string{"run", "smoke", "--endpoint", "http://127.0.0.1:1/v1", "--out", t.TempDir(), "--cpuprofile", filepath.Join(run, "run.json")}, "inside a kvbench run directory"},
		{"sweep --out inside the run", []string{"sweep", "chat-capacity-offload16", "--users", "2", "--endpoint", "http://127.0.0.1:1/v1", "--out", run}, "inside a kvbench run directory"},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d %q; want exit 2 saying %q in one line", c.name, code, errOut, c.want)
		}
	}
	after, _ := os.ReadDir(run)
	if len(after) != len(before) {
		t.Errorf("the run directory holds %d entries, had %d", len(after), len(before))
	}
	for name, sum := range before {
		if got, _ := runs.FileSHA256(filepath.Join(run, name)); got != sum {
			t.Errorf("%s changed", name)
		}
	}
	if got, _ := runs.FileSHA256(study); got != studySum {
		t.Errorf("the study record changed")
	}
	r, err := runs.Load(run)
	if err != nil || r.Status != "completed" {
		t.Fatalf("the run after the refusals: %v", err)
	}

	// Export still replaces its own earlier file (a textfile collector's, rewritten nightly),
	// and a missing directory is named, not a temp file.
	prom := filepath.Join(t.TempDir(), "kvbench.prom")
	for range 2 {
		if _, errOut, code := runCLI(t, "export", run, "-o", prom); code != cli.ExitOK {
			t.Fatalf("export -o %s: exit %d %s", prom, code, errOut)
		}
	}
	missing := filepath.Join(t.TempDir(), "no", "such", "x.prom")
	if _, errOut, code := runCLI(t, "export", run, "-o", missing); code != cli.ExitUsage || !strings.Contains(errOut, missing+": its directory does not exist") || strings.Contains(errOut, ".tmp-") {
		t.Errorf("export -o into a missing directory: exit %d %q", code, errOut)
	}
}

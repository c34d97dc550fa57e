package main

import (
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// TestDerivedNameRefusedBeforeTheServer: a scenario named by its file (a 245-byte file
// name, or "..toml") is refused by validate and by run before any request, exit 2, leaving
// nothing in --out (no hidden "." directory, no temp directory named in an error).
func TestDerivedNameRefusedBeforeTheServer(t *testing.T) {
	base, err := os.ReadFile("../../scenarios/smoke.toml")
	if err != nil {
		t.Fatal(err)
	}
	unnamed := strings.Replace(string(base), "name = \"smoke\"\n", "", 1)
	var hits atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer counting.Close()
	for _, name := range []string{strings.Repeat("n", 245) + ".toml", "..toml"} {
		file := filepath.Join(t.TempDir(), name)
		if err := os.WriteFile(file, []byte(unnamed), 0o644); err != nil {
			t.Fatal(err)
		}
		out := t.TempDir()
		for _, args := range [][]string{{"validate", file}, {"run", file, "--endpoint", counting.URL + "/v1", "--out", out}} {
			_, errOut, code := runCLI(t, args...)
			if code != cli.ExitUsage || !strings.Contains(errOut, file+": name: ") || !strings.Contains(errOut, "taken from the file name") || strings.Contains(errOut, ".creating-") {
				t.Errorf("%s %s: exit %d %q", args[0], name, code, errOut)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Errorf("%s %s left %d entries in --out", args[0], name, len(entries))
			}
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("refused runs sent %d requests", n)
	}
}

// TestClaimValueTypoIsBadInput: a claimed value its field can never hold is bad input (exit
// 2 with the claim file, line and key), not a claim measured and "not reproduced" (exit 3).
func TestClaimValueTypoIsBadInput(t *testing.T) {
	for value, want := range map[string]string{
		"metric = \"verdict\"\nequals = \"cpu_relaod\"\n":   `typo.toml:6: expect[0].equals: "cpu_relaod" is not a value of verdict`,
		"metric = \"setup_valid\"\nequals = \"maybe\"\n":    `typo.toml:6: expect[0].equals: "maybe" is not a value of setup_valid`,
		"metric = \"cached_fraction\"\nequals = \"high\"\n": `typo.toml:6: expect[0].equals: "cached_fraction" is a number`,
	} {
		claim := filepath.Join(t.TempDir(), "typo.toml")
		os.WriteFile(claim, []byte("[source]\nurl = \"https://example.com/r\"\nobserved_date = \"2026-08-02\"\n[[expect]]\n"+value), 0o644)
		_, errOut, code := runCLI(t, "verify", claim, "testdata/compare/baseline")
		if code != cli.ExitUsage || !strings.Contains(errOut, want) {
			t.Errorf("exit %d %q, want 2 with %q", code, errOut, want)
		}
	}
}

// TestEveryTOMLTypeErrorIsReported: validate lists every value of the wrong type, each with
// its file and line, as the docs promise, not only the first.
func TestEveryTOMLTypeErrorIsReported(t *testing.T) {
	file := filepath.Join(t.TempDir(), "types.toml")
	os.WriteFile(file, []byte("repeat = \"three\"\n[prompt]\nseed = \"x\"\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nrequests = \"two\"\nplanned_context_tokens = [1000]\n"), 0o644)
	_, errOut, code := runCLI(t, "validate", file)
	for _, want := range []string{file + ":1: repeat:", file + ":3: prompt.seed:", file + ":7: step[0].requests:"} {
		if code != cli.ExitUsage || !strings.Contains(errOut, want) {
			t.Errorf("exit %d, missing %q in %q", code, want, errOut)
		}
	}
	if strings.Count(errOut, "\n") != 1 {
		t.Errorf("not one line: %q", errOut)
	}
}

// TestReservedLabelsRefused: label names Prometheus gives a meaning (le, quantile, __*) or
// kvbench sets itself (job, instance, scenario...) are refused for export and push, exit 2.
func TestReservedLabelsRefused(t *testing.T) {
	run := filepath.Join("testdata", "compare", "baseline")
	for _, l := range []string{"le=1", "quantile=0.5", "__name__=x", "__meta=x", "job=x", "instance=x", "scenario=x"} {
		if _, errOut, code := runCLI(t, "export", run, "--label", l); code != cli.ExitUsage || strings.Count(errOut, "\n") != 1 {
			t.Errorf("export --label %s: exit %d %q", l, code, errOut)
		}
	}
	if _, errOut, code := runCLI(t, "run", "smoke", "--endpoint", "http://127.0.0.1:1/v1", "--push", "http://127.0.0.1:1", "--push-label", "le=1"); code != cli.ExitUsage || !strings.Contains(errOut, `"le" is reserved`) {
		t.Errorf("run --push-label le=1: exit %d %q", code, errOut)
	}
	if _, errOut, code := runCLI(t, "export", run, "--label", "cluster=eu1"); code != cli.ExitOK {
		t.Errorf("export --label cluster=eu1: exit %d %q", code, errOut)
	}
}

// TestBadSaltRefusedBeforeTheServer: a --salt that is no salt is bad input (exit 2, the
// flag named, its text inert), refused before any request.
func TestBadSaltRefusedBeforeTheServer(t *testing.T) {
	var hits atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer counting.Close()
	out := t.TempDir()
	_, errOut, code := runCLI(t, "run", "smoke", "--endpoint", counting.URL+"/v1", "--out", out, "--salt", "night\x1b[2J")
	if code != cli.ExitUsage || !strings.Contains(errOut, `-salt: "night\x1b[2J" must be letters, digits`) || strings.Contains(errOut, "\x1b") {
		t.Errorf("exit %d %q", code, errOut)
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("a refused salt sent %d requests", n)
	}
}

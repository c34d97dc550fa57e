package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/runner"
)

var update = flag.Bool("update", false, "rewrite golden files")

// The long tests (tens of seconds each: llama.cpp runs, sweeps, the nightly, repeated runs
// of second-long requests) call t.Parallel. They spend most of their time waiting on their
// own servers, so two at once barely move each other's timings, and the package's
// `go test -count=2` stays within go test's 10-minute limit on a busy 2-core machine. The
// other tests run one at a time, before them.

// runCLI runs kvbench in-process and returns stdout, stderr and the exit code.
func runCLI(t *testing.T, args ...string) (string, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(context.Background(), args, &out, &errb)
	code := cli.ExitCode(err, &errb)
	return out.String(), errb.String(), code
}

func golden(t *testing.T, name, got string) {
	t.Helper()
	path := filepath.Join("testdata", name)
	if *update {
		if err := os.MkdirAll("testdata", 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(got), 0o644); err != nil {
			t.Fatal(err)
		}
	}
	want, err := os.ReadFile(path)
	if err != nil {
		t.Fatalf("%v (run go test ./cmd/kvbench -update)", err)
	}
	if got != string(want) {
		t.Fatalf("%s differs from the golden file:\n--- want\n%s\n--- got\n%s", name, want, got)
	}
}

func TestPlanGolden(t *testing.T) {
	for _, name := range []string{"offload8-control", "eviction-6x150k-replay"} {
		out, errOut, code := runCLI(t, "plan", name)
		if code != cli.ExitOK {
			t.Fatalf("plan %s: exit %d: %s", name, code, errOut)
		}
		golden(t, "plan-"+name+".golden", out)
	}
	out, _, _ := runCLI(t, "plan", "offload8-control")
	if !strings.Contains(out, "WARNING: this setup cannot prove a reload") || !strings.Contains(out, "not a valid GPU-eviction reload setup") {
		t.Fatalf("offload8-control plan does not warn:\n%s", out)
	}
	out, _, _ = runCLI(t, "plan", "eviction-6x150k-replay")
	if strings.Contains(out, "WARNING") || !strings.Contains(out, "eviction pressure    yes") {
		t.Fatalf("eviction plan:\n%s", out)
	}
}

func TestExitCodes(t *testing.T) {
	bad := filepath.Join(t.TempDir(), "bad.toml")
	os.WriteFile(bad, []byte("[[step]]\nid = \"a\"\nconcurrency = 0\nplanned_context_tokens = [10]\n"), 0o644)
	cases := []struct {
		args []string
		code int
		msg  string
	}{
		{[]string{"nonsense"}, cli.ExitUsage, `unknown command "nonsense"`},
		{[]string{}, cli.ExitUsage, "no command given"},
		{[]string{"validate", bad}, cli.ExitUsage, "bad.toml:3: step[0].concurrency: must be at least 1"},
		{[]string{"plan", "no-such-scenario"}, cli.ExitUsage, "no such scenario"},
		{[]string{"plan", "smoke", "--bogus"}, cli.ExitUsage, "flag provided but not defined: -bogus"},
		{[]string{"plan", "smoke", "--endpoint", "http://127.0.0.1:1/v1"}, cli.ExitUsage, "127.0.0.1:1"},
		{[]string{"validate", "smoke", "offload8-control"}, cli.ExitOK, ""},
		{[]string{"plan", "-h"}, cli.ExitOK, ""},
		{[]string{"version"}, cli.ExitOK, ""},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != c.code || !strings.Contains(errOut, c.msg) {
			t.Errorf("kvbench %s: exit %d %q, want %d with %q", strings.Join(c.args, " "), code, errOut, c.code, c.msg)
		}
		if strings.Count(errOut, "\n") > 1 {
			t.Errorf("kvbench %s: error is not one line: %q", strings.Join(c.args, " "), errOut)
		}
	}
}

func TestHelpShowsExample(t *testing.T) {
	out, _, code := runCLI(t, "plan", "-h")
	if code != cli.ExitOK || !strings.Contains(out, "Example:") || !strings.Contains(out, "kvbench plan eviction-6x150k-replay") {
		t.Fatalf("plan -h: %d\n%s", code, out)
	}
	out, _, _ = runCLI(t, "help")
	for _, c := range []string{"plan", "validate", "scenarios", "version"} {
		if !strings.Contains(out, "  "+c) {
			t.Errorf("help lacks %s:\n%s", c, out)
		}
	}
}

// TestOutcomeErrorFailedRun: a run that did less than asked exits non-zero even when its
// gates passed.
func TestOutcomeErrorFailedRun(t *testing.T) {
	err := outcomeError(&runner.Outcome{Dir: "results/x", Failed: "repetition 2 of 2 could not run: tokenizer down"})
	var ee *cli.ExitError
	if !errors.As(err, &ee) || ee.Code != cli.ExitRuntime || !strings.Contains(err.Error(), "repetition 2 of 2") {
		t.Fatalf("outcomeError = %v", err)
	}
	if err := outcomeError(&runner.Outcome{Dir: "results/x"}); err != nil {
		t.Fatalf("a completed run: %v", err)
	}
}

// TestValidateRefusesWhatRunWould: a shared prefix smaller than the fixed text around it is
// knowable offline, so validate refuses it with the file and line, as run would.
func TestValidateRefusesWhatRunWould(t *testing.T) {
	path := filepath.Join(t.TempDir(), "tiny.toml")
	text := "name = \"tiny\"\n[prompt]\nshared_prefix_tokens = 20\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [2000]\n"
	if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "validate", path)
	if code != cli.ExitUsage || !strings.Contains(stderr, path+":3: prompt.shared_prefix_tokens") || !strings.Contains(stderr, "fixed text") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

package main

import (
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// The compare goldens read two fixed runs from testdata (written once by kvbench run on the
// embedded engine): the baseline, 2 repetitions on the tiny profile; the candidate, 2
// repetitions with a 30% slower prefill and a CPU tier too small to keep the replayed prompt.
func TestCompareGolden(t *testing.T) {
	base := filepath.Join("testdata", "compare", "baseline")
	cand := filepath.Join("testdata", "compare", "candidate")
	for _, f := range []struct{ format, golden string }{
		{"markdown", "compare.md.golden"},
		{"json", "compare.json.golden"},
		{"text", "compare.txt.golden"},
	} {
		out, stderr, code := runCLI(t, "compare", base, cand, "--format", f.format)
		if code != cli.ExitRegression {
			t.Fatalf("%s: exit %d, want 4: %s", f.format, code, stderr)
		}
		if !strings.Contains(stderr, "replay: verdict cpu_reload -> recompute") {
			t.Fatalf("%s: stderr %q", f.format, stderr)
		}
		golden(t, f.golden, out)
	}
	// The same run against itself: nothing changed, exit 0.
	out, stderr, code := runCLI(t, "compare", base, base, "--format", "markdown")
	if code != cli.ExitOK || !strings.Contains(out, "No regression") {
		t.Fatalf("self-compare: exit %d %s\n%s", code, stderr, out)
	}
}

func TestCompareBadInput(t *testing.T) {
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"compare", "testdata/compare/baseline"}, "want a baseline and a candidate"},
		{[]string{"compare", "testdata/compare/baseline", "testdata/nope"}, "not a kvbench run directory"},
		{[]string{"compare", "testdata/compare/baseline", "testdata/compare/candidate", "--format", "yaml"}, "--format must be"},
	}
	for _, c := range cases {
		_, stderr, code := runCLI(t, c.args...)
		if code != cli.ExitUsage || !strings.Contains(stderr, c.msg) {
			t.Errorf("%v: exit %d %q, want 2 with %q", c.args, code, stderr, c.msg)
		}
	}
}

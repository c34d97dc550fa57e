package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

func TestExportOpenMetrics(t *testing.T) {
	base := filepath.Join("testdata", "compare", "baseline")
	other := filepath.Join("testdata", "compare", "other-scenario")
	stdout, stderr, code := runCLI(t, "export", "--format", "openmetrics", base, other, "--label", "cluster=ci")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if !strings.HasSuffix(stdout, "# EOF\n") || !strings.Contains(stdout, `scenario="other-tiny"`) || !strings.Contains(stdout, `cluster="ci"`) {
		t.Errorf("export of two runs:\n%s", stdout)
	}
	file := filepath.Join(t.TempDir(), "kvbench.prom")
	if _, stderr, code := runCLI(t, "export", base, "-o", file); code != cli.ExitOK {
		t.Fatalf("-o: exit %d: %s", code, stderr)
	}
	data, err := os.ReadFile(file)
	if err != nil || !strings.Contains(string(data), "kvbench_replay_verdict{") {
		t.Errorf("-o wrote %q (%v)", data, err)
	}
	// The same run twice would be the same series twice: refused.
	if _, stderr, code := runCLI(t, "export", base, base); code != cli.ExitUsage || !strings.Contains(stderr, "same series") {
		t.Errorf("duplicate runs: exit %d: %s", code, stderr)
	}
	if _, _, code := runCLI(t, "export", "--format", "json", base); code != cli.ExitUsage {
		t.Errorf("--format json: exit %d, want %d", code, cli.ExitUsage)
	}
}

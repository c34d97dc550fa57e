package main

import (
	"context"
	"encoding/json"
	"errors"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// TestHelpCommandPrintsTheCommandsHelp: 'kvbench help run' prints run's usage and flags, as
// 'kvbench run -h' does, not the top-level list; an unknown name is bad input.
func TestHelpCommandPrintsTheCommandsHelp(t *testing.T) {
	for _, name := range []string{"run", "compare", "push"} {
		want, _, code := runCLI(t, name, "-h")
		if code != cli.ExitOK {
			t.Fatalf("%s -h: exit %d", name, code)
		}
		got, stderr, code := runCLI(t, "help", name)
		if code != cli.ExitOK || got != want {
			t.Errorf("help %s: exit %d (%s), output:\n%s\nwant %s -h's:\n%s", name, code, stderr, got, name, want)
		}
		if !strings.HasPrefix(got, "Usage: kvbench "+name+" ") {
			t.Errorf("help %s starts %q", name, got[:min(len(got), 60)])
		}
	}
	if _, stderr, code := runCLI(t, "help", "nosuch"); code != cli.ExitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, `"nosuch"`) {
		t.Errorf("help nosuch: exit %d: %q", code, stderr)
	}
}

// TestVersionFlag: --version and -version print what 'kvbench version' prints.
func TestVersionFlag(t *testing.T) {
	want, _, code := runCLI(t, "version")
	if code != cli.ExitOK || !strings.HasPrefix(want, "kvbench ") {
		t.Fatalf("version: exit %d: %q", code, want)
	}
	for _, flag := range []string{"--version", "-version"} {
		if got, stderr, code := runCLI(t, flag); code != cli.ExitOK || got != want {
			t.Errorf("%s: exit %d (%s): %q, want %q", flag, code, stderr, got, want)
		}
	}
}

// TestCountersAcceptsFormatJSON: counters prints JSON, so --format json is accepted (and any
// other format refused as bad input).
func TestCountersAcceptsFormatJSON(t *testing.T) {
	out, stderr, code := runCLI(t, "counters", counterSample, "--format", "json")
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	var v map[string]any
	if err := json.Unmarshal([]byte(out), &v); err != nil {
		t.Fatalf("not JSON: %v\n%s", err, out)
	}
	if _, stderr, code := runCLI(t, "counters", counterSample, "--format", "text"); code != cli.ExitUsage || !strings.Contains(stderr, "--format") {
		t.Errorf("--format text: exit %d: %q", code, stderr)
	}
}

// brokenWriter fails every write, as a closed pipe does.
type brokenWriter struct{}

func (brokenWriter) Write([]byte) (int, error) { return 0, errors.New("broken pipe") }

// TestHelpReportsAFailedWrite: 'kvbench help' whose output cannot be written is an error,
// not exit 0 with nothing printed.
func TestHelpReportsAFailedWrite(t *testing.T) {
	var stderr strings.Builder
	err := run(context.Background(), []string{"help"}, brokenWriter{}, &stderr)
	if err == nil || !strings.Contains(err.Error(), "broken pipe") || cli.ExitCode(err, &stderr) != cli.ExitRuntime {
		t.Errorf("help on a broken stdout: %v", err)
	}
}

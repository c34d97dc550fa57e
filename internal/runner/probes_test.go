package runner

import (
	"context"
	"io"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/scenarios"
)

// TestRunProbes: a probe's JSON output is kept; a failing, non-JSON or hung probe is
// recorded as such; probes of the other phase do not run.
func TestRunProbes(t *testing.T) {
	probe := func(name, when string, timeout time.Duration, cmd ...string) scenarios.Probe {
		return scenarios.Probe{Name: name, When: when, Command: cmd, Timeout: scenarios.Duration{Duration: timeout}}
	}
	probes := []scenarios.Probe{
		probe("json", "before", time.Minute, "sh", "-c", `echo '{"free_gib": 12}'`),
		probe("text", "before", time.Minute, "sh", "-c", "echo hello"),
		probe("exit", "before", time.Minute, "sh", "-c", "echo oops >&2; exit 3"),
		probe("hung", "before", 50*time.Millisecond, "sleep", "60"),
		probe("missing", "before", time.Minute, "/nonexistent/kvbench-probe"),
		probe("later", "after", time.Minute, "sh", "-c", "echo {}"),
	}
	r := &runner{cfg: Config{Scenario: &scenarios.Scenario{Probes: probes}}, sinks: []events.Sink{NewConsole(io.Discard, false)}}
	got := r.runProbes(context.Background(), "before")
	if len(got) != 5 {
		t.Fatalf("%d probe results, want the 5 before-probes", len(got))
	}
	if r := got[0]; !r.OK || r.Output.(map[string]any)["free_gib"] != float64(12) {
		t.Errorf("json probe: %+v", r)
	}
	checks := []struct {
		exit   int
		errHas string
	}{
		{0, "stdout is not JSON"},
		{3, "exited with exit status 3"},
		{-1, "timed out after 50ms"},
		{-1, "no such file"},
	}
	for i, c := range checks {
		r := got[i+1]
		if r.OK || r.ExitCode != c.exit || !strings.Contains(r.Error, c.errHas) {
			t.Errorf("%s probe: ok %v exit %d %q, want exit %d and %q", r.Name, r.OK, r.ExitCode, r.Error, c.exit, c.errHas)
		}
	}
	if got[2].StderrTail != "oops\n" {
		t.Errorf("exit probe stderr %q", got[2].StderrTail)
	}
}

// TestLimitedBuffer: a runaway probe's output is cut at the limit without failing the write.
func TestLimitedBuffer(t *testing.T) {
	b := limitedBuffer{max: 10}
	for range 3 {
		if n, err := b.Write([]byte("0123456")); n != 7 || err != nil {
			t.Fatalf("write: %d %v", n, err)
		}
	}
	if b.String() != "0123456012" {
		t.Fatalf("kept %q", b.String())
	}
	if s := tail(strings.Repeat("x", 10)+"end", 3); s != "...end" {
		t.Fatalf("tail %q", s)
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// chatScenario writes the small conversation scenario to a file.
func chatScenario(t *testing.T, extra string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "chat.toml")
	if err := os.WriteFile(file, []byte(chatScenarioTOML+extra), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// sweepRecord reads the one sweep directory under out and its sweep.json.
func sweepRecord(t *testing.T, out string) (*record.Sweep, string) {
	t.Helper()
	dir := filepath.Join(out, onlyEntry(t, out))
	data, err := os.ReadFile(filepath.Join(dir, runs.SweepFile))
	if err != nil {
		t.Fatal(err)
	}
	var s record.Sweep
	if err := json.Unmarshal(data, &s); err != nil {
		t.Fatal(err)
	}
	return &s, dir
}

// TestSweepFailedRequestsFailTheGate: with requests failing (every 4th answers 500, or every
// stream is cut), each level's run fails its implicit gate, so the sweep exits 3 as run
// would; its capacity reason names the failed requests, not a TTFT that was within the line.
func TestSweepFailedRequestsFailTheGate(t *testing.T) {
	cases := []struct {
		name     string
		override func(*sim.Profile)
	}{
		{"500 on every 4th request", func(p *sim.Profile) { p.FailEveryNthRequest = 4 }},
		{"every stream cut", func(p *sim.Profile) { p.CutStreamAfterTokens = 2 }},
	}
	file := chatScenario(t, "")
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: c.override})
			out := t.TempDir()
			_, errOut, code := runCLI(t, "sweep", file, "--endpoint", srv.URL()+"/v1", "--users", "2,3", "--ttft-p90-ms", "60000", "--out", out)
			if code != cli.ExitGateFailed || !strings.Contains(errOut, "level(s) failed gates") {
				t.Fatalf("exit %d, want 3: %s", code, lastLine(errOut))
			}
			s, _ := sweepRecord(t, out)
			if len(s.Levels) != 2 || s.Status != record.StatusCompleted {
				t.Fatalf("sweep %s with %d levels", s.Status, len(s.Levels))
			}
			if s.Levels[0].FailedRequests == 0 {
				t.Fatalf("no failed request at %d users", s.Levels[0].Users)
			}
			if s.CapacityUsers != nil || !strings.Contains(s.CapacityReason, "failed requests of") || strings.Contains(s.CapacityReason, "within 60000 ms") {
				t.Fatalf("capacity %v: %s", s.CapacityUsers, s.CapacityReason)
			}
		})
	}
}

// TestSweepInterruptedExitsOne: a signal during the second level ends the sweep with exit 1,
// a sweep record saying interrupted, and a reason that does not call the interrupted level
// over the threshold.
func TestSweepInterruptedExitsOne(t *testing.T) {
	// Each level's preflight sends 2 chat requests and its 2 users x 3 turns 6 more: the 12th
	// chat request, in the second level, is never answered, so that level cannot end before
	// the signal, however slow or fast the machine.
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50, Override: func(p *sim.Profile) { p.HangEveryNthRequest = 12 }})
	file := chatScenario(t, "")
	out := t.TempDir()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	console := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sweep", file, "--endpoint", srv.URL() + "/v1", "--users", "2,3", "--ttft-p90-ms", "60000", "--out", out}, console, console)
	}()
	var err error
	deadline := time.After(2 * time.Minute)
wait:
	for {
		select {
		case err = <-done:
			t.Fatalf("the sweep ended before the second level: %v", err)
		case <-deadline:
			t.Fatal("the second level never started")
		case <-time.After(10 * time.Millisecond):
			if strings.Contains(console.String(), "sweep level: 3 users") {
				cancel(context.Canceled)
				break wait
			}
		}
	}
	select {
	case err = <-done:
	case <-time.After(2 * time.Minute):
		t.Fatal("the sweep did not stop")
	}
	var stderr bytes.Buffer
	if code := cli.ExitCode(err, &stderr); code != cli.ExitRuntime || !strings.Contains(stderr.String(), "interrupted") {
		t.Fatalf("exit %d, want 1: %s", code, stderr.String())
	}
	s, _ := sweepRecord(t, out)
	if s.Status != record.StatusInterrupted || s.CapacityUsers == nil || *s.CapacityUsers != 2 {
		t.Fatalf("sweep %s, capacity %v: %s", s.Status, s.CapacityUsers, s.CapacityReason)
	}
	if !strings.Contains(s.CapacityReason, "capacity is at least 2 users") || strings.Contains(s.CapacityReason, "did not") {
		t.Fatalf("reason: %s", s.CapacityReason)
	}
}

// TestSweepBadInputLeavesNothing: what run refuses as bad input (probes without consent, an
// unset key variable, an unreachable endpoint) sweep refuses with exit 2 too, before any
// request, leaving no sweep directory behind.
func TestSweepBadInputLeavesNothing(t *testing.T) {
	var hits atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer counting.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	probed := chatScenario(t, "[[probe]]\nname = \"p\"\nwhen = \"before\"\ncommand = [\"true\"]\n")
	plain := chatScenario(t, "")
	cases := []struct {
		name string
		args []string
		want string
	}{
		{"probes without consent", []string{probed, "--endpoint", counting.URL + "/v1"}, "--allow-probes"},
		{"unset key variable", []string{plain, "--endpoint", counting.URL + "/v1", "--api-key-env", "KVBENCH_TEST_UNSET_KEY"}, "KVBENCH_TEST_UNSET_KEY"},
		{"unreachable endpoint", []string{plain, "--endpoint", deadURL + "/v1"}, strings.TrimPrefix(deadURL, "http://")},
	}
	for _, c := range cases {
		out := t.TempDir()
		_, errOut, code := runCLI(t, append(append([]string{"sweep"}, c.args...), "--users", "2,3", "--out", out)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.want) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d %q; want exit 2 naming %q", c.name, code, errOut, c.want)
		}
		if entries, _ := os.ReadDir(out); len(entries) != 0 {
			t.Errorf("%s: left %d entries in --out", c.name, len(entries))
		}
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("refused sweeps sent %d requests", n)
	}
}

func lastLine(s string) string {
	s = strings.TrimRight(s, "\n")
	return s[strings.LastIndex(s, "\n")+1:]
}

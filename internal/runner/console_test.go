package runner

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
)

type lockedBuffer struct {
	mu sync.Mutex
	b  bytes.Buffer
}

func (l *lockedBuffer) Write(p []byte) (int, error) {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.Write(p)
}

func (l *lockedBuffer) String() string {
	l.mu.Lock()
	defer l.mu.Unlock()
	return l.b.String()
}

// TestConsoleTicksPrefill: on a terminal the live line keeps counting while the server
// prefills (nothing arrives from the stream then), and stops once the request is done.
func TestConsoleTicksPrefill(t *testing.T) {
	var out lockedBuffer
	c := NewConsole(&out, true)
	c.Handle(events.RequestProgress{IndexInStep: 2, PlannedTokens: 150000, State: events.Prefilling})
	deadline := time.Now().Add(10 * time.Second)
	for strings.Count(out.String(), "prefill") < 3 && time.Now().Before(deadline) {
		time.Sleep(20 * time.Millisecond)
	}
	if n := strings.Count(out.String(), "prefill"); n < 3 {
		t.Fatalf("%d prefill redraws in 10 s:\n%q", n, out.String())
	}
	c.Handle(events.RequestDone{Request: record.Request{IndexInStep: 2, PlannedTokens: 150000}})
	final := out.String()
	time.Sleep(3 * tickInterval)
	if after := out.String(); after != final {
		t.Fatalf("the console kept drawing after the request was done: %q", after[len(final):])
	}
	if !strings.HasSuffix(final, "out 0\n") {
		t.Fatalf("closing line missing: %q", final)
	}
}

// TestConsolePlain: not a terminal, no live lines and no escape codes.
func TestConsolePlain(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out, false)
	c.Handle(events.RequestProgress{State: events.Prefilling})
	c.Handle(events.RequestDone{})
	if strings.Contains(out.String(), "\033") || strings.Count(out.String(), "\n") != 1 {
		t.Fatalf("%q", out.String())
	}
}

// TestConsoleTraceProgress: a trace step's progress is a live line on a terminal, redrawn in
// place; elsewhere a plain line at each tenth of its requests short of the end and the
// closing line once (not twice: the last tenth is the end), never one per report. Absent
// tier counters read "absent", and a failed request still gets its line.
func TestConsoleTraceProgress(t *testing.T) {
	gpu, host := 0.25, 0.5
	shares := record.TierShares{Source: record.TierBySource, GPU: &gpu, Host: &host}
	report := func(c *Console, done int, final bool) {
		c.Handle(events.TraceProgress{Step: "load", Done: done, Total: 100, InFlight: 3, LagP50MS: 0.1, LagP99MS: 1.5, Tiers: shares, Final: final})
	}
	var plain bytes.Buffer
	c := NewConsole(&plain, false)
	for done := 1; done <= 100; done++ {
		report(c, done, false)
	}
	report(c, 100, true)
	c.Handle(events.RequestDone{Request: record.Request{IndexInStep: 7, Trace: &record.TraceRequest{}}})
	c.Handle(events.RequestDone{Request: record.Request{IndexInStep: 8, Trace: &record.TraceRequest{}, Result: record.Result{ErrorKind: "http_status", Error: "boom"}}})
	lines := strings.Split(strings.TrimSpace(plain.String()), "\n")
	if len(lines) != 11 || strings.Contains(plain.String(), "\033") {
		t.Fatalf("%d lines, want one at each tenth up to 90%%, the end once and the failure:\n%s", len(lines), plain.String())
	}
	if !strings.HasPrefix(lines[8], "  trace load: 90/100 requests (90%), 3 in flight") {
		t.Errorf("the 90%% line: %q", lines[8])
	}
	want := "  trace load: 100/100 requests (100%), 3 in flight, 0s, dispatch lag p50 0.10 ms p99 1.50 ms, GPU 25.0%, host 50.0%, recompute absent of prompt tokens"
	if lines[9] != want || !strings.Contains(lines[10], "[8]") || !strings.Contains(lines[10], "FAILED (http_status): boom") {
		t.Errorf("lines:\n%s\nwant %q", plain.String(), want)
	}
	var tty lockedBuffer
	c = NewConsole(&tty, true)
	report(c, 5, false)
	report(c, 6, false)
	if n := strings.Count(tty.String(), "\r\033[K"); n != 2 || strings.Contains(tty.String(), "\n") {
		t.Errorf("live line: %q", tty.String())
	}
}

// TestConsoleTierSplitAndUnread: a replay's tier split is a table of its parts, the sum and
// the prompt, with absent parts said so; the unread families are named up to a bound and
// the rest counted.
func TestConsoleTierSplitAndUnread(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out, false)
	gpu, host, rec, sum, prompt, no := 0.0, 113408.0, 60000.0, 173408.0, 113674, false
	c.tierSplit(record.RequestTiers{GPU: &gpu, Host: &host, Recomputed: &rec, RecomputedFrom: "the computed-prompt-token counter", Sum: &sum, PromptTokens: &prompt, AddsUp: &no})
	lines := strings.Split(strings.TrimSpace(out.String()), "\n")
	if len(lines) != 2 || strings.Fields(lines[0])[2] != "gpu" ||
		strings.Join(strings.Fields(lines[1])[:9], " ") != "tokens 0 113408 absent absent 60000 173408 113674 DOES" ||
		!strings.HasSuffix(lines[1], "DOES NOT ADD UP (recomputed from the computed-prompt-token counter)") {
		t.Fatalf("table:\n%s", out.String())
	}
	if got := UnreadLine("vllm", nil); got != "" {
		t.Fatalf("nothing unread: %q", got)
	}
	fams := []string{"a", "b", "c", "d", "e", "f", "g", "h"}
	if got := UnreadLine("vllm", fams); !strings.HasSuffix(got, "(8 cache families; verdicts are reached without them): a, b, c, d, e, f and 2 more") {
		t.Fatalf("unread line %q", got)
	}
	if got := UnreadLine("sglang", fams[:2]); !strings.HasSuffix(got, "sglang (2 cache families; verdicts are reached without them): a, b") {
		t.Fatalf("unread line %q", got)
	}
}

// TestProgressText: done of total, the percentage, the requests' rate and the time left at
// that pace; neither rate nor ETA before anything is done, no ETA once all is.
func TestProgressText(t *testing.T) {
	for _, c := range []struct {
		done, total, requests int
		elapsed               time.Duration
		want                  string
	}{
		{0, 600, 0, 0, "0/600 requests (0%)"},
		{150, 600, 150, 30 * time.Second, "150/600 requests (25%), 5.0 requests/s, ETA 1m30s"},
		{599, 600, 599, 10 * time.Minute, "599/600 requests (99%), 1.00 requests/s, ETA 1s"},
		{600, 600, 600, 2 * time.Minute, "600/600 requests (100%), 5.0 requests/s"},
	} {
		if got := ProgressText(c.done, c.total, "requests", c.requests, c.elapsed); got != c.want {
			t.Errorf("ProgressText(%d, %d, %d, %v) = %q, want %q", c.done, c.total, c.requests, c.elapsed, got, c.want)
		}
	}
}

// TestConsoleRunProgress: in a run of several steps (a curve's points, repeats) each step's
// line says how many steps are done of all and, once one is, the pace and the ETA; a run of
// one step says nothing of it. A trace step run again by a repetition reports anew.
func TestConsoleRunProgress(t *testing.T) {
	var out bytes.Buffer
	c := NewConsole(&out, false)
	c.Handle(events.RunStarted{Started: time.Now().Add(-time.Minute)})
	for k := range 2 {
		for i, id := range []string{"curve_1k", "curve_1k_replay"} {
			c.Handle(events.StepStarted{Repetition: k, Index: i, Step: id, Describes: "1 request", Steps: 2, Repetitions: 2})
			c.Handle(events.RequestDone{Request: record.Request{Step: id}})
			c.Handle(events.StepDone{Repetition: k, Index: i})
		}
	}
	var lines []string
	for _, l := range strings.Split(out.String(), "\n") {
		if strings.HasPrefix(l, "step ") {
			lines = append(lines, l)
		}
	}
	if len(lines) != 4 || lines[0] != "step curve_1k: 1 request [0/4 steps done (0%)]" ||
		!strings.HasPrefix(lines[2], "step curve_1k: 1 request [2/4 steps done (50%), ") || !strings.Contains(lines[2], " requests/s, ETA ") {
		t.Fatalf("lines:\n%s", out.String())
	}
	out.Reset()
	c = NewConsole(&out, false)
	c.Handle(events.StepStarted{Step: "replay", Describes: "1 request", Steps: 1, Repetitions: 1})
	if out.String() != "step replay: 1 request\n" {
		t.Errorf("one step: %q", out.String())
	}
	for range 2 { // the same trace step in two repetitions: its closing line each time
		c.Handle(events.StepStarted{Step: "load", Steps: 1, Repetitions: 2})
		c.Handle(events.TraceProgress{Step: "load", Done: 50, Total: 100})
		c.Handle(events.TraceProgress{Step: "load", Done: 100, Total: 100, Final: true})
	}
	if n := strings.Count(out.String(), "trace load: 100/100"); n != 2 || strings.Count(out.String(), "trace load: 50/100") != 2 {
		t.Errorf("%d closing lines:\n%s", n, out.String())
	}
}

// TestTraceProgressSlotTiers: tiers inferred from llama.cpp's slot history are worded as
// the live slot's and the host cache's, and say they were inferred.
func TestTraceProgressSlotTiers(t *testing.T) {
	prompt, live, host, rest := 100.0, 10.0, 30.0, 60.0
	tiers := record.TierSplit{Source: record.TierBySlotHistory, PromptTokens: &prompt, GPUHitTokens: &live, HostHitTokens: &host, RecomputeTokens: &rest}.Shares()
	got := traceProgressText(events.TraceProgress{Step: "load", Done: 3, Total: 3, Tiers: tiers})
	if !strings.Contains(got, "live slot 10.0%, host cache 30.0%, recompute 60.0% of prompt tokens (inferred from usage and the slot's history)") {
		t.Errorf("progress line %q", got)
	}
}

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
// place; elsewhere a plain line at each tenth of its requests and at the end, never one per
// report. Absent tier counters read "absent", and a failed request still gets its line.
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
	if len(lines) != 12 || strings.Contains(plain.String(), "\033") {
		t.Fatalf("%d lines, want a tenth each, the end and the failure:\n%s", len(lines), plain.String())
	}
	want := "  trace load: 100/100 done, 3 in flight, 0s, dispatch lag p50 0.10 ms p99 1.50 ms, GPU 25.0%, host 50.0%, recompute absent of prompt tokens"
	if lines[10] != want || !strings.Contains(lines[11], "[8]") || !strings.Contains(lines[11], "FAILED (http_status): boom") {
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

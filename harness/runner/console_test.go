package runner

import (
	"bytes"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/events"
	"github.com/anvil-serving/kvbench/harness/record"
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

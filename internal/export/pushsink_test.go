package export

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/events"
)

// TestPusherPushesTheRunOnDiskAtItsEnd: the push sink ignores every event but RunDone, then
// pushes the run directory as it is on disk; a refusing gateway is its Err, with where the
// records are and how to retry, never an error that stops the run.
func TestPusherPushesTheRunOnDiskAtItsEnd(t *testing.T) {
	gw := &recorder{status: http.StatusOK}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	var out strings.Builder
	p := NewPusher(context.Background(), PushOptions{URL: srv.URL, Timeout: 10 * time.Second}, &out)
	for _, e := range []events.Event{events.Note{Text: "x"}, events.StepDone{Artifact: "step-01.json"}} {
		if err := p.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	if len(gw.sent()) != 0 {
		t.Fatalf("pushed before the run ended: %v", gw.sent())
	}
	if err := p.Handle(events.RunDone{Dir: repeatedRun}); err != nil || p.Err() != nil {
		t.Fatalf("RunDone: %v, %v", err, p.Err())
	}
	if s := gw.sent(); len(s) != 1 || !strings.HasPrefix(s[0], "PUT /metrics/job/kvbench/") {
		t.Fatalf("pushes %v, want one PUT of the run's group", s)
	}
	if want := "pushed " + repeatedRun + " to " + srv.URL + "\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}

	gw.mu.Lock()
	gw.status = http.StatusServiceUnavailable
	gw.mu.Unlock()
	p = NewPusher(context.Background(), PushOptions{URL: srv.URL, Timeout: 10 * time.Second}, &out)
	if err := p.Handle(events.RunDone{Dir: repeatedRun}); err != nil {
		t.Fatalf("a failed push stopped the run: %v", err)
	}
	if err := p.Err(); err == nil || !strings.Contains(err.Error(), "503") || !strings.Contains(err.Error(), "retry: kvbench push "+repeatedRun+" "+srv.URL) {
		t.Errorf("a refusing gateway: %v", err)
	}
}

// TestPusherRefusesARunASignalStopped: after a stop signal the run is interrupted, and the
// push sink refuses it as 'kvbench push' would, in a line, without sending anything.
func TestPusherRefusesARunASignalStopped(t *testing.T) {
	gw := &recorder{status: http.StatusOK}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	ctx, cancel := context.WithCancelCause(context.Background())
	cancel(errors.New("received SIGTERM"))
	var out strings.Builder
	p := NewPusher(ctx, PushOptions{URL: srv.URL}, &out)
	if err := p.Handle(events.RunDone{Dir: repeatedRun}); err != nil || p.Err() != nil {
		t.Fatalf("RunDone after a signal: %v, %v", err, p.Err())
	}
	if len(gw.sent()) != 0 || !strings.Contains(out.String(), "not pushed: "+repeatedRun+" is interrupted") || !strings.Contains(out.String(), "SIGTERM") {
		t.Fatalf("pushes %v, output %q", gw.sent(), out.String())
	}
}

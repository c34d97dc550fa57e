package main

import (
	"bytes"
	"io"
	"log"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/sim"
)

// preflightChats is how many generation requests kvbench run's preflight sends before the
// first step's (crashScenario on the tiny engine).
const preflightChats = 2

// gate is a proxy in front of the embedded engine that holds generation requests: it lets
// the first open ones through and holds every later one until Open lets it through or its
// client goes away. A test that must act mid-run acts while the run waits at the gate, so
// how fast or loaded the machine is cannot move the point where the run stops.
type gate struct {
	url     string
	forward *httputil.ReverseProxy
	mu      sync.Mutex
	open    int           // generation requests let through
	arrived int           // generation requests seen
	wake    chan struct{} // closed and replaced whenever open grows
	held    chan struct{} // closed when a request first waits at the gate
	stop    chan struct{} // closed at cleanup: held requests are dropped
}

// startGate starts a gate in front of srv that lets open generation requests through.
func startGate(t *testing.T, srv *sim.Server, open int) *gate {
	t.Helper()
	target, err := url.Parse(srv.URL())
	if err != nil {
		t.Fatal(err)
	}
	g := &gate{
		forward: httputil.NewSingleHostReverseProxy(target),
		open:    open,
		wake:    make(chan struct{}),
		held:    make(chan struct{}),
		stop:    make(chan struct{}),
	}
	g.forward.ErrorLog = log.New(io.Discard, "", 0) // requests the stop cancels are expected
	ts := httptest.NewServer(g)
	t.Cleanup(func() {
		close(g.stop)
		ts.Close()
	})
	g.url = ts.URL
	return g
}

// URL is the gate's base URL, in front of the engine's.
func (g *gate) URL() string { return g.url }

func (g *gate) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	// Read whole before forwarding: the engine answers without reading to the body's end,
	// and once the answer is relayed net/http closes the incoming body, failing a forward
	// still reading it and the engine connection with it (a cut stream).
	body, err := io.ReadAll(r.Body)
	if err != nil {
		return
	}
	r.Body = io.NopCloser(bytes.NewReader(body))
	if r.URL.Path == "/v1/chat/completions" || r.URL.Path == "/v1/completions" {
		if !g.pass(r) {
			panic(http.ErrAbortHandler) // no answer: the client stopped waiting
		}
	}
	g.forward.ServeHTTP(w, r)
}

// pass waits until the request may go through and reports whether it may: false when its
// client went away or the test ended first.
func (g *gate) pass(r *http.Request) bool {
	g.mu.Lock()
	g.arrived++
	n := g.arrived
	g.mu.Unlock()
	for {
		g.mu.Lock()
		ok, wake := n <= g.open, g.wake
		if !ok && g.held != nil {
			close(g.held)
			g.held = nil
		}
		g.mu.Unlock()
		if ok {
			return true
		}
		select {
		case <-wake:
		case <-r.Context().Done():
			return false
		case <-g.stop:
			return false
		}
	}
}

// waitHeld waits (bounded) until a request first waits at the gate: the run is then between
// the requests it let through and the next.
func (g *gate) waitHeld(t *testing.T) {
	t.Helper()
	g.mu.Lock()
	held := g.held
	g.mu.Unlock()
	if held == nil {
		return
	}
	select {
	case <-held:
	case <-time.After(time.Minute):
		t.Fatal("no request reached the gate within a minute")
	}
}

// Open lets n more generation requests through.
func (g *gate) Open(n int) {
	g.mu.Lock()
	defer g.mu.Unlock()
	g.open += n
	close(g.wake)
	g.wake = make(chan struct{})
}

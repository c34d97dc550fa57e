package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"sync"
	"sync/atomic"
	"time"
)

// chunkWatchdog bounds the silence between reads of a stream once its first bytes
// arrived. A read only stores its time; the timer, armed once, checks that time when it
// fires and re-arms for the rest of the bound, so a token costs no timer reset.
type chunkWatchdog struct {
	timeout time.Duration
	cancel  context.CancelCauseFunc
	base    time.Time
	last    atomic.Int64 // nanoseconds from base to the latest read

	mu      sync.Mutex
	timer   *time.Timer
	stopped bool
}

// touch records a read at now, arming the bound at the first one.
func (w *chunkWatchdog) touch(now time.Time) {
	if w == nil {
		return
	}
	w.last.Store(int64(now.Sub(w.base)))
	if w.timer == nil { // only the reading goroutine sets it
		w.mu.Lock()
		if !w.stopped {
			w.timer = time.AfterFunc(w.timeout, w.fire)
		}
		w.mu.Unlock()
	}
}

func (w *chunkWatchdog) fire() {
	w.mu.Lock()
	defer w.mu.Unlock()
	if w.stopped {
		return
	}
	if idle := time.Since(w.base) - time.Duration(w.last.Load()); idle < w.timeout {
		w.timer.Reset(w.timeout - idle)
		return
	}
	w.cancel(fmt.Errorf("%w (%s between chunks)", errChunkTimeout, w.timeout))
}

// stop disarms the bound once the stream is done with.
func (w *chunkWatchdog) stop() {
	if w == nil {
		return
	}
	w.mu.Lock()
	defer w.mu.Unlock()
	w.stopped = true
	if w.timer != nil {
		w.timer.Stop()
	}
}

// isDialError reports whether err means no connection could be made at all.
func isDialError(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

// watchedReader touches a chunk bound on every read that brings bytes.
type watchedReader struct {
	r   io.Reader
	dog *chunkWatchdog
}

func (w watchedReader) Read(p []byte) (int, error) {
	n, err := w.r.Read(p)
	if n > 0 {
		w.dog.touch(time.Now())
	}
	return n, err
}

// Bounds of the read past [DONE].
const (
	drainTimeout  = 250 * time.Millisecond
	maxDrainBytes = 64 << 10
)

var errDrainTimeout = errors.New("body still open after [DONE]")

// drainAfterDone reads what follows [DONE] (the end of the chunked body, usually already
// in flight), so the connection goes back to the pool instead of being closed; a server
// that holds the body open past [DONE] costs at most drainTimeout, after the timings.
func drainAfterDone(body io.Reader, cancel context.CancelCauseFunc) {
	t := time.AfterFunc(drainTimeout, func() { cancel(errDrainTimeout) })
	defer t.Stop()
	_, _ = io.CopyN(io.Discard, body, maxDrainBytes)
}

package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"time"
)

// tapKey keys the per-request streamTap in the request context.
type tapKey struct{}

// streamTap sees the HTTP exchange that go-openai hides: whether the request went out,
// the status code, and the end of the body (go-openai reports a clean EOF the same way as
// [DONE], so a stream cut at a chunk boundary would otherwise pass as complete).
//
// It also bounds the waits no total timeout should: the response headers (headerTimeout) and
// the silence between reads once the body started (chunkTimeout), by calling cancel.
type streamTap struct {
	sent        bool
	status      int
	contentType string
	body        *tailReader

	headerTimeout time.Duration
	chunkTimeout  time.Duration
	cancel        context.CancelCauseFunc
	watchdog      *time.Timer // the chunk bound, armed at the first body bytes
	// extraBody holds members go-openai has no field for, merged into the JSON body.
	extraBody map[string]any
}

// stop disarms the chunk bound once the stream is done with.
func (t *streamTap) stop() {
	if t.watchdog != nil {
		t.watchdog.Stop()
	}
}

func tapFrom(ctx context.Context) *streamTap {
	tap, _ := ctx.Value(tapKey{}).(*streamTap)
	return tap
}

// tappingDoer fills the request's streamTap, when it has one, around an http.Client.
type tappingDoer struct{ inner *http.Client }

func (d tappingDoer) Do(req *http.Request) (*http.Response, error) {
	tap := tapFrom(req.Context())
	if tap != nil {
		tap.sent = true
		if len(tap.extraBody) > 0 {
			if err := mergeBody(req, tap.extraBody); err != nil {
				return nil, err
			}
		}
	}
	var headers *time.Timer
	if tap != nil && tap.headerTimeout > 0 && tap.cancel != nil {
		d := tap.headerTimeout
		headers = time.AfterFunc(d, func() { tap.cancel(fmt.Errorf("%w (%s)", errHeaderTimeout, d)) })
	}
	resp, err := d.inner.Do(req)
	if headers != nil {
		headers.Stop()
	}
	if tap != nil && resp != nil {
		tap.status = resp.StatusCode
		tap.contentType = resp.Header.Get("Content-Type")
		tap.body = &tailReader{inner: resp.Body, tap: tap}
		resp.Body = tap.body
	}
	return resp, err
}

// mergeBody adds extra's members to req's JSON object body.
func mergeBody(req *http.Request, extra map[string]any) error {
	if req.Body == nil {
		return errors.New("no request body to add fields to")
	}
	raw, err := io.ReadAll(req.Body)
	_ = req.Body.Close()
	if err != nil {
		return fmt.Errorf("reading the request body: %w", err)
	}
	var body map[string]json.RawMessage
	if err := json.Unmarshal(raw, &body); err != nil {
		return fmt.Errorf("request body: %w", err)
	}
	for k, v := range extra {
		b, err := json.Marshal(v)
		if err != nil {
			return fmt.Errorf("request body field %s: %w", k, err)
		}
		body[k] = b
	}
	if raw, err = json.Marshal(body); err != nil {
		return err
	}
	req.Body = io.NopCloser(bytes.NewReader(raw))
	req.ContentLength = int64(len(raw))
	req.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(bytes.NewReader(raw)), nil }
	return nil
}

// tailSize is enough for "data: [DONE]" and the blank lines around it.
const tailSize = 32

// tailReader remembers the last bytes read through it.
type tailReader struct {
	inner io.ReadCloser
	tail  [tailSize]byte
	n     int
	tap   *streamTap // re-arms its chunk bound on every read that brings bytes
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.inner.Read(p)
	if n > 0 && t.tap != nil {
		t.tap.sawBytes()
	}
	if n >= tailSize {
		t.n = copy(t.tail[:], p[n-tailSize:n])
	} else if n > 0 {
		keep := min(t.n, tailSize-n)
		copy(t.tail[:keep], t.tail[t.n-keep:t.n])
		t.n = keep + copy(t.tail[keep:], p[:n])
	}
	return n, err
}

func (t *tailReader) Close() error { return t.inner.Close() }

// endsWithDone reports whether the bytes read so far end with the [DONE] sentinel.
func (t *tailReader) endsWithDone() bool {
	return bytes.HasSuffix(bytes.TrimSpace(t.tail[:t.n]), []byte("[DONE]"))
}

// sawBytes (re)starts the chunk bound: the next bytes must come within chunkTimeout.
func (t *streamTap) sawBytes() {
	if t.chunkTimeout <= 0 || t.cancel == nil {
		return
	}
	if t.watchdog == nil {
		d := t.chunkTimeout
		t.watchdog = time.AfterFunc(d, func() { t.cancel(fmt.Errorf("%w (%s between chunks)", errChunkTimeout, d)) })
		return
	}
	t.watchdog.Reset(t.chunkTimeout)
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

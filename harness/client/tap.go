package client

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net"
	"net/http"
)

// tapKey keys the per-request streamTap in the request context.
type tapKey struct{}

// streamTap sees the HTTP exchange that go-openai hides: whether the request went out,
// the status code, and the end of the body (go-openai reports a clean EOF the same way as
// [DONE], so a stream cut at a chunk boundary would otherwise pass as complete).
type streamTap struct {
	sent        bool
	status      int
	contentType string
	body        *tailReader
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
	}
	resp, err := d.inner.Do(req)
	if tap != nil && resp != nil {
		tap.status = resp.StatusCode
		tap.contentType = resp.Header.Get("Content-Type")
		tap.body = &tailReader{inner: resp.Body}
		resp.Body = tap.body
	}
	return resp, err
}

// tailSize is enough for "data: [DONE]" and the blank lines around it.
const tailSize = 32

// tailReader remembers the last bytes read through it.
type tailReader struct {
	inner io.ReadCloser
	tail  [tailSize]byte
	n     int
}

func (t *tailReader) Read(p []byte) (int, error) {
	n, err := t.inner.Read(p)
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

// isDialError reports whether err means no connection could be made at all.
func isDialError(err error) bool {
	var dnsErr *net.DNSError
	if errors.As(err, &dnsErr) {
		return true
	}
	var opErr *net.OpError
	return errors.As(err, &opErr) && opErr.Op == "dial"
}

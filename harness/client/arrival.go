package client

import (
	"context"
	"net"
	"net/http"
	"net/http/httptrace"
	"sync/atomic"
	"time"
)

// Arrival times. A token's time is when its bytes came off the socket, and tokens that
// came in one socket read share that time: their gaps are not measurable (BatchedChunks).
// net/http hands a stream's body up through layers that each cut it their own way (TLS
// records, its read buffer, chunked framing), so a read of the body says nothing about
// how the bytes arrived: over HTTPS each TLS record is one read of the body, even when one
// segment brought eight of them. The client's transport therefore dials connections that
// stamp each read of the socket (arrivalConn), with TLS, proxies and HTTP layered on top
// by net/http as usual, and a stream's reader takes the stamp of the latest socket read
// whose bytes had been handed up when its read of the body returned. So an event is never
// timed before its last byte came; a read of the body that waited for the rest of an HTTP
// chunk times what came before in that chunk with the later read too.

// socketReadBytes is what one read of the socket may take: bytes the kernel holds beyond it
// wait for the next read, which gets a stamp of its own.
const socketReadBytes = 32 << 10

// arrivalConn is a dialed connection that reads the socket into its own buffer and stamps
// each read of it. Bytes of one socket read are handed up, however the layers above ask
// for them, as one arrival.
type arrivalConn struct {
	net.Conn
	base time.Time // the dial's time, on the monotonic clock
	// stamp is the latest socket read's time, in nanoseconds from base: strictly increasing,
	// so that it also names the read. 0 before the first read.
	stamp atomic.Int64

	// Only the reading goroutine touches these: net/http reads a connection from one
	// goroutine at a time.
	buf        []byte
	start, end int   // buf[start:end] holds bytes read from the socket, not yet handed up
	pending    error // came with those bytes
}

func newArrivalConn(c net.Conn) *arrivalConn {
	return &arrivalConn{Conn: c, base: time.Now()}
}

// Read hands up buffered bytes of the latest socket read, or reads the socket once. An
// error that came with bytes comes back once they are all handed up.
func (c *arrivalConn) Read(p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	if c.start == c.end {
		if c.buf == nil {
			c.buf = make([]byte, socketReadBytes)
		}
		n, err := c.Conn.Read(c.buf)
		if n <= 0 {
			return 0, err
		}
		c.stampRead()
		c.start, c.end, c.pending = 0, n, err
	}
	n := copy(p, c.buf[c.start:c.end])
	c.start += n
	if err := c.pending; err != nil && c.start == c.end {
		c.pending = nil
		return n, err
	}
	return n, nil
}

// stampRead records a socket read at the present time.
func (c *arrivalConn) stampRead() {
	now := int64(time.Since(c.base))
	if last := c.stamp.Load(); now <= last {
		now = last + 1
	}
	c.stamp.Store(now)
}

// latest returns the latest socket read's stamp and time.
func (c *arrivalConn) latest() (int64, time.Time) {
	s := c.stamp.Load()
	return s, c.base.Add(time.Duration(s))
}

// arrivalsOf finds the stamping connection under c: under TLS (to a server, to a proxy, or
// both) or the connection itself; nil when c was not dialed by a stamping transport.
func arrivalsOf(c net.Conn) *arrivalConn {
	for range 4 { // at most TLS to the server inside TLS to a proxy
		switch v := c.(type) {
		case *arrivalConn:
			return v
		case interface{ NetConn() net.Conn }: // *tls.Conn
			c = v.NetConn()
		default:
			return nil
		}
	}
	return nil
}

// traceConn makes ctx note the connection a request is sent on, in *conn (the last one,
// should a redirect send it again); the request's own goroutine notes it, before Do returns.
func traceConn(ctx context.Context, conn *net.Conn) context.Context {
	return httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{GotConn: func(info httptrace.GotConnInfo) {
		*conn = info.Conn
	}})
}

// stampingTransport is a copy of tr whose dialed connections stamp their reads, speaking
// HTTP/1.1 only: a connection then carries one stream at a time, so a socket read's bytes
// belong to one stream (HTTP/2 multiplexes streams on one connection and reads it on a
// goroutine of its own). A DialTLSContext of tr's is kept, and its connections are not
// stamped: their streams are timed per read of the body.
func stampingTransport(tr *http.Transport) *http.Transport {
	tr = tr.Clone()
	dial := tr.DialContext
	if dial == nil && tr.Dial != nil {
		plain := tr.Dial
		dial = func(_ context.Context, network, addr string) (net.Conn, error) { return plain(network, addr) }
	}
	if dial == nil {
		dial = (&net.Dialer{Timeout: 30 * time.Second, KeepAlive: 30 * time.Second}).DialContext
	}
	tr.Dial = nil
	tr.DialContext = func(ctx context.Context, network, addr string) (net.Conn, error) {
		c, err := dial(ctx, network, addr)
		if err != nil {
			return nil, err
		}
		return newArrivalConn(c), nil
	}
	tr.ForceAttemptHTTP2 = false
	tr.Protocols = new(http.Protocols)
	tr.Protocols.SetHTTP1(true)
	return tr
}

// stampingClient is hc with its transport made a stamping one, where it is an
// *http.Transport (or nil: the default transport); another RoundTripper is kept as it is,
// and its streams are timed per read of the body.
func stampingClient(hc *http.Client) *http.Client {
	rt := hc.Transport
	if rt == nil {
		rt = http.DefaultTransport
	}
	tr, ok := rt.(*http.Transport)
	if !ok {
		return hc
	}
	stamped := *hc
	stamped.Transport = stampingTransport(tr)
	return &stamped
}

package client

import (
	"context"
	"crypto/tls"
	"errors"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"sync"
	"sync/atomic"
	"testing"
	"time"
)

// scriptedConn is a net.Conn whose reads return its script, one step per read.
type scriptedConn struct {
	net.Conn // nil: only Read is used
	script   []scriptedRead
}

type scriptedRead struct {
	data string
	err  error
}

func (c *scriptedConn) Read(p []byte) (int, error) {
	if len(c.script) == 0 {
		return 0, io.EOF
	}
	step := c.script[0]
	c.script = c.script[1:]
	return copy(p, step.data), step.err
}

// TestArrivalConnStampsSocketReads: bytes of one socket read keep its stamp however they
// are asked for; the next socket read gets a later one; an error that came with bytes
// comes back with the last of them.
func TestArrivalConnStampsSocketReads(t *testing.T) {
	boom := errors.New("boom")
	c := newArrivalConn(&scriptedConn{script: []scriptedRead{{"abcde", nil}, {"fg", boom}, {"", io.EOF}}})
	type step struct {
		got   string
		err   error
		stamp int64
	}
	var steps []step
	p := make([]byte, 2)
	for range 8 {
		n, err := c.Read(p)
		stamp, _ := c.latest()
		steps = append(steps, step{string(p[:n]), err, stamp})
		if err == io.EOF {
			break
		}
	}
	want := []struct {
		got      string
		err      error
		newStamp bool // a socket read that brought bytes happened for this read
	}{{"ab", nil, true}, {"cd", nil, false}, {"e", nil, false}, {"fg", boom, true}, {"", io.EOF, false}}
	if len(steps) != len(want) {
		t.Fatalf("%d reads %+v, want %d", len(steps), steps, len(want))
	}
	var last int64
	for i, w := range want {
		s := steps[i]
		if s.got != w.got || !errors.Is(s.err, w.err) && s.err != w.err {
			t.Errorf("read %d: %q, %v; want %q, %v", i, s.got, s.err, w.got, w.err)
		}
		if fresh := s.stamp != last; fresh != w.newStamp || s.stamp < last {
			t.Errorf("read %d: stamp %d after %d; want a new one: %v", i, s.stamp, last, w.newStamp)
		}
		last = s.stamp
	}
}

// TestArrivalsOfUnwrapsTLS: the stamping connection is found under TLS, under TLS to a
// proxy, and not where there is none.
func TestArrivalsOfUnwrapsTLS(t *testing.T) {
	raw := newArrivalConn(&scriptedConn{})
	inner := tls.Client(raw, &tls.Config{})
	if arrivalsOf(raw) != raw || arrivalsOf(inner) != raw || arrivalsOf(tls.Client(inner, &tls.Config{})) != raw {
		t.Errorf("the stamping connection is not found under TLS")
	}
	if arrivalsOf(&scriptedConn{}) != nil || arrivalsOf(nil) != nil || arrivalsOf(tls.Client(&scriptedConn{}, &tls.Config{})) != nil {
		t.Errorf("a stamping connection found where none was dialed")
	}
}

// heldConn is a server's connection that can hold its writes and send them in one write:
// what it sends while held reaches the client in one TCP segment, however many TLS
// records and HTTP chunks it holds.
type heldConn struct {
	net.Conn
	mu      sync.Mutex
	held    bool
	pending []byte
	writes  int // writes held since the last release
}

func (c *heldConn) Write(p []byte) (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.held {
		c.pending = append(c.pending, p...)
		c.writes++
		return len(p), nil
	}
	return c.Conn.Write(p)
}

func (c *heldConn) hold() {
	c.mu.Lock()
	defer c.mu.Unlock()
	c.held = true
}

// release sends what was held in one write and says how many writes it held.
func (c *heldConn) release() (int, error) {
	c.mu.Lock()
	defer c.mu.Unlock()
	_, err := c.Conn.Write(c.pending)
	n := c.writes
	c.held, c.pending, c.writes = false, nil, 0
	return n, err
}

type heldListener struct{ net.Listener }

func (l heldListener) Accept() (net.Conn, error) {
	c, err := l.Listener.Accept()
	if err != nil {
		return nil, err
	}
	return &heldConn{Conn: c}, nil
}

type heldConnKey struct{}

// heldConnOf returns the connection r came on.
func heldConnOf(r *http.Request) *heldConn {
	c := r.Context().Value(heldConnKey{}).(net.Conn)
	if tc, ok := c.(*tls.Conn); ok {
		c = tc.NetConn()
	}
	return c.(*heldConn)
}

// burstServer serves handler on path (plain HTTP or HTTPS) on connections that can hold
// their writes; conns counts the connections it accepted.
func burstServer(t *testing.T, path string, handler http.HandlerFunc) (srv *httptest.Server, conns *atomic.Int64) {
	t.Helper()
	conns = new(atomic.Int64)
	srv = httptest.NewUnstartedServer(handler)
	srv.Listener = heldListener{srv.Listener}
	srv.Config.ConnContext = func(ctx context.Context, c net.Conn) context.Context {
		return context.WithValue(ctx, heldConnKey{}, c)
	}
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	if path == pathHTTPS {
		srv.StartTLS()
	} else {
		srv.Start()
	}
	t.Cleanup(srv.Close)
	return srv, conns
}

const burstTokens = 8

// writeBurst sends the role chunk, then burstTokens token chunks flushed one by one (over
// HTTPS, a TLS record each) but held and sent in one write, then the stream's end. It
// reports how many writes the burst took, which must be one per token at least for the
// burst to test anything.
func writeBurst(w http.ResponseWriter, r *http.Request, heldWrites chan<- int) {
	io.Copy(io.Discard, r.Body)
	startStream(w)
	writeEvents(w, roleChunk())
	conn := heldConnOf(r)
	conn.hold()
	for range burstTokens {
		writeEvents(w, deltaChunk("content", "t"))
	}
	n, err := conn.release()
	if err != nil {
		n = -1
	}
	heldWrites <- n
	writeEvents(w, finishChunk("length"), usageChunk(3, burstTokens, ""), "[DONE]")
}

// clientOf is a client of srv, trusting its certificate; with hc's transport when hc is
// not nil.
func clientOf(t *testing.T, srv *httptest.Server, hc *http.Client) *Client {
	t.Helper()
	cfg := Config{HTTPClient: hc}
	if hc == nil && srv.TLS != nil {
		cfg.HTTPClient = srv.Client()
	}
	return testClient(t, cfg, srv.URL)
}

// assertOneArrival checks that a burst's tokens were taken as one arrival: all but the
// first batched, no gap measured, no decode rate from a decode interval of 0.
func assertOneArrival(t *testing.T, res Result) {
	t.Helper()
	if res.Failed() || res.GeneratedChunks != burstTokens {
		t.Fatalf("kind %q, %d chunks: %s", res.ErrorKind, res.GeneratedChunks, res.Error)
	}
	if res.BatchedChunks != burstTokens-1 {
		t.Errorf("batched_chunks = %d of %d, want %d: tokens of one TCP segment were timed apart", res.BatchedChunks, burstTokens, burstTokens-1)
	}
	if res.InterTokenMS != nil {
		t.Errorf("inter_token_ms = %+v, want null: no gap between the tokens was measurable", *res.InterTokenMS)
	}
	if res.DecodeTokensPerSecond != nil {
		t.Errorf("decode_tokens_per_second = %v, want null: the tokens arrived at once", *res.DecodeTokensPerSecond)
	}
	assertTimingOrder(t, res)
}

// TestBurstInOneSegmentIsOneArrival: tokens that reach the client in one TCP segment are
// one arrival over plain HTTP and over HTTPS, where each is a TLS record of its own, on a
// new connection and on a reused one.
func TestBurstInOneSegmentIsOneArrival(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		heldWrites := make(chan int, 4)
		srv, conns := burstServer(t, path, func(w http.ResponseWriter, r *http.Request) { writeBurst(w, r, heldWrites) })
		c := clientOf(t, srv, nil)
		for i := range 2 {
			res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: testGuard}, nil)
			if n := <-heldWrites; n < burstTokens {
				t.Fatalf("request %d: the burst took %d writes, want one per token at least", i, n)
			}
			assertOneArrival(t, res)
		}
		if n := conns.Load(); n != 1 {
			t.Errorf("%d connections for 2 sequential requests, want 1 (the second reuses it)", n)
		}
	})
}

// roundTripperFunc is a RoundTripper that is not an *http.Transport, whose connections
// the client cannot stamp.
type roundTripperFunc func(*http.Request) (*http.Response, error)

func (f roundTripperFunc) RoundTrip(r *http.Request) (*http.Response, error) { return f(r) }

// TestBurstOverTLSWithoutStamps is the control of the burst tests: timed per read of the
// body (a caller's RoundTripper, which the client cannot stamp), the same burst over HTTPS
// is one read per TLS record, so the burst really does reach the client in pieces.
func TestBurstOverTLSWithoutStamps(t *testing.T) {
	heldWrites := make(chan int, 1)
	srv, _ := burstServer(t, pathHTTPS, func(w http.ResponseWriter, r *http.Request) { writeBurst(w, r, heldWrites) })
	tr := srv.Client().Transport
	c := clientOf(t, srv, &http.Client{Transport: roundTripperFunc(tr.RoundTrip)})
	res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: testGuard}, nil)
	<-heldWrites
	if res.Failed() || res.GeneratedChunks != burstTokens {
		t.Fatalf("kind %q, %d chunks: %s", res.ErrorKind, res.GeneratedChunks, res.Error)
	}
	if res.BatchedChunks == burstTokens-1 {
		t.Errorf("batched_chunks = %d without stamps: the TLS records of the burst were not read apart, and the burst tests prove nothing", res.BatchedChunks)
	}
}

// TestSeparateSegmentsAreSeparateArrivals: a token sent only once the client has taken the
// one before it is an arrival of its own, over plain HTTP and HTTPS: the stamps do not
// merge what came apart.
func TestSeparateSegmentsAreSeparateArrivals(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		taken := make(chan int, burstTokens)
		srv, _ := burstServer(t, path, func(w http.ResponseWriter, r *http.Request) {
			io.Copy(io.Discard, r.Body)
			startStream(w)
			writeEvents(w, roleChunk())
			for i := range burstTokens {
				writeEvents(w, deltaChunk("content", "t"))
				select { // the client's progress report on token i+1
				case n := <-taken:
					if n != i+1 {
						return // the client reported a token twice or skipped one: it fails below
					}
				case <-r.Context().Done():
					return
				case <-time.After(testGuard):
					return
				}
			}
			writeEvents(w, finishChunk("length"), usageChunk(3, burstTokens, ""), "[DONE]")
		})
		cfg := Config{ProgressInterval: time.Nanosecond} // a report per arrival that brought tokens
		if srv.TLS != nil {
			cfg.HTTPClient = srv.Client()
		}
		c := testClient(t, cfg, srv.URL)
		res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: testGuard}, func(p Progress) {
			if p.Phase == PhaseDecode {
				taken <- p.Tokens
			}
		})
		if res.Failed() || res.GeneratedChunks != burstTokens {
			t.Fatalf("kind %q, %d chunks: %s", res.ErrorKind, res.GeneratedChunks, res.Error)
		}
		if res.BatchedChunks != 0 || res.InterTokenMS == nil || res.InterTokenMS.N != burstTokens-1 {
			t.Errorf("batched_chunks %d, inter_token_ms %+v; want 0 batched and %d gaps", res.BatchedChunks, res.InterTokenMS, burstTokens-1)
		}
		if res.DecodeTokensPerSecond == nil {
			t.Errorf("decode_tokens_per_second null although the tokens arrived apart")
		}
		assertTimingOrder(t, res)
	})
}

// forwardProxy is an HTTP proxy on 127.0.0.1: CONNECT tunnels (for HTTPS) and
// absolute-form requests forwarded with flushes as they come (for plain HTTP); tunnels
// and forwarded counts what it did.
func forwardProxy(t *testing.T) (proxyURL *url.URL, tunnels, forwarded *atomic.Int64) {
	t.Helper()
	tunnels, forwarded = new(atomic.Int64), new(atomic.Int64)
	forward := &httputil.ReverseProxy{Rewrite: func(pr *httputil.ProxyRequest) {}, FlushInterval: -1}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.Method != http.MethodConnect {
			forwarded.Add(1)
			forward.ServeHTTP(w, r)
			return
		}
		tunnels.Add(1)
		upstream, err := net.DialTimeout("tcp", r.Host, testGuard)
		if err != nil {
			http.Error(w, err.Error(), http.StatusBadGateway)
			return
		}
		defer upstream.Close()
		w.WriteHeader(http.StatusOK)
		client, buffered, err := http.NewResponseController(w).Hijack()
		if err != nil {
			return
		}
		defer client.Close()
		done := make(chan struct{})
		go func() {
			io.Copy(upstream, io.MultiReader(buffered, client))
			upstream.(*net.TCPConn).CloseWrite()
			close(done)
		}()
		io.Copy(client, upstream)
		client.Close()
		<-done
	}))
	t.Cleanup(srv.Close)
	u, err := url.Parse(srv.URL)
	if err != nil {
		t.Fatal(err)
	}
	return u, tunnels, forwarded
}

// TestBurstThroughProxyIsOneArrival: through an HTTP proxy (a tunnel for HTTPS, forwarded
// requests for plain HTTP) the stamps are on the connection to the proxy, under TLS to
// the server, and a burst is still one arrival.
func TestBurstThroughProxyIsOneArrival(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		heldWrites := make(chan int, 1)
		srv, _ := burstServer(t, path, func(w http.ResponseWriter, r *http.Request) { writeBurst(w, r, heldWrites) })
		proxyURL, tunnels, forwarded := forwardProxy(t)
		tr := &http.Transport{Proxy: http.ProxyURL(proxyURL)}
		if srv.TLS != nil {
			tr.TLSClientConfig = srv.Client().Transport.(*http.Transport).TLSClientConfig
		}
		c := clientOf(t, srv, &http.Client{Transport: tr})
		res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: testGuard}, nil)
		if n := <-heldWrites; n < burstTokens {
			t.Fatalf("the burst took %d writes, want one per token at least", n)
		}
		assertOneArrival(t, res)
		if path == pathHTTPS && tunnels.Load() != 1 || path == pathHTTP && forwarded.Load() != 1 {
			t.Errorf("the proxy tunneled %d and forwarded %d requests: the stream did not go through it", tunnels.Load(), forwarded.Load())
		}
	})
}

// TestStampingClientKeepsCallerSettings: a caller's transport is copied with its settings,
// stamping, HTTP/1.1 only; a RoundTripper that is not an *http.Transport is kept as it is.
func TestStampingClientKeepsCallerSettings(t *testing.T) {
	caller := &http.Client{Timeout: time.Minute, Transport: &http.Transport{DisableKeepAlives: true, MaxIdleConnsPerHost: 7}}
	got := stampingClient(caller)
	tr, ok := got.Transport.(*http.Transport)
	if !ok || got == caller || tr == caller.Transport {
		t.Fatalf("the caller's client or transport was not copied: %T", got.Transport)
	}
	if got.Timeout != time.Minute || !tr.DisableKeepAlives || tr.MaxIdleConnsPerHost != 7 || tr.DialContext == nil {
		t.Errorf("settings lost: timeout %v, keep-alives off %v, idle per host %d", got.Timeout, tr.DisableKeepAlives, tr.MaxIdleConnsPerHost)
	}
	if tr.Protocols == nil || tr.Protocols.HTTP2() || !tr.Protocols.HTTP1() {
		t.Errorf("protocols %v, want HTTP/1.1 only", tr.Protocols)
	}
	if caller.Transport.(*http.Transport).DialContext != nil {
		t.Errorf("the caller's transport was changed")
	}
	other := &http.Client{Transport: roundTripperFunc(func(*http.Request) (*http.Response, error) { return nil, errors.New("x") })}
	if stampingClient(other) != other {
		t.Errorf("a RoundTripper that is not an *http.Transport was replaced")
	}
}

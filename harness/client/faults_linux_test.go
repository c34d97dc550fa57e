package client

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"crypto/tls"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"os"
	"strings"
	"sync"
	"sync/atomic"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/prompts"
)

// Fault injection: raw TCP servers on 127.0.0.1 answer with hand-written bytes, and every
// test asserts the Result's kind. The client's bounds are small (faultBound) and every
// StreamChat runs under the test's own guard (testGuard), far beyond them: a hang fails
// the test instead of stalling the suite.

// rawServer accepts connections and runs serve on each; the test's end closes the listener
// and every connection and waits for the handlers.
type rawServer struct {
	URL string
	// HTTPClient trusts the server's certificate when it speaks TLS; nil otherwise.
	HTTPClient *http.Client
	accepted   atomic.Int64
	finished   atomic.Int64 // connections whose serve returned
	stop       func()
}

// waitFinished waits until every accepted connection's serve returned on its own.
func (s *rawServer) waitFinished(t *testing.T) {
	t.Helper()
	deadline := time.Now().Add(testGuard)
	for s.finished.Load() != s.accepted.Load() {
		if time.Now().After(deadline) {
			t.Fatalf("%d of %d connections still served after %s", s.accepted.Load()-s.finished.Load(), s.accepted.Load(), testGuard)
		}
		time.Sleep(time.Millisecond)
	}
}

func startRawServer(t *testing.T, serve func(conn net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	return startRawServerOn(t, pathHTTP, 0, serve)
}

// startRawServerBuffered is startRawServer with a receive buffer of rcvbuf bytes (0: the
// system's): a small one makes a large request outlast what the client's first write takes.
func startRawServerBuffered(t *testing.T, rcvbuf int, serve func(conn net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	return startRawServerOn(t, pathHTTP, rcvbuf, serve)
}

// startRawServerOn is startRawServerBuffered on path: over HTTPS, serve reads and writes
// inside TLS (a certificate for 127.0.0.1 that srv.HTTPClient trusts).
func startRawServerOn(t *testing.T, path string, rcvbuf int, serve func(conn net.Conn, br *bufio.Reader)) *rawServer {
	t.Helper()
	lc := net.ListenConfig{Control: func(_, _ string, c syscall.RawConn) error {
		var err error
		if rcvbuf > 0 {
			c.Control(func(fd uintptr) { err = syscall.SetsockoptInt(int(fd), syscall.SOL_SOCKET, syscall.SO_RCVBUF, rcvbuf) })
		}
		return err
	}}
	ln, err := lc.Listen(context.Background(), "tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	s := &rawServer{URL: "http://" + ln.Addr().String()}
	var tlsConfig *tls.Config
	if path == pathHTTPS {
		tlsConfig, s.HTTPClient = testCertificate(t)
		s.URL = "https://" + ln.Addr().String()
	}
	var (
		mu      sync.Mutex
		conns   = map[net.Conn]bool{}
		stopped bool
		wg      sync.WaitGroup
	)
	wg.Add(1)
	go func() {
		defer wg.Done()
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			s.accepted.Add(1)
			mu.Lock()
			if stopped {
				mu.Unlock()
				c.Close()
				return
			}
			conns[c] = true
			wg.Add(1)
			mu.Unlock()
			go func() {
				defer wg.Done()
				defer c.Close()
				var conn net.Conn = c
				if tlsConfig != nil {
					conn = tls.Server(c, tlsConfig)
				}
				serve(conn, bufio.NewReader(conn))
				s.finished.Add(1)
			}()
		}
	}()
	var once sync.Once
	s.stop = func() {
		once.Do(func() {
			ln.Close()
			mu.Lock()
			stopped = true
			for c := range conns {
				c.Close()
			}
			mu.Unlock()
			wg.Wait()
		})
	}
	t.Cleanup(s.stop)
	return s
}

// readRequest reads one request and its body.
func readRequest(br *bufio.Reader) (*http.Request, []byte, error) {
	req, err := http.ReadRequest(br)
	if err != nil {
		return nil, nil, err
	}
	body, err := io.ReadAll(req.Body)
	return req, body, err
}

// holdOpen keeps a connection open until the client closes it or the server stops.
func holdOpen(conn net.Conn) { io.Copy(io.Discard, conn) }

const chunkedSSEHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nTransfer-Encoding: chunked\r\n\r\n"

// sseChunk frames SSE events as one chunk of a chunked body.
func sseChunk(payloads ...string) string {
	var b strings.Builder
	for _, p := range payloads {
		fmt.Fprintf(&b, "data: %s\n\n", p)
	}
	return fmt.Sprintf("%x\r\n%s\r\n", b.Len(), b.String())
}

// testCertificate returns a server configuration with httptest's certificate (for
// 127.0.0.1) and a client that trusts it.
func testCertificate(t *testing.T) (*tls.Config, *http.Client) {
	t.Helper()
	ts := httptest.NewUnstartedServer(http.NotFoundHandler())
	ts.StartTLS()
	defer ts.Close()
	return &tls.Config{Certificates: ts.TLS.Certificates}, ts.Client()
}

// resetOnClose makes the close of conn (inside TLS or not) a reset: SO_LINGER 0.
func resetOnClose(conn net.Conn) {
	if tc, ok := conn.(*tls.Conn); ok {
		conn = tc.NetConn()
	}
	conn.(*net.TCPConn).SetLinger(0)
}

// faultClient is a client of srv with small header and chunk bounds.
func faultClient(t *testing.T, cfg Config, srv *rawServer) *Client {
	t.Helper()
	cfg.HeaderTimeout, cfg.ChunkTimeout = faultBound, faultBound
	return serverClient(t, cfg, srv)
}

// serverClient is testClient for srv, trusting its certificate.
func serverClient(t *testing.T, cfg Config, srv *rawServer) *Client {
	t.Helper()
	if srv.HTTPClient != nil {
		cfg.HTTPClient = srv.HTTPClient
	}
	return testClient(t, cfg, srv.URL)
}

// streamGuarded is StreamChat under the test's guard.
func streamGuarded(t *testing.T, c *Client, ctx context.Context, req ChatRequest, progress func(Progress)) Result {
	t.Helper()
	done := make(chan Result, 1)
	go func() { done <- c.StreamChat(ctx, req, progress) }()
	select {
	case res := <-done:
		return res
	case <-time.After(testGuard):
		t.Fatalf("StreamChat still running after %s", testGuard)
		return Result{}
	}
}

// waitGuarded waits for ch under the test's guard.
func waitGuarded(t *testing.T, ch <-chan struct{}, what string) {
	t.Helper()
	select {
	case <-ch:
	case <-time.After(testGuard):
		t.Fatalf("%s: nothing after %s", what, testGuard)
	}
}

var faultRequest = ChatRequest{Model: "m", Messages: testMessages}

func assertKind(t *testing.T, res Result, kind string, status int, errorText string, chunks int) {
	t.Helper()
	if res.ErrorKind != kind || res.HTTPStatus != status || !strings.Contains(res.Error, errorText) || res.GeneratedChunks != chunks {
		t.Errorf("kind %q status %d chunks %d error %q; want %q %d %d containing %q",
			res.ErrorKind, res.HTTPStatus, res.GeneratedChunks, res.Error, kind, status, chunks, errorText)
	}
	if strings.ContainsAny(res.Error, "\r\n") {
		t.Errorf("error is not one line: %q", res.Error)
	}
	assertNoKey(t, res)
}

// TestStreamFaults: a server that fails in one way per case; the client classifies it
// within its own bounds, over HTTP and HTTPS alike.
func TestStreamFaults(t *testing.T) {
	tests := []faultCase{
		{
			name: "closed before any response byte",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
			},
			wantKind: ErrorKindTransport, wantError: "EOF",
		},
		{
			name: "closed after half a head",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Ty")
			},
			wantKind: ErrorKindTransport,
		},
		{
			name: "reset with the request unread",
			serve: func(conn net.Conn, br *bufio.Reader) {
				br.Peek(1) // the request is on its way: the dial is over
				resetOnClose(conn)
			},
			wantKind: ErrorKindTransport,
		},
		{
			name: "malformed chunk size mid-stream",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "a"))+"zz\r\ndata: x\n\n\r\n")
				holdOpen(conn)
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "chunk", wantChunks: 1,
		},
		{
			name: "chunk data longer than its size",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "a"))+"3\r\nabcdef\r\n")
				holdOpen(conn)
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "chunk", wantChunks: 1,
		},
		{
			name: "never answers",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				holdOpen(conn)
			},
			wantKind: ErrorKindTimeout, wantError: "no response headers",
		},
		{
			name: "silent after the first token",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, chunkedSSEHead+sseChunk(roleChunk(), deltaChunk("content", "a")))
				holdOpen(conn)
			},
			wantKind: ErrorKindTimeout, wantStatus: 200, wantError: "between chunks", wantChunks: 1,
		},
		{
			name: "503 with a chunked JSON error body",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				msg := `{"error":{"message":"the engine is overloaded","type":"ServiceUnavailable","code":503}}`
				io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n"+
					fmt.Sprintf("%x\r\n%s\r\n", 10, msg[:10])+fmt.Sprintf("%x\r\n%s\r\n0\r\n\r\n", len(msg)-10, msg[10:]))
				holdOpen(conn)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 503, wantError: "503 Service Unavailable: the engine is overloaded",
		},
		{
			name: "503 whose body goes silent",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nTransfer-Encoding: chunked\r\n\r\n"+
					"12\r\nengine overloaded \r\n")
				holdOpen(conn)
			},
			// The status is the news, not the body that never ended.
			wantKind: ErrorKindHTTPStatus, wantStatus: 503, wantError: "503 Service Unavailable: body: engine overloaded",
		},
		{
			name: "503 whose body is reset",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, "HTTP/1.1 503 Service Unavailable\r\nContent-Type: text/plain\r\nContent-Length: 1000\r\n\r\n"+
					"engine overloaded")
				time.Sleep(faultBound / 4) // the head first, then the reset
				resetOnClose(conn)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 503, wantError: "503 Service Unavailable: body: engine overloaded",
		},
		{
			name: "Content-Length body without [DONE]",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				body := "data: " + deltaChunk("content", "a") + "\n\n"
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body), body)
				holdOpen(conn)
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "without [DONE] after 1 chunks", wantChunks: 1,
		},
		{
			name: "Content-Length body cut by the close",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				body := "data: " + deltaChunk("content", "a") + "\n\n"
				fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", len(body)+100, body)
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantChunks: 1,
		},
	}
	runFaultTable(t, tests)
}

// faultCase is a server's answer and the one outcome the client must make of it.
type faultCase struct {
	name       string
	serve      func(conn net.Conn, br *bufio.Reader)
	wantKind   string
	wantStatus int
	wantError  string
	wantChunks int
}

// runFaultTable runs each case on each path: the outcome may not depend on TLS.
func runFaultTable(t *testing.T, tests []faultCase) {
	t.Helper()
	eachPath(t, func(t *testing.T, path string) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := startRawServerOn(t, path, 0, tt.serve)
				res := streamGuarded(t, faultClient(t, Config{}, srv), context.Background(), faultRequest, nil)
				assertKind(t, res, tt.wantKind, tt.wantStatus, tt.wantError, tt.wantChunks)
			})
		}
	})
}

// answer is a faultCase's serve that reads the request, writes resp and holds the
// connection open.
func answer(resp string) func(conn net.Conn, br *bufio.Reader) {
	return func(conn net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.WriteString(conn, resp)
		holdOpen(conn)
	}
}

// TestStreamResponseForms: answers that bend HTTP/1.1 each have one outcome, net/http's
// reading of them, on every path. A stream that succeeds brings its one token.
func TestStreamResponseForms(t *testing.T) {
	okBody := sseChunk(deltaChunk("content", "a"), "[DONE]") + "0\r\n\r\n"
	head := func(status string, headers ...string) string {
		return "HTTP/1.1 " + status + "\r\n" + strings.Join(headers, "\r\n") + "\r\n\r\n"
	}
	const sse, chunked = "Content-Type: text/event-stream", "Transfer-Encoding: chunked"
	var gzipped bytes.Buffer
	zw := gzip.NewWriter(&gzipped)
	fmt.Fprintf(zw, "data: %s\n\ndata: [DONE]\n\n", deltaChunk("content", "a"))
	zw.Close()
	longText := strings.Repeat("0123456789abcdef", 1<<16) // 1 MiB in one SSE line
	longEvent := "data: " + deltaChunk("content", longText) + "\n\ndata: [DONE]\n\n"
	tests := []faultCase{
		{name: "bare LF line endings in the head", serve: answer(strings.ReplaceAll(head("200 OK", sse, chunked), "\r\n", "\n") + okBody),
			wantStatus: 200, wantChunks: 1},
		{name: "folded header lines", serve: answer(head("200 OK", "Content-Type:", " text/event-stream", "X-Note: a", "\tb", chunked) + okBody),
			wantStatus: 200, wantChunks: 1},
		{name: "status without a reason", serve: answer(head("200", sse, chunked) + okBody), wantStatus: 200, wantChunks: 1},
		{name: "unregistered 2xx status", serve: answer(head("299 Fine", sse, chunked) + okBody), wantStatus: 299, wantChunks: 1},
		{name: "four-digit status", serve: answer(head("2000 OK", sse, chunked) + okBody),
			wantKind: ErrorKindTransport, wantError: `malformed HTTP status code "2000"`},
		{name: "status beyond 599", serve: answer(head("600 Odd", sse, chunked) + okBody),
			wantKind: ErrorKindHTTPStatus, wantStatus: 600, wantError: "http status 600 Odd"},
		{name: "signed chunk size", serve: answer(head("200 OK", sse, chunked) + "+" + okBody),
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "invalid byte in chunk length"},
		{name: "bare LF after a chunk size", serve: answer(head("200 OK", sse, chunked) + strings.ReplaceAll(okBody, "\r\n", "\n")),
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "bare LF"},
		{name: "two different Content-Lengths", serve: answer(head("200 OK", sse, "Content-Length: 3", "Content-Length: 4") + "abcd"),
			wantKind: ErrorKindTransport, wantError: "multiple Content-Length"},
		{name: "unknown transfer coding", serve: answer(head("200 OK", sse, "Transfer-Encoding: gzip, chunked") + okBody),
			wantKind: ErrorKindTransport, wantError: "unsupported transfer encoding"},
		{name: "gzip body, not asked for", serve: answer(head("200 OK", sse, "Content-Encoding: gzip", fmt.Sprintf("Content-Length: %d", gzipped.Len())) + gzipped.String()),
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: `content encoding "gzip", which kvbench does not ask for`},
		{name: "truncated gzip body", serve: answer(head("200 OK", sse, "Content-Encoding: gzip", "Content-Length: 4") + "\x1f\x8b\x08\x00"),
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: `content encoding "gzip"`},
		{name: "503 with a gzip body", serve: answer(head("503 Service Unavailable", "Content-Encoding: gzip", fmt.Sprintf("Content-Length: %d", gzipped.Len())) + gzipped.String()),
			wantKind: ErrorKindHTTPStatus, wantStatus: 503, wantError: `503 Service Unavailable: a body in content encoding "gzip"`},
		{name: "identity content coding", serve: answer(head("200 OK", sse, "Content-Encoding: identity", chunked) + okBody),
			wantStatus: 200, wantChunks: 1},
		{name: "a 1 MiB SSE line", serve: answer(head("200 OK", sse, fmt.Sprintf("Content-Length: %d", len(longEvent))) + longEvent),
			wantStatus: 200, wantChunks: 1},
	}
	runFaultTable(t, tests)
}

// TestStreamResetMidStream: a reset (SO_LINGER 0) after the first token cuts the stream.
func TestStreamResetMidStream(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		firstToken := make(chan struct{})
		srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(roleChunk(), deltaChunk("content", "a")))
			select { // the reset must not overtake the first token
			case <-firstToken:
			case <-time.After(testGuard):
			}
			resetOnClose(conn)
		})
		var once sync.Once
		res := streamGuarded(t, faultClient(t, Config{}, srv), context.Background(), faultRequest, func(p Progress) {
			if p.Phase == PhaseDecode {
				once.Do(func() { close(firstToken) })
			}
		})
		assertKind(t, res, ErrorKindStreamCut, 200, "", 1)
	})
}

// TestStreamCancelMidStream: canceling the context ends a stream the server holds open.
func TestStreamCancelMidStream(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		var cfg Config
		srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(roleChunk(), deltaChunk("content", "a")))
			holdOpen(conn)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg.ChunkTimeout = time.Hour // only the cancel may end it
		c := serverClient(t, cfg, srv)
		res := streamGuarded(t, c, ctx, faultRequest, func(p Progress) {
			if p.Phase == PhaseDecode {
				go cancel()
			}
		})
		assertKind(t, res, ErrorKindCanceled, 200, "canceled", 1)
	})
}

// TestStreamCanceledBeforeSending: a context canceled before the call sends nothing, not
// even on a pooled connection.
func TestStreamCanceledBeforeSending(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		var requests atomic.Int64
		srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
			for {
				if _, _, err := readRequest(br); err != nil {
					return
				}
				requests.Add(1)
				io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
			}
		})
		c := faultClient(t, Config{}, srv)
		if res := streamGuarded(t, c, context.Background(), faultRequest, nil); res.Failed() {
			t.Fatalf("first request: %s", res.Error)
		}
		ctx, cancel := context.WithCancel(context.Background())
		cancel()
		res := streamGuarded(t, c, ctx, faultRequest, nil)
		assertKind(t, res, ErrorKindCanceled, 0, "canceled", 0)
		if res := streamGuarded(t, c, context.Background(), faultRequest, nil); res.Failed() {
			t.Fatalf("third request: %s", res.Error)
		}
		// Once the client's connections are closed, the server has read all it was sent.
		closeIdle(c)
		srv.waitFinished(t)
		if n := requests.Load(); n != 2 {
			t.Errorf("the server got %d requests, want 2 (the canceled one sent nothing)", n)
		}
	})
}

// TestStreamHeadersThenSilence: a head and no byte of body is a long prefill to the chunk
// bound; the request's own timeout ends it.
func TestStreamHeadersThenSilence(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead)
			holdOpen(conn)
		})
		req := faultRequest
		req.Timeout = 3 * faultBound
		res := streamGuarded(t, faultClient(t, Config{}, srv), context.Background(), req, nil)
		assertKind(t, res, ErrorKindTimeout, 200, "request timeout", 0)
	})
}

// TestStreamConnectionReuse: which answers leave a connection for the next request.
func TestStreamConnectionReuse(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		okEvents := []string{roleChunk(), deltaChunk("content", "ok"), finishChunk("stop"), usageChunk(3, 1, ""), "[DONE]"}
		var okBody strings.Builder
		for _, e := range okEvents {
			fmt.Fprintf(&okBody, "data: %s\n\n", e)
		}
		tests := []struct {
			name string
			// answer writes the response to one request; it returns false to end the connection.
			answer    func(conn net.Conn, br *bufio.Reader) bool
			wantConns int64 // for 3 sequential requests
			errorBody bool  // a 400 answer, not a stream
		}{
			{
				name: "chunked, keep-alive",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					io.WriteString(conn, chunkedSSEHead+sseChunk(okEvents...)+"0\r\n\r\n")
					return true
				},
				wantConns: 1,
			},
			{
				name: "Content-Length, keep-alive",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					fmt.Fprintf(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Length: %d\r\n\r\n%s", okBody.Len(), okBody.String())
					return true
				},
				wantConns: 1,
			},
			{
				name: "Connection: close, connection left open",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					io.WriteString(conn, strings.Replace(chunkedSSEHead, "\r\n\r\n", "\r\nConnection: close\r\n\r\n", 1)+
						sseChunk(okEvents...)+"0\r\n\r\n")
					return true
				},
				wantConns: 3,
			},
			{
				name: "HTTP/1.0 body until the close",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					io.WriteString(conn, "HTTP/1.0 200 OK\r\nContent-Type: text/event-stream\r\n\r\n"+okBody.String())
					return false
				},
				wantConns: 3,
			},
			{
				name: "[DONE] and the body never ends",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					io.WriteString(conn, chunkedSSEHead+sseChunk(okEvents...))
					// The client must give up on the body's end and close the connection.
					holdOpen(conn)
					return false
				},
				wantConns: 3,
			},
			{
				name: "interim answers first",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					io.WriteString(conn, "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </x>\r\n\r\n"+
						chunkedSSEHead+sseChunk(okEvents...)+"0\r\n\r\n")
					return true
				},
				wantConns: 1,
			},
			{
				name: "400 with Content-Length, keep-alive",
				answer: func(conn net.Conn, br *bufio.Reader) bool {
					msg := `{"object":"error","message":"bad things","code":400}`
					fmt.Fprintf(conn, "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nContent-Length: %d\r\n\r\n%s", len(msg), msg)
					return true
				},
				wantConns: 1, errorBody: true,
			},
		}
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
					for {
						if _, _, err := readRequest(br); err != nil || !tt.answer(conn, br) {
							return
						}
					}
				})
				// Every answer comes at once: fault-sized bounds would only measure how busy
				// the machine is (a TLS handshake behind other tests can take 200 ms).
				c := serverClient(t, Config{HeaderTimeout: testGuard / 2, ChunkTimeout: testGuard / 2}, srv)
				for i := range 3 {
					res := streamGuarded(t, c, context.Background(), faultRequest, nil)
					if tt.errorBody {
						assertKind(t, res, ErrorKindHTTPStatus, 400, "bad things", 0)
					} else if res.Failed() || res.Answer != "ok" || res.OutputTokens != 1 {
						t.Fatalf("request %d: kind %q answer %q: %s", i, res.ErrorKind, res.Answer, res.Error)
					}
				}
				if n := srv.accepted.Load(); n != tt.wantConns {
					t.Errorf("%d connections for 3 sequential requests, want %d", n, tt.wantConns)
				}
			})
		}
	})
}

// TestStreamDoneBodyNeverEnds: a server that sends [DONE] and holds the chunked body open
// gets its Result at once (no chunk bound, no request timeout to wait for); the client
// closes the connection after its drain bound instead of pooling it.
func TestStreamDoneBodyNeverEnds(t *testing.T) {
	eachPath(t, func(t *testing.T, path string) {
		var cfg Config
		clientClosed := make(chan struct{}, 2)
		srv := startRawServerOn(t, path, 0, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), usageChunk(3, 1, ""), "[DONE]"))
			holdOpen(conn)
			clientClosed <- struct{}{}
		})
		cfg.HeaderTimeout, cfg.ChunkTimeout = time.Hour, time.Hour // only the drain bound may end it
		c := serverClient(t, cfg, srv)
		for i := range 2 {
			res := streamGuarded(t, c, context.Background(), faultRequest, nil)
			if res.Failed() || res.Answer != "ok" || res.OutputTokens != 1 {
				t.Fatalf("request %d: kind %q answer %q: %s", i, res.ErrorKind, res.Answer, res.Error)
			}
			waitGuarded(t, clientClosed, "the client's close")
		}
		if n := srv.accepted.Load(); n != 2 {
			t.Errorf("%d connections for 2 requests, want 2", n)
		}
	})
}

// bigClient is faultClient for requests of many MiB, whose copying alone takes longer
// than faultBound under the race detector: the test's guard bounds the wait for headers.
func bigClient(t *testing.T, cfg Config, srv *rawServer) *Client {
	t.Helper()
	cfg.HeaderTimeout, cfg.ChunkTimeout = testGuard/2, faultBound
	return serverClient(t, cfg, srv)
}

// largeRequestBytes is a request size that a client's socket cannot take in one write,
// with the server's receive buffer small: twice the largest send buffer, 8 MiB at least.
func largeRequestBytes() int {
	size := 8 << 20
	if b, err := os.ReadFile("/proc/sys/net/ipv4/tcp_wmem"); err == nil {
		var lo, def, most int
		if _, err := fmt.Sscan(string(b), &lo, &def, &most); err == nil {
			size = max(size, 2*most)
		}
	}
	return size
}

// bigRequest is a chat request of about size bytes.
func bigRequest(size int) ChatRequest {
	return ChatRequest{Model: "m", Messages: []prompts.Message{{Role: "user", Content: strings.Repeat("0123456789abcdef", size/16)}}}
}

// TestStreamLargeRequestBody: a request far larger than the socket buffers reaches the
// server whole, on a connection reused for the next request.
func TestStreamLargeRequestBody(t *testing.T) {
	req := bigRequest(largeRequestBytes())
	body, err := encodeChatRequest(req)
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256(body)
	got := make(chan [32]byte, 1)
	srv := startRawServerBuffered(t, 64<<10, func(conn net.Conn, br *bufio.Reader) {
		for {
			_, body, err := readRequest(br)
			if err != nil {
				return
			}
			got <- sha256.Sum256(body)
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
		}
	})
	c := bigClient(t, Config{}, srv)
	for i := range 2 {
		res := streamGuarded(t, c, context.Background(), req, nil)
		if res.Failed() || res.Answer != "ok" {
			t.Fatalf("request %d: kind %q: %s", i, res.ErrorKind, res.Error)
		}
		if h := <-got; h != want {
			t.Fatalf("request %d: the server received a body that differs from the one sent", i)
		}
	}
	if n := srv.accepted.Load(); n != 1 {
		t.Errorf("%d connections for 2 requests, want 1", n)
	}
}

// TestStreamEarlyAnswer: a server that answers before reading a large request. Closing
// after the answer (a 413, say) must not hang nor pass for a stream's failure; keeping the
// connection while it reads the rest must not leave the connection pooled half-written.
func TestStreamEarlyAnswer(t *testing.T) {
	size := largeRequestBytes()
	const msg = `{"error":{"message":"request too large","type":"BadRequestError","code":413}}`
	answer := fmt.Sprintf("HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(msg))
	t.Run("and closes", func(t *testing.T) {
		srv := startRawServerBuffered(t, 64<<10, func(conn net.Conn, br *bufio.Reader) {
			if _, err := http.ReadRequest(br); err != nil { // the head, not the body
				return
			}
			io.WriteString(conn, answer+"Connection: close\r\n\r\n"+msg)
		})
		res := streamGuarded(t, bigClient(t, Config{}, srv), context.Background(), bigRequest(size), nil)
		switch {
		case res.ErrorKind == ErrorKindHTTPStatus:
			assertKind(t, res, ErrorKindHTTPStatus, 413, "request too large", 0)
		case res.ErrorKind == ErrorKindTransport && strings.Contains(res.Error, "write"):
			// net/http reports the failed write when the server's reset comes before the
			// answer is read: a race of the network's, not of the client's.
		default:
			t.Errorf("kind %q status %d: %s; want http_status 413", res.ErrorKind, res.HTTPStatus, res.Error)
		}
	})
	t.Run("and reads on", func(t *testing.T) {
		srv := startRawServerBuffered(t, 64<<10, func(conn net.Conn, br *bufio.Reader) {
			for {
				req, err := http.ReadRequest(br)
				if err != nil {
					return
				}
				if req.ContentLength > 1<<20 {
					io.WriteString(conn, answer+"\r\n"+msg)
					if _, err := io.Copy(io.Discard, req.Body); err != nil {
						return
					}
					continue
				}
				io.Copy(io.Discard, req.Body)
				io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
			}
		})
		c := bigClient(t, Config{}, srv)
		res := streamGuarded(t, c, context.Background(), bigRequest(size), nil)
		assertKind(t, res, ErrorKindHTTPStatus, 413, "request too large", 0)
		for i := range 2 {
			if res := streamGuarded(t, c, context.Background(), faultRequest, nil); res.Failed() || res.Answer != "ok" {
				t.Fatalf("request %d after the early answer: kind %q: %s", i, res.ErrorKind, res.Error)
			}
		}
	})
}

// openFDs counts the process's open file descriptors.
func openFDs(t *testing.T) int {
	t.Helper()
	entries, err := os.ReadDir("/proc/self/fd")
	if err != nil {
		t.Skipf("no /proc/self/fd: %v", err)
	}
	return len(entries)
}

// closeIdle closes the client's idle connections, so that a count of descriptors sees
// only what leaked.
func closeIdle(c *Client) {
	c.httpClient.CloseIdleConnections()
}

// TestStreamNoDescriptorLeak: requests that end in every way leave no descriptor behind.
func TestStreamNoDescriptorLeak(t *testing.T) {
	const requests = 200
	modes := []struct {
		name  string
		serve func(conn net.Conn, br *bufio.Reader) bool // false ends the connection
		kinds []string                                   // acceptable outcomes
	}{
		{"success", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
			return true
		}, []string{""}},
		{"connection close", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 14\r\n\r\ndata: [DONE]\n\n")
			return true
		}, []string{""}},
		{"500", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, "HTTP/1.1 500 Internal Server Error\r\nTransfer-Encoding: chunked\r\n\r\n4\r\nboom\r\n0\r\n\r\n")
			return true
		}, []string{ErrorKindHTTPStatus}},
		{"close", func(conn net.Conn, br *bufio.Reader) bool { return false }, []string{ErrorKindTransport}},
		{"reset", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "a")))
			resetOnClose(conn)
			return false
		}, []string{ErrorKindStreamCut, ErrorKindTransport}},
		{"bad chunk", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, chunkedSSEHead+"zz\r\n")
			holdOpen(conn)
			return false
		}, []string{ErrorKindStreamCut}},
		{"silent", func(conn net.Conn, br *bufio.Reader) bool {
			holdOpen(conn)
			return false
		}, []string{ErrorKindTimeout}},
		{"body never ends", func(conn net.Conn, br *bufio.Reader) bool {
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]"))
			holdOpen(conn)
			return false
		}, []string{""}},
	}
	// Requests take the modes in turn, except that the two that wait (the header bound,
	// the drain past [DONE]) take every fourth of their turns only: 7 requests each.
	schedule := make([]int, requests)
	for i := range schedule {
		schedule[i] = i % len(modes)
		if schedule[i] >= len(modes)-2 && i/len(modes)%4 != 0 {
			schedule[i] = 0
		}
	}
	var served atomic.Int64
	srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
		for {
			if _, _, err := readRequest(br); err != nil {
				return
			}
			if !modes[schedule[int(served.Add(1)-1)%requests]].serve(conn, br) {
				return
			}
		}
	})
	c := faultClient(t, Config{}, srv)
	// One request first: Go's poller and the client's pool exist from then on.
	served.Store(0)
	if res := streamGuarded(t, c, context.Background(), faultRequest, nil); res.Failed() {
		t.Fatalf("warm-up: %s", res.Error)
	}
	closeIdle(c)
	before := openFDs(t)
	served.Store(0)
	for i := range requests {
		mode := modes[schedule[i]]
		res := streamGuarded(t, c, context.Background(), faultRequest, nil)
		ok := false
		for _, k := range mode.kinds {
			ok = ok || res.ErrorKind == k
		}
		if !ok {
			t.Fatalf("request %d (%s): kind %q: %s; want one of %q", i, mode.name, res.ErrorKind, res.Error, mode.kinds)
		}
	}
	srv.stop()
	closeIdle(c)
	// Closes by other goroutines (net/http's connection loops) settle within the guard.
	deadline := time.Now().Add(testGuard)
	after := openFDs(t)
	for after > before+2 && time.Now().Before(deadline) {
		time.Sleep(10 * time.Millisecond)
		after = openFDs(t)
	}
	if after > before+2 { // a descriptor per request of a mode would be 7 at least
		t.Errorf("%d descriptors open after %d requests, %d before", after, requests, before)
	}
}

// TestStreamManyConcurrent: 256 streams at once each get their own answer, whole.
func TestStreamManyConcurrent(t *testing.T) {
	const streams = 256
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Messages []struct{ Content string } `json:"messages"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) != 1 {
			http.Error(w, "bad request", http.StatusBadRequest)
			return
		}
		startStream(w)
		// The answer echoes the request, in pieces flushed one by one.
		words := strings.Fields(req.Messages[0].Content)
		writeEvents(w, roleChunk())
		for _, word := range words {
			writeEvents(w, deltaChunk("content", word+" "))
		}
		writeEvents(w, finishChunk("stop"), usageChunk(5, len(words), ""), "[DONE]")
	})
	c := testClient(t, Config{}, srv.URL)
	results := make([]Result, streams)
	var wg sync.WaitGroup
	for i := range streams {
		wg.Add(1)
		go func() {
			defer wg.Done()
			content := fmt.Sprintf("stream %d of %d says hello", i, streams)
			results[i] = c.StreamChat(context.Background(), ChatRequest{Model: "m",
				Messages: []prompts.Message{{Role: "user", Content: content}}, Timeout: testGuard}, nil)
		}()
	}
	wg.Wait()
	for i, res := range results {
		want := fmt.Sprintf("stream %d of %d says hello ", i, streams)
		if res.Failed() || res.Answer != want || res.GeneratedChunks != 6 || res.OutputTokens != 6 || res.HTTPStatus != 200 {
			t.Errorf("stream %d: kind %q answer %q, %d chunks, %d tokens: %s", i, res.ErrorKind, res.Answer,
				res.GeneratedChunks, res.OutputTokens, res.Error)
			continue
		}
		assertTimingOrder(t, res)
		if m := res.BatchedChunks; m < 0 || m > res.GeneratedChunks-1 {
			t.Errorf("stream %d: batched_chunks %d of %d", i, m, res.GeneratedChunks)
		}
	}
}

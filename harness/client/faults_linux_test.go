package client

import (
	"bufio"
	"context"
	"crypto/sha256"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
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

const (
	faultBound = 200 * time.Millisecond
	testGuard  = 10 * time.Second
)

// rawServer accepts connections and runs serve on each; the test's end closes the listener
// and every connection and waits for the handlers.
type rawServer struct {
	URL      string
	accepted atomic.Int64
	finished atomic.Int64 // connections whose serve returned
	stop     func()
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
	return startRawServerBuffered(t, 0, serve)
}

// startRawServerBuffered is startRawServer with a receive buffer of rcvbuf bytes (0: the
// system's): a small one makes a large request outlast what the client's first write takes.
func startRawServerBuffered(t *testing.T, rcvbuf int, serve func(conn net.Conn, br *bufio.Reader)) *rawServer {
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
				serve(c, bufio.NewReader(c))
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

// faultClient is a client of url on cfg's transport with small header and chunk bounds.
func faultClient(t *testing.T, cfg Config, url string) *Client {
	t.Helper()
	cfg.HeaderTimeout, cfg.ChunkTimeout = faultBound, faultBound
	return transportClient(t, cfg, url)
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
// under both transports, within its own bounds.
func TestStreamFaults(t *testing.T) {
	tests := []struct {
		name       string
		serve      func(conn net.Conn, br *bufio.Reader)
		wantKind   string
		wantStatus int
		wantError  string
		wantChunks int
		anyFailure bool // the transports differ: only a failure without chunks is asserted
	}{
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
			wantKind: ErrorKindTransport, // net/http: "malformed MIME header", the loop: "EOF"
		},
		{
			name: "reset with the request unread",
			serve: func(conn net.Conn, br *bufio.Reader) {
				br.Peek(1) // the request is on its way: the dial is over
				conn.(*net.TCPConn).SetLinger(0)
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
				conn.(*net.TCPConn).SetLinger(0)
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
		{
			name: "gzip body",
			serve: func(conn net.Conn, br *bufio.Reader) {
				readRequest(br)
				io.WriteString(conn, "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nContent-Encoding: gzip\r\nContent-Length: 4\r\n\r\n\x1f\x8b\x08\x00")
				holdOpen(conn)
			},
			// net/http asked for gzip and fails to inflate it, the loop did not and refuses
			// it: either way no chunk, and no success.
			anyFailure: true,
		},
	}
	eachTransport(t, func(t *testing.T, cfg Config) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := startRawServer(t, tt.serve)
				res := streamGuarded(t, faultClient(t, cfg, srv.URL), context.Background(), faultRequest, nil)
				if tt.anyFailure {
					if !res.Failed() || res.GeneratedChunks != 0 {
						t.Errorf("kind %q chunks %d: %q; want a failure without chunks", res.ErrorKind, res.GeneratedChunks, res.Error)
					}
					return
				}
				assertKind(t, res, tt.wantKind, tt.wantStatus, tt.wantError, tt.wantChunks)
			})
		}
	})
}

// TestStreamResetMidStream: a reset (SO_LINGER 0) after the first token cuts the stream.
func TestStreamResetMidStream(t *testing.T) {
	eachTransport(t, func(t *testing.T, cfg Config) {
		firstToken := make(chan struct{})
		srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(roleChunk(), deltaChunk("content", "a")))
			select { // the reset must not overtake the first token
			case <-firstToken:
			case <-time.After(testGuard):
			}
			conn.(*net.TCPConn).SetLinger(0)
		})
		var once sync.Once
		res := streamGuarded(t, faultClient(t, cfg, srv.URL), context.Background(), faultRequest, func(p Progress) {
			if p.Phase == PhaseDecode {
				once.Do(func() { close(firstToken) })
			}
		})
		assertKind(t, res, ErrorKindStreamCut, 200, "", 1)
	})
}

// TestStreamCancelMidStream: canceling the context ends a stream the server holds open.
func TestStreamCancelMidStream(t *testing.T) {
	eachTransport(t, func(t *testing.T, cfg Config) {
		srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(roleChunk(), deltaChunk("content", "a")))
			holdOpen(conn)
		})
		ctx, cancel := context.WithCancel(context.Background())
		defer cancel()
		cfg.ChunkTimeout = time.Hour // only the cancel may end it
		c := transportClient(t, cfg, srv.URL)
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
	eachTransport(t, func(t *testing.T, cfg Config) {
		var requests atomic.Int64
		srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
			for {
				if _, _, err := readRequest(br); err != nil {
					return
				}
				requests.Add(1)
				io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
			}
		})
		c := faultClient(t, cfg, srv.URL)
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
	eachTransport(t, func(t *testing.T, cfg Config) {
		srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead)
			holdOpen(conn)
		})
		req := faultRequest
		req.Timeout = 3 * faultBound
		res := streamGuarded(t, faultClient(t, cfg, srv.URL), context.Background(), req, nil)
		assertKind(t, res, ErrorKindTimeout, 200, "request timeout", 0)
	})
}

// TestStreamConnectionReuse: which answers leave a connection for the next request.
func TestStreamConnectionReuse(t *testing.T) {
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
	eachTransport(t, func(t *testing.T, cfg Config) {
		for _, tt := range tests {
			t.Run(tt.name, func(t *testing.T) {
				srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
					for {
						if _, _, err := readRequest(br); err != nil || !tt.answer(conn, br) {
							return
						}
					}
				})
				c := faultClient(t, cfg, srv.URL)
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
	eachTransport(t, func(t *testing.T, cfg Config) {
		clientClosed := make(chan struct{}, 2)
		srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
			readRequest(br)
			io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), usageChunk(3, 1, ""), "[DONE]"))
			holdOpen(conn)
			clientClosed <- struct{}{}
		})
		cfg.HeaderTimeout, cfg.ChunkTimeout = time.Hour, time.Hour // only the drain bound may end it
		c := transportClient(t, cfg, srv.URL)
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

// TestStreamPooledConnectionClosed: a pooled connection the server closed while idle is
// not used; the next request dials a fresh one. (net/http notices the close on its own
// goroutine, so only the loop's pool can be checked without a race.)
func TestStreamPooledConnectionClosed(t *testing.T) {
	closed := make(chan struct{}, 4)
	srv := startRawServer(t, func(conn net.Conn, br *bufio.Reader) {
		readRequest(br)
		io.WriteString(conn, chunkedSSEHead+sseChunk(deltaChunk("content", "ok"), "[DONE]")+"0\r\n\r\n")
		conn.Close() // after a keep-alive answer: the client pools the connection
		closed <- struct{}{}
	})
	c := faultClient(t, Config{}, srv.URL)
	for i := range 3 {
		res := streamGuarded(t, c, context.Background(), faultRequest, nil)
		if res.Failed() || res.Answer != "ok" {
			t.Fatalf("request %d: kind %q: %s", i, res.ErrorKind, res.Error)
		}
		waitGuarded(t, closed, "server close")
		waitPooledClosed(t, c)
	}
	if n := srv.accepted.Load(); n != 3 {
		t.Errorf("%d connections for 3 requests, want 3", n)
	}
}

// waitPooledClosed waits until the loop's pooled connection sees the server's close.
func waitPooledClosed(t *testing.T, c *Client) {
	t.Helper()
	deadline := time.Now().Add(testGuard)
	for {
		c.loop.mu.Lock()
		if len(c.loop.idle) != 1 {
			c.loop.mu.Unlock()
			t.Fatalf("%d pooled connections, want 1", len(c.loop.idle))
		}
		var b [1]byte
		n, _, err := syscall.Recvfrom(c.loop.idle[0].fd, b[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT)
		c.loop.mu.Unlock()
		if n == 0 && err == nil {
			return
		}
		if time.Now().After(deadline) {
			t.Fatalf("the pooled connection never saw the close")
		}
		time.Sleep(time.Millisecond)
	}
}

// bigClient is faultClient for requests of many MiB, whose copying alone takes longer
// than faultBound under the race detector: the test's guard bounds the wait for headers.
func bigClient(t *testing.T, cfg Config, url string) *Client {
	t.Helper()
	cfg.HeaderTimeout, cfg.ChunkTimeout = testGuard/2, faultBound
	return transportClient(t, cfg, url)
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
// server whole (the loop writes the rest as the socket drains).
func TestStreamLargeRequestBody(t *testing.T) {
	eachTransport(t, func(t *testing.T, cfg Config) {
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
		c := bigClient(t, cfg, srv.URL)
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
	})
}

// TestStreamEarlyAnswer: a server that answers before reading a large request. Closing
// after the answer (a 413, say) must not hang nor pass for a stream's failure; keeping the
// connection while it reads the rest must not leave the connection pooled half-written.
func TestStreamEarlyAnswer(t *testing.T) {
	size := largeRequestBytes()
	const msg = `{"error":{"message":"request too large","type":"BadRequestError","code":413}}`
	answer := fmt.Sprintf("HTTP/1.1 413 Payload Too Large\r\nContent-Type: application/json\r\nContent-Length: %d\r\n", len(msg))
	t.Run("and closes", func(t *testing.T) {
		eachTransport(t, func(t *testing.T, cfg Config) {
			srv := startRawServerBuffered(t, 64<<10, func(conn net.Conn, br *bufio.Reader) {
				if _, err := http.ReadRequest(br); err != nil { // the head, not the body
					return
				}
				io.WriteString(conn, answer+"Connection: close\r\n\r\n"+msg)
			})
			res := streamGuarded(t, bigClient(t, cfg, srv.URL), context.Background(), bigRequest(size), nil)
			switch {
			case res.ErrorKind == ErrorKindHTTPStatus:
				assertKind(t, res, ErrorKindHTTPStatus, 413, "request too large", 0)
			case cfg.Transport == TransportNetHTTP && res.ErrorKind == ErrorKindTransport:
				// net/http reports the failed write when it comes before the answer.
			default:
				t.Errorf("kind %q status %d: %s; want http_status 413", res.ErrorKind, res.HTTPStatus, res.Error)
			}
		})
	})
	t.Run("and reads on", func(t *testing.T) {
		eachTransport(t, func(t *testing.T, cfg Config) {
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
			c := bigClient(t, cfg, srv.URL)
			res := streamGuarded(t, c, context.Background(), bigRequest(size), nil)
			assertKind(t, res, ErrorKindHTTPStatus, 413, "request too large", 0)
			for i := range 2 {
				if res := streamGuarded(t, c, context.Background(), faultRequest, nil); res.Failed() || res.Answer != "ok" {
					t.Fatalf("request %d after the early answer: kind %q: %s", i, res.ErrorKind, res.Error)
				}
			}
		})
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
	if c.loop != nil {
		c.loop.mu.Lock()
		for _, conn := range c.loop.idle {
			syscall.Close(conn.fd)
		}
		c.loop.idle = nil
		c.loop.mu.Unlock()
	}
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
			conn.(*net.TCPConn).SetLinger(0)
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
	eachTransport(t, func(t *testing.T, cfg Config) {
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
		c := faultClient(t, cfg, srv.URL)
		// One request first: the loop's epoll descriptor and Go's poller exist from then on.
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
	})
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
	eachTransport(t, func(t *testing.T, cfg Config) {
		c := transportClient(t, cfg, srv.URL)
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
	})
}

// TestIdleConnectionsExpire: pooling a connection closes those idle for longer than
// maxIdleTime, which a server has usually closed by then, and keeps the others.
func TestIdleConnectionsExpire(t *testing.T) {
	socket := func() int {
		fds, err := syscall.Socketpair(syscall.AF_UNIX, syscall.SOCK_STREAM, 0)
		if err != nil {
			t.Fatal(err)
		}
		syscall.Close(fds[1])
		return fds[0]
	}
	open := func(fd int) bool {
		_, err := fcntlGetFD(fd)
		return err == nil
	}
	stale := &rawConn{fd: socket(), idleSince: time.Now().Add(-2 * maxIdleTime)}
	recent := &rawConn{fd: socket(), idleSince: time.Now()}
	fresh := &rawConn{fd: socket()}
	tgt := &loopTarget{idle: []*rawConn{stale, recent}}
	tgt.put(fresh)
	if open(stale.fd) || !open(recent.fd) || !open(fresh.fd) {
		t.Fatalf("open after put: stale %v, recent %v, fresh %v; want false, true, true", open(stale.fd), open(recent.fd), open(fresh.fd))
	}
	if len(tgt.idle) != 2 || tgt.idle[0] != recent || tgt.idle[1] != fresh {
		t.Fatalf("pool holds %d connections, want the recent and the fresh one", len(tgt.idle))
	}
	syscall.Close(recent.fd)
	syscall.Close(fresh.fd)
}

func fcntlGetFD(fd int) (int, error) {
	r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, uintptr(fd), syscall.F_GETFD, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(r), nil
}

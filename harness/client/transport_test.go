package client

import (
	"context"
	"fmt"
	"net"
	"net/http"
	"net/http/httptest"
	"runtime"
	"strings"
	"sync/atomic"
	"testing"
	"time"
)

// The stream tests run on the epoll transport (Linux, http://127.0.0.1); this runs them
// again through net/http, which serves https, host names, proxies and other systems.
func TestStreamChatOverNetHTTP(t *testing.T) {
	t.Setenv(TransportEnv, "net/http")
	if c := New(Config{BaseURL: "http://127.0.0.1:1/v1"}); c.epoll != nil {
		t.Fatalf("%s=net/http left the epoll transport on", TransportEnv)
	}
	for name, test := range map[string]func(*testing.T){
		"success": TestStreamChatSuccess, "request fields": TestStreamChatSendsRequestFields,
		"failures": TestStreamChatFailures, "refused": TestStreamChatConnectionRefused,
		"cancel": TestStreamChatCancel, "timeout": TestStreamChatTimeout, "progress": TestStreamChatProgress,
		"answer cap": TestStreamChatAnswerCap, "bounded": TestStreamChatWaitsAreBounded,
		"batched": TestStreamChatCountsBatchedChunks, "reuse": TestStreamChatReusesConnections,
	} {
		t.Run(name, test)
	}
}

func TestEpollTransportServes(t *testing.T) {
	cases := map[string]bool{
		"http://127.0.0.1:8000/v1/chat/completions":    true,
		"http://localhost:8000/v1/chat/completions":    true,
		"http://[::1]:8000/v1/chat/completions":        true,
		"http://10.0.0.7/v1/chat/completions?x=1":      true,
		"https://127.0.0.1:8000/v1/chat/completions":   false,
		"http://gpu0.example:8000/v1/chat/completions": false,
		"http://user:pw@127.0.0.1/v1/chat/completions": false,
	}
	for u, want := range cases {
		if got := newEpollTarget(u, "k") != nil; got != (want && runtime.GOOS == "linux") {
			t.Errorf("%s: epoll transport %v, want %v", u, got, want)
		}
	}
}

// A kept connection the server closed while idle is noticed and replaced.
func TestStreamChatAfterServerClosedIdleConnection(t *testing.T) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		writeEvents(w, deltaChunk("content", "a"), usageChunk(3, 1, ""), "[DONE]")
	}))
	srv.Config.IdleTimeout = 20 * time.Millisecond
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := newTestClient(srv)
	for i := range 3 {
		if res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil); res.Failed() || res.Answer != "a" {
			t.Fatalf("request %d after an idle close: %s %s", i, res.ErrorKind, res.Error)
		}
		time.Sleep(200 * time.Millisecond) // ten idle timeouts: the server closes the connection
	}
	if conns.Load() < 2 {
		t.Errorf("%d connections: the server's idle close went unnoticed", conns.Load())
	}
}

// Bodies with a Content-Length or running to the close are read like chunked ones.
func TestStreamChatUnchunkedBodies(t *testing.T) {
	body := fmt.Sprintf("data: %s\n\ndata: %s\n\ndata: %s\n\ndata: [DONE]\n\n", roleChunk(), deltaChunk("content", "hi"), usageChunk(3, 1, ""))
	for name, handler := range map[string]http.HandlerFunc{
		"content length": func(w http.ResponseWriter, r *http.Request) {
			w.Header().Set("Content-Type", "text/event-stream")
			w.Header().Set("Content-Length", fmt.Sprint(len(body)))
			w.Write([]byte(body))
		},
		"until close": func(w http.ResponseWriter, r *http.Request) {
			conn, buf, err := http.NewResponseController(w).Hijack()
			if err != nil {
				t.Error(err)
				return
			}
			buf.WriteString("HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\nConnection: close\r\n\r\n" + strings.Repeat(body, 1))
			buf.Flush()
			conn.Close()
		},
	} {
		srv := sseServer(t, handler)
		for i := range 2 {
			res := newTestClient(srv).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
			if res.Failed() || res.Answer != "hi" || res.OutputTokens != 1 || res.OutputTokensSource != OutputTokensFromUsage {
				t.Errorf("%s, request %d: %s %s, answer %q, %d tokens", name, i, res.ErrorKind, res.Error, res.Answer, res.OutputTokens)
			}
		}
	}
}

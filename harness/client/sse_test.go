package client

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"
	"testing/iotest"
	"time"
)

func TestEventReaderSplitsDataLines(t *testing.T) {
	long := strings.Repeat("x", 3*eventBufferBytes)
	tests := []struct {
		name string
		body string
		want []string
	}{
		{"plain", "data: {\"a\":1}\n\ndata: [DONE]\n\n", []string{`{"a":1}`, "[DONE]"}},
		{"no space, CRLF, comments and fields", ": ping\r\nevent: message\r\nid: 7\r\ndata:{}\r\n\r\n", []string{"{}"}},
		{"unterminated last line", "data: {}\n\ndata: [DONE]", []string{"{}", "[DONE]"}},
		{"line longer than the buffer", "data: " + long + "\n\n", []string{long}},
		{"nothing but an HTML page", "<html><body>sign in</body></html>\n", nil},
		{"empty", "", nil},
	}
	readers := map[string]func(io.Reader) io.Reader{
		"one byte": iotest.OneByteReader,
		"half":     iotest.HalfReader,
		"whole":    func(r io.Reader) io.Reader { return r },
	}
	for _, tt := range tests {
		for name, wrap := range readers {
			r := newEventReader(wrap(strings.NewReader(tt.body)))
			var got []string
			for range 1 << 20 { // bounded: a one-byte reader needs a read per byte
				_, err := r.read(nil)
				for {
					p, ok := r.next()
					if !ok {
						break
					}
					got = append(got, string(p))
				}
				if err != nil {
					break
				}
			}
			r.release()
			if strings.Join(got, "|") != strings.Join(tt.want, "|") || len(got) != len(tt.want) {
				t.Errorf("%s, %s reads: got %d payloads %.60q, want %.60q", tt.name, name, len(got), got, tt.want)
			}
			if !r.eof {
				t.Errorf("%s, %s reads: end of body not seen", tt.name, name)
			}
		}
	}
}

// Events that share a read have no measurable gap: they are counted, not timed as 0.
func TestStreamChatCountsBatchedChunks(t *testing.T) {
	eachTransport(t, testStreamChatCountsBatchedChunks)
}

func testStreamChatCountsBatchedChunks(t *testing.T, cfg Config) {
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		writeEvents(w, roleChunk(), deltaChunk("content", "a"))
		// Six token events in one write: they arrive together.
		var burst []string
		for range 6 {
			burst = append(burst, deltaChunk("content", "b"))
		}
		writeEvents(w, burst...)
		writeEvents(w, finishChunk("stop"), usageChunk(3, 7, ""), "[DONE]")
	})
	res := transportClient(t, cfg, srv.URL).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
	if res.Failed() || res.GeneratedChunks != 7 {
		t.Fatalf("kind %q, %d chunks: %s", res.ErrorKind, res.GeneratedChunks, res.Error)
	}
	if res.BatchedChunks < 5 {
		t.Errorf("batched_chunks = %d, want at least the 5 that followed another in one write", res.BatchedChunks)
	}
	measured := 0
	if res.InterTokenMS != nil {
		measured = res.InterTokenMS.N
	}
	if measured+res.BatchedChunks != res.GeneratedChunks-1 {
		t.Errorf("%d measured gaps + %d batched chunks != %d chunks - 1", measured, res.BatchedChunks, res.GeneratedChunks)
	}
}

// After [DONE] the client reads the end of the body, so the connection is reused.
func TestStreamChatReusesConnections(t *testing.T) {
	eachTransport(t, testStreamChatReusesConnections)
}

func testStreamChatReusesConnections(t *testing.T, cfg Config) {
	var conns atomic.Int64
	srv := httptest.NewUnstartedServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		writeEvents(w, roleChunk(), deltaChunk("content", "a"), finishChunk("stop"), usageChunk(3, 1, ""), "[DONE]")
		time.Sleep(5 * time.Millisecond) // the end of the body comes in a later read
	}))
	srv.Config.ConnState = func(_ net.Conn, s http.ConnState) {
		if s == http.StateNew {
			conns.Add(1)
		}
	}
	srv.Start()
	t.Cleanup(srv.Close)
	c := transportClient(t, cfg, srv.URL)
	const requests = 20
	for i := range requests {
		if res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil); res.Failed() {
			t.Fatalf("request %d: %s", i, res.Error)
		}
	}
	if n := conns.Load(); n > requests/2 {
		t.Errorf("%d connections for %d sequential requests: streams do not reuse them", n, requests)
	}
}

func TestEncodeChatRequest(t *testing.T) {
	decode := func(t *testing.T, req ChatRequest) map[string]any {
		t.Helper()
		body, err := encodeChatRequest(req)
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(body, &m); err != nil {
			t.Fatalf("body %s: %v", body, err)
		}
		return m
	}
	plain := decode(t, ChatRequest{Model: "m", Messages: testMessages, MaxTokens: 8})
	for _, k := range []string{"ignore_eos", "min_tokens"} {
		if _, ok := plain[k]; ok {
			t.Errorf("%s sent although unset: %v", k, plain)
		}
	}
	if so, _ := plain["stream_options"].(map[string]any); so["include_usage"] != true || plain["stream"] != true {
		t.Errorf("stream options %v", plain)
	}
	knobs := decode(t, ChatRequest{Model: "m", Messages: testMessages, MaxTokens: 8, IgnoreEOS: true, MinTokens: 4,
		ExtraBody: map[string]any{"top_k": 5, "chat_template_kwargs": map[string]any{"enable_thinking": false}}})
	if knobs["ignore_eos"] != true || knobs["min_tokens"] != float64(4) || knobs["top_k"] != float64(5) || knobs["max_tokens"] != float64(8) {
		t.Errorf("body %v", knobs)
	}
	if kw, _ := knobs["chat_template_kwargs"].(map[string]any); kw["enable_thinking"] != false {
		t.Errorf("nested extra_body lost: %v", knobs)
	}
	for _, k := range ReservedBodyKeys {
		res := New(Config{BaseURL: "http://127.0.0.1:1/v1"}).StreamChat(context.Background(),
			ChatRequest{Model: "m", Messages: testMessages, ExtraBody: map[string]any{k: 1}}, nil)
		if res.ErrorKind != ErrorKindInvalidRequest || !strings.Contains(res.Error, fmt.Sprintf("%q", k)) {
			t.Errorf("extra_body.%s: kind %q error %q, want invalid_request naming the key", k, res.ErrorKind, res.Error)
		}
	}
}

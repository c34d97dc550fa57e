package client

import (
	"context"
	"encoding/json"
	"errors"
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
			r := newEventReader(wrap(strings.NewReader(tt.body)), nil)
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
	res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
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
	c := testClient(t, Config{}, srv.URL)
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

// piecesReader reads r in pieces of at most size bytes, as a socket brings a long line.
type piecesReader struct {
	r    io.Reader
	size int
}

func (p piecesReader) Read(b []byte) (int, error) { return p.r.Read(b[:min(len(b), p.size)]) }

// A long line is searched for its end once, not again from its start at every read: each
// byte is searched once, where a rescan would search ~n²/(2*4KiB) bytes (136 MiB for this
// 1 MiB line).
func TestEventReaderSearchesLongLineOnce(t *testing.T) {
	long := strings.Repeat("y", 1<<20)
	body := "data: " + long + "\n\ndata: [DONE]\n\n"
	r := newEventReader(piecesReader{strings.NewReader(body), 4 << 10}, nil)
	defer r.release()
	var got []string
	for range 1 << 20 { // bounded: ~260 reads
		_, err := r.read(nil)
		for p, ok := r.next(); ok; p, ok = r.next() {
			got = append(got, string(p))
		}
		if err != nil {
			break
		}
	}
	if len(got) != 2 || got[0] != long || got[1] != "[DONE]" {
		t.Fatalf("got %d payloads, want the long line and [DONE]", len(got))
	}
	if r.examined > int64(len(body))+1 {
		t.Errorf("searched %d bytes for line ends in a body of %d: a long line is rescanned", r.examined, len(body))
	}
}

// A line past the limit ends the stream with its own error, not a hang or a huge buffer.
func TestEventReaderRefusesOverlongLine(t *testing.T) {
	r := newEventReader(piecesReader{strings.NewReader("data: " + strings.Repeat("z", 1<<20)), 4 << 10}, nil)
	defer r.release()
	r.maxLine = 256 << 10
	var err error
	for range 1 << 10 { // bounded: 64 reads fill the limit
		if _, err = r.read(nil); err != nil {
			break
		}
		if _, ok := r.next(); ok {
			t.Fatal("a payload from a line without its end")
		}
	}
	if !errors.Is(err, errEventTooLarge) || len(r.buf) > r.maxLine {
		t.Errorf("error %v with a buffer of %d bytes; want errEventTooLarge within %d", err, len(r.buf), r.maxLine)
	}
}

// BenchmarkEventReaderLongLine reads an 8 MiB line in 16 KiB reads: the cost per byte
// stays flat however long the line.
func BenchmarkEventReaderLongLine(b *testing.B) {
	body := "data: " + strings.Repeat("y", 8<<20) + "\n\n"
	b.SetBytes(int64(len(body)))
	for b.Loop() {
		r := newEventReader(piecesReader{strings.NewReader(body), 16 << 10}, nil)
		for {
			_, err := r.read(nil)
			for _, ok := r.next(); ok; _, ok = r.next() {
			}
			if err != nil {
				break
			}
		}
		r.release()
	}
}

package client

import (
	"fmt"
	"strings"
	"testing"
)

// h1Outcome is what parsing a response came to; equal outcomes mean the parser did not
// depend on how reads cut the bytes.
type h1Outcome struct {
	body        string
	err         string // "" when every piece was taken
	status      int
	statusText  string
	contentType string
	headDone    bool
	reusable    bool
	done        bool // after eof, when the input ran to the close
	state       int  // the parser's state, compared only without an error
}

// parseH1 feeds pieces in order, stopping at the first error, then tells the parser the
// connection closed when closed is set.
func parseH1(pieces [][]byte, closed bool) h1Outcome {
	var p h1Response
	var body strings.Builder
	var out h1Outcome
	for _, piece := range pieces {
		if err := p.feed(piece, func(b []byte) { body.Write(b) }); err != nil {
			out.err = err.Error()
			break
		}
	}
	if out.err == "" && closed {
		p.eof()
	}
	out.body, out.status, out.statusText, out.contentType = body.String(), p.Status, p.StatusText, p.ContentType
	out.headDone, out.reusable, out.done, out.state = p.HeadDone, p.Reusable, p.done(), p.state
	return out
}

// splits yields in whole, cut in two at every byte boundary (or at step-spaced ones and
// those near the ends, for long inputs), and one byte at a time.
func splits(in []byte, step int) map[string][][]byte {
	ways := map[string][][]byte{"whole": {in}}
	for i := 1; i < len(in); i++ {
		if step > 1 && i%step != 0 && i > 8 && i < len(in)-8 {
			continue
		}
		ways[fmt.Sprintf("cut at %d", i)] = [][]byte{in[:i], in[i:]}
	}
	bytewise := make([][]byte, len(in))
	for i := range in {
		bytewise[i] = in[i : i+1]
	}
	ways["byte by byte"] = bytewise
	return ways
}

func TestH1ResponseValid(t *testing.T) {
	const sseHead = "HTTP/1.1 200 OK\r\nContent-Type: text/event-stream\r\n"
	tests := []struct {
		name   string
		in     string
		closed bool // the server closes after in
		want   h1Outcome
	}{
		{
			name: "chunked with extensions and trailers",
			in: sseHead + "Transfer-Encoding: chunked\r\n\r\n" +
				"8;name=value\r\ndata: a\n\r\n" + "A ; ext\r\ndata: bcd\n\r\n" + "1\r\n\n\r\n" +
				"0\r\nX-Checksum: 1\r\nX-Other: 2\r\n\r\n",
			want: h1Outcome{body: "data: a\ndata: bcd\n\n", status: 200, statusText: "200 OK",
				contentType: "text/event-stream", headDone: true, reusable: true, done: true},
		},
		{
			name: "chunked without trailers, names in other cases",
			in:   "HTTP/1.1 200 OK\r\ntransfer-encoding: Chunked\r\nCONTENT-ENCODING: identity\r\n\r\n3\r\nabc\r\n0\r\n\r\n",
			want: h1Outcome{body: "abc", status: 200, statusText: "200 OK", headDone: true, reusable: true, done: true},
		},
		{
			name: "Content-Length",
			in:   sseHead + "Content-Length: 23\r\nContent-Length: 23\r\n\r\ndata: x\n\ndata: [DONE]\n\n",
			want: h1Outcome{body: "data: x\n\ndata: [DONE]\n\n", status: 200, statusText: "200 OK",
				contentType: "text/event-stream", headDone: true, reusable: true, done: true},
		},
		{
			name: "Content-Length 0",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 0\r\n\r\n",
			want: h1Outcome{status: 200, statusText: "200 OK", headDone: true, reusable: true, done: true},
		},
		{
			name: "Connection: close",
			in:   "HTTP/1.1 200 OK\r\nConnection: close\r\nContent-Length: 2\r\n\r\nok",
			want: h1Outcome{body: "ok", status: 200, statusText: "200 OK", headDone: true, done: true},
		},
		{
			name:   "until the close",
			in:     sseHead + "\r\ndata: x\n\n",
			closed: true,
			want: h1Outcome{body: "data: x\n\n", status: 200, statusText: "200 OK", contentType: "text/event-stream",
				headDone: true, done: true},
		},
		{
			name: "until the close, not closed yet",
			in:   sseHead + "\r\ndata: x\n\n",
			want: h1Outcome{body: "data: x\n\n", status: 200, statusText: "200 OK", contentType: "text/event-stream",
				headDone: true, state: h1UntilClose},
		},
		{
			name:   "HTTP/1.0 without headers, until the close",
			in:     "HTTP/1.0 200 OK\r\n\r\ndata: [DONE]\n\n",
			closed: true,
			want:   h1Outcome{body: "data: [DONE]\n\n", status: 200, statusText: "200 OK", headDone: true, done: true},
		},
		{
			name: "HTTP/1.0 with Content-Length",
			in:   "HTTP/1.0 200 OK\r\nContent-Length: 3\r\n\r\nabc",
			want: h1Outcome{body: "abc", status: 200, statusText: "200 OK", headDone: true, done: true},
		},
		{
			name: "Content-Length and chunked: chunked wins, no reuse",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 99\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			want: h1Outcome{body: "ok", status: 200, statusText: "200 OK", headDone: true, done: true},
		},
		{
			name: "status line without a reason",
			in:   "HTTP/1.1 200\r\nContent-Length: 1\r\n\r\nx",
			want: h1Outcome{body: "x", status: 200, statusText: "200", headDone: true, reusable: true, done: true},
		},
		{
			name: "interim answers before 200",
			in: "HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 103 Early Hints\r\nLink: </a>\r\n\r\n" +
				"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n2\r\nok\r\n0\r\n\r\n",
			want: h1Outcome{body: "ok", status: 200, statusText: "200 OK", headDone: true, reusable: true, done: true},
		},
		{
			name: "interim answer only",
			in:   "HTTP/1.1 100 Continue\r\n\r\n",
			want: h1Outcome{status: 100, statusText: "100 Continue", reusable: true, state: h1Head},
		},
		{
			name: "204",
			in:   "HTTP/1.1 204 No Content\r\nServer: x\r\n\r\n",
			want: h1Outcome{status: 204, statusText: "204 No Content", headDone: true, reusable: true, done: true},
		},
		{
			name: "400 with a chunked JSON body",
			in: "HTTP/1.1 400 Bad Request\r\nContent-Type: application/json\r\nTransfer-Encoding: chunked\r\n\r\n" +
				"d\r\n{\"error\":\"x\"}\r\n0\r\n\r\n",
			want: h1Outcome{body: `{"error":"x"}`, status: 400, statusText: "400 Bad Request",
				contentType: "application/json", headDone: true, reusable: true, done: true},
		},
		{
			name: "bytes after the body",
			in:   "HTTP/1.1 200 OK\r\nContent-Length: 2\r\n\r\nokHTTP/1.1 200 OK\r\n",
			want: h1Outcome{body: "ok", status: 200, statusText: "200 OK", headDone: true, done: true},
		},
		{
			name: "chunked body cut by the close",
			in:   "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n5\r\nab",
			// The close cuts the body: not done, not reusable.
			closed: true,
			want:   h1Outcome{body: "ab", status: 200, statusText: "200 OK", headDone: true, state: h1ChunkData},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			if tt.want.done {
				tt.want.state = h1Done
			}
			for how, pieces := range splits([]byte(tt.in), 1) {
				if got := parseH1(pieces, tt.closed); got != tt.want {
					t.Fatalf("fed %s:\n got %+v\nwant %+v", how, got, tt.want)
				}
			}
		})
	}
}

func TestH1ResponseMalformed(t *testing.T) {
	const chunked = "HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n"
	tests := []struct{ name, in, wantErr string }{
		{"bad chunk size", chunked + "3\r\nabc\r\nzz\r\n", "chunk size"},
		{"empty chunk size", chunked + "\r\nabc\r\n", "chunk size"},
		{"negative chunk size", chunked + "-3\r\nabc\r\n", "chunk size"},
		{"no line break after a chunk's data", chunked + "3\r\nabcdef\r\n0\r\n\r\n", "after a chunk"},
		{"head over 64 KiB", "HTTP/1.1 200 OK\r\nX-Big: " + strings.Repeat("b", maxHeadBytes) + "\r\n\r\n", "head longer"},
		{"chunk size line over 4 KiB", chunked + "3;" + strings.Repeat("e", maxLineBytes) + "\r\nabc\r\n", "longer than"},
		{"trailer line over 4 KiB", chunked + "0\r\nX: " + strings.Repeat("t", maxLineBytes) + "\r\n\r\n", "longer than"},
		{"status line without a code", "HTTP/1.1 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
		{"status code too short", "HTTP/1.1 20 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
		{"not HTTP/1", "HTTP/2 200 OK\r\nContent-Length: 0\r\n\r\n", "status line"},
		{"not HTTP", "ICY 200 OK\r\n\r\n", "status line"},
		{"header line without a colon", "HTTP/1.1 200 OK\r\nContent-Length 0\r\n\r\n", "header line"},
		{"conflicting Content-Length", "HTTP/1.1 200 OK\r\nContent-Length: 3\r\nContent-Length: 4\r\n\r\nabcd", "Content-Length"},
		{"Content-Length not a number", "HTTP/1.1 200 OK\r\nContent-Length: 3x\r\n\r\nabc", "Content-Length"},
		{"Transfer-Encoding gzip", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip\r\n\r\nabc", "Transfer-Encoding"},
		{"Transfer-Encoding gzip then chunked", "HTTP/1.1 200 OK\r\nTransfer-Encoding: gzip, chunked\r\n\r\n3\r\nabc\r\n0\r\n\r\n", "Transfer-Encoding"},
		{"Content-Encoding gzip", "HTTP/1.1 200 OK\r\nContent-Encoding: gzip\r\nContent-Length: 3\r\n\r\nabc", "Content-Encoding"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			step := 1
			if len(tt.in) > 8<<10 {
				step = 997 // a head over 64 KiB: every cut would copy it 64 Ki times
			}
			for how, pieces := range splits([]byte(tt.in), step) {
				got := parseH1(pieces, false)
				if !strings.Contains(got.err, tt.wantErr) {
					t.Fatalf("fed %s: error %q, want one about %q (outcome %+v)", how, got.err, tt.wantErr, got)
				}
			}
		})
	}
}

// FuzzH1Response: however reads cut a response, the parser never panics and comes to
// what it comes to when the response arrives in one read.
func FuzzH1Response(f *testing.F) {
	for _, seed := range []string{
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\n8;x=1\r\ndata: a\n\r\n0\r\nT: 1\r\n\r\n",
		"HTTP/1.1 200 OK\r\nContent-Length: 4\r\n\r\nabcdHTTP",
		"HTTP/1.0 200 OK\r\n\r\ndata: [DONE]\n\n",
		"HTTP/1.1 100 Continue\r\n\r\nHTTP/1.1 204 No Content\r\n\r\n",
		"HTTP/1.1 400 Bad Request\r\nTransfer-Encoding: chunked\r\n\r\n3\r\nabcX\r\n",
		"HTTP/1.1 200 OK\r\nTransfer-Encoding: chunked\r\n\r\nfffffffffffffffff\r\n",
	} {
		f.Add([]byte(seed), []byte{3, 0, 17, 1})
	}
	f.Fuzz(func(t *testing.T, in, cuts []byte) {
		var pieces [][]byte
		rest := in
		for i := 0; len(rest) > 0; i++ {
			n := len(rest)
			if i < len(cuts) {
				n = min(n, int(cuts[i])+1)
			}
			pieces, rest = append(pieces, rest[:n]), rest[n:]
		}
		for _, closed := range []bool{false, true} {
			whole, cut := parseH1([][]byte{in}, closed), parseH1(pieces, closed)
			if whole.err != "" || cut.err != "" {
				// After an error only what came before it is comparable.
				if (whole.err == "") != (cut.err == "") || whole.body != cut.body {
					t.Fatalf("closed %v: whole %+v, in %d pieces %+v", closed, whole, len(pieces), cut)
				}
				continue
			}
			if whole != cut {
				t.Fatalf("closed %v: whole %+v, in %d pieces %+v", closed, whole, len(pieces), cut)
			}
		}
	})
}

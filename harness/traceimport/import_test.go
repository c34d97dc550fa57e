package traceimport

import (
	"bytes"
	"context"
	"errors"
	"hash/fnv"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/prompts"
)

// wordTokenizer is a known rule: a chat renders as "<role> content" per message plus an
// "<assistant>" generation prompt, and each word is one token, its id a hash of the word.
type wordTokenizer struct{}

func (w *wordTokenizer) ChatTokenIDs(_ context.Context, _ string, msgs []prompts.Message) ([]int, error) {
	var b strings.Builder
	for _, m := range msgs {
		b.WriteString("<" + m.Role + "> " + m.Content + " ")
	}
	return w.TextTokenIDs(context.Background(), "", b.String()+"<assistant>")
}

func (w *wordTokenizer) TextTokenIDs(_ context.Context, _, text string) ([]int, error) {
	if strings.Contains(text, "FAILME") {
		return nil, errors.New("post http://127.0.0.1:1/tokenize: status 500")
	}
	var ids []int
	for _, word := range strings.Fields(text) {
		h := fnv.New32a()
		h.Write([]byte(word))
		ids = append(ids, int(h.Sum32()%50000))
	}
	return ids, nil
}

// words returns n distinct words starting with prefix.
func words(prefix string, n int) string {
	var b strings.Builder
	for i := range n {
		if i > 0 {
			b.WriteByte(' ')
		}
		b.WriteString(prefix)
		b.WriteString(strings.Repeat("x", i%7))
		b.WriteByte(byte('a' + i%26))
		b.WriteByte(byte('a' + i/26%26))
	}
	return b.String()
}

func importString(t *testing.T, log string, opts Options) (*Trace, error) {
	t.Helper()
	if opts.BlockTokens == 0 {
		opts.BlockTokens = 4
	}
	return Import(context.Background(), strings.NewReader(log), "log.jsonl", &wordTokenizer{}, opts)
}

func chatLine(system, user string, extra string) string {
	return `{"model": "m", "messages": [{"role": "system", "content": "` + system + `"}, {"role": "user", "content": "` + user + `"}]` + extra + "}\n"
}

// TestSharedSystemPromptSharesLeadingIDs: requests with one system prompt share the ids of
// its blocks and part at the user's turn; the same prompt twice gives the same ids; ids are
// numbered from 0 in order of first appearance.
func TestSharedSystemPromptSharesLeadingIDs(t *testing.T) {
	system := words("sys", 20) // "<system>" + 20 words: 5 whole blocks of 4 before any user text
	log := chatLine(system, words("alpha", 9), `, "max_tokens": 7`) +
		chatLine(system, words("beta", 9), "") +
		"\n" + // blank lines are skipped
		chatLine(system, words("alpha", 9), `, "usage": {"completion_tokens": 3}`)
	tr, err := importString(t, log, Options{Rate: 2, OutputTokens: 11})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Requests
	if len(r) != 3 {
		t.Fatalf("%d requests", len(r))
	}
	if !slices.Equal(r[0].HashIDs, r[2].HashIDs) || r[0].InputLength != r[2].InputLength {
		t.Errorf("the same prompt twice: %v and %v", r[0].HashIDs, r[2].HashIDs)
	}
	if !slices.Equal(r[0].HashIDs[:5], r[1].HashIDs[:5]) || r[0].HashIDs[5] == r[1].HashIDs[5] {
		t.Errorf("one system prompt: want 5 shared leading blocks, then apart: %v and %v", r[0].HashIDs, r[1].HashIDs)
	}
	next := uint64(0)
	for _, req := range r {
		for _, id := range req.HashIDs {
			if id > next {
				t.Fatalf("id %d before %d appeared", id, next)
			}
			if id == next {
				next++
			}
		}
	}
	if r[0].OutputLength != 7 || r[1].OutputLength != 11 || r[2].OutputLength != 3 {
		t.Errorf("output lengths %d %d %d, want 7 (max_tokens), 11 (default), 3 (usage)", r[0].OutputLength, r[1].OutputLength, r[2].OutputLength)
	}
	if r[1].Timestamp.Milliseconds() != 500 || r[2].Timestamp.Milliseconds() != 1000 {
		t.Errorf("at 2 requests/s: %v %v", r[1].Timestamp, r[2].Timestamp)
	}
	rep := tr.Report
	if rep.SharingRequests != 2 || rep.OutputFromLimit != 1 || rep.OutputFromUsage != 1 || rep.OutputFromDefault != 1 {
		t.Errorf("report %+v", rep)
	}
	// The unbounded hit: request 2 hits its 5 system blocks, request 3 all of request 1's
	// whole blocks except the one holding its last token.
	n := int64(r[0].InputLength)
	want := int64(5*4) + (n-1)/4*4
	if rep.UnboundedHitTokens != want {
		t.Errorf("unbounded hit tokens %d, want %d", rep.UnboundedHitTokens, want)
	}
}

// TestTraceHoldsNoText: nothing of the log's text is in the trace, and two imports under
// two random keys write the same bytes (ids are numbered, not hashes).
func TestTraceHoldsNoText(t *testing.T) {
	log := chatLine("You are the ACME support bot", "my password is hunter2 and my account 12345", "") +
		`{"model": "m", "prompt": "secret completion text zanzibar"}` + "\n"
	var outs []string
	for range 2 {
		tr, err := importString(t, log, Options{Rate: 1})
		if err != nil {
			t.Fatal(err)
		}
		var b bytes.Buffer
		if err := tr.WriteJSONL(&b); err != nil {
			t.Fatal(err)
		}
		outs = append(outs, b.String())
	}
	if outs[0] != outs[1] {
		t.Errorf("two keys, two traces:\n%s\n%s", outs[0], outs[1])
	}
	for _, word := range strings.Fields("ACME support hunter2 password 12345 secret zanzibar") {
		if strings.Contains(outs[0], word) {
			t.Errorf("the trace holds %q:\n%s", word, outs[0])
		}
	}
	got, err := trace.ReadAll(trace.NewReader(strings.NewReader(outs[0]), "t", 4))
	if err != nil || len(got) != 2 {
		t.Fatalf("the trace does not read back: %v (%d requests)", err, len(got))
	}
}

// TestFormsOfALine: the Batch API line, a token-id prompt, text parts, RFC 3339 times in
// any order (sorted), and a Batch output's usage.
func TestFormsOfALine(t *testing.T) {
	log := `{"custom_id": "r1", "method": "POST", "url": "/v1/chat/completions", "timestamp": "2026-01-02T10:00:01.5Z", "body": {"model": "m", "messages": [{"role": "user", "content": [{"type": "text", "text": "hello there"}, {"type": "image_url", "image_url": {"url": "x"}}]}], "max_completion_tokens": 9}}
{"custom_id": "r2", "url": "/v1/completions", "timestamp": "2026-01-02T10:00:00Z", "body": {"model": "m", "prompt": [5, 6, 7, 8, 9]}, "response": {"status_code": 200, "body": {"usage": {"completion_tokens": 4}}}}
`
	tr, err := importString(t, log, Options{})
	if err != nil {
		t.Fatal(err)
	}
	r := tr.Requests
	if r[0].InputLength != 5 || r[0].Timestamp != 0 || r[0].OutputLength != 4 {
		t.Errorf("the earlier request (token ids) first: %+v", r[0])
	}
	if r[1].Timestamp.Milliseconds() != 1500 || r[1].OutputLength != 9 || r[1].InputLength != 4 {
		t.Errorf("the chat 1.5 s later: %+v", r[1])
	}
	if tr.Report.Approximate != 1 || tr.Report.TokenIDPrompts != 1 || tr.Report.Arrivals != "logged" {
		t.Errorf("report %+v", tr.Report)
	}
}

// TestBadLines: each bad line stops the import naming the file and its line.
func TestBadLines(t *testing.T) {
	ok := chatLine("s", "u", `, "timestamp": 1000`)
	for _, c := range []struct {
		name, log string
		line      int
		want      error
	}{
		{"not JSON", ok + "hello\n", 2, trace.ErrNotJSON},
		{"not a request", ok + `{"input": "x"}` + "\n", 2, ErrNotRequest},
		{"batch line for embeddings", ok + `{"custom_id": "a", "url": "/v1/embeddings", "body": {"input": "x"}}` + "\n", 2, ErrNotRequest},
		{"bad timestamp", ok + chatLine("s", "u", `, "timestamp": "yesterday"`), 2, ErrBadTimestamp},
		{"timestamp missing", ok + chatLine("s", "u", ""), 2, ErrBadTimestamp},
		{"no timestamps and no rate", chatLine("s", "u", ""), 1, ErrBadTimestamp},
		{"a time out of range", chatLine("s", "u", `, "timestamp": "1500-01-01T00:00:00Z"`), 1, ErrBadTimestamp},
		{"mixed timestamp kinds", ok + chatLine("s", "u", `, "timestamp": "2026-01-02T10:00:00Z"`), 2, ErrBadTimestamp},
		{"negative max_tokens", ok + chatLine("s", "u", `, "timestamp": 2, "max_tokens": -1`), 2, trace.ErrBadValue},
		{"tokenizer fails", ok + ok + chatLine("s", "FAILME", `, "timestamp": 3`) + chatLine("s", "FAILME", `, "timestamp": 4`), 3, nil},
		{"a bad line after a tokenizer failure", ok + chatLine("s", "FAILME", `, "timestamp": 3`) + "hello\n", 2, nil},
	} {
		t.Run(c.name, func(t *testing.T) {
			_, err := Import(context.Background(), strings.NewReader(c.log), "log.jsonl", &wordTokenizer{}, Options{BlockTokens: 4, Concurrency: 3})
			var fe *trace.FormatError
			if !errors.As(err, &fe) || fe.File != "log.jsonl" || fe.Line != c.line {
				t.Fatalf("err %v, want log.jsonl:%d", err, c.line)
			}
			if c.want != nil && !errors.Is(err, c.want) {
				t.Errorf("err %v, want %v", err, c.want)
			}
			if strings.Contains(err.Error(), "\n") {
				t.Errorf("not one line: %q", err)
			}
		})
	}
	if _, err := importString(t, "\n\n", Options{Rate: 1}); err == nil || !strings.Contains(err.Error(), "empty log") {
		t.Errorf("empty log: %v", err)
	}
}

// TestInterruptStops: a done context stops the import with its cause, naming no line as bad.
func TestInterruptStops(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	_, err := Import(ctx, strings.NewReader(chatLine("s", "u", "")), "log.jsonl", &wordTokenizer{}, Options{Rate: 1})
	var fe *trace.FormatError
	if !errors.Is(err, context.Canceled) || errors.As(err, &fe) {
		t.Errorf("err %v, want the interrupt", err)
	}
}

// TestLeadingSpaceAndNotJSON: a line with leading blanks is read; a line opening like an
// object that is not valid JSON is "not a JSON object".
func TestLeadingSpaceAndNotJSON(t *testing.T) {
	if _, err := importString(t, "  "+chatLine("s", "u", ""), Options{Rate: 1}); err != nil {
		t.Errorf("leading blanks: %v", err)
	}
	if _, err := importString(t, `{"model": "m", "messages": [`+"\n", Options{Rate: 1}); !errors.Is(err, trace.ErrNotJSON) {
		t.Errorf("cut JSON: %v", err)
	}
}

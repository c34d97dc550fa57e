package trace

import (
	"bytes"
	"compress/gzip"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"slices"
	"strings"
	"testing"
	"time"
)

// readFormat reads every request of text in format, and what the reader learned.
func readFormat(t testing.TB, text string, name string, format Format, blockTokens int) ([]Request, Info, error) {
	t.Helper()
	r, err := NewFormatReader(strings.NewReader(text), name, format, blockTokens)
	if err != nil {
		return nil, Info{}, err
	}
	reqs, err := ReadAll(r)
	return reqs, r.Info(), err
}

func fixture(t testing.TB, name string) string {
	t.Helper()
	b, err := os.ReadFile(filepath.Join("testdata", name))
	if err != nil {
		t.Fatal(err)
	}
	return string(b)
}

type wantRequest struct {
	line          int
	ms            float64
	input, output int
	ids           []uint64
	text          string
	messages      []Message
}

func checkRequests(t *testing.T, got []Request, want []wantRequest) {
	t.Helper()
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i, w := range want {
		g := got[i]
		ts := time.Duration(w.ms * float64(time.Millisecond))
		if g.Line != w.line || g.Timestamp != ts || g.InputLength != w.input || g.OutputLength != w.output || !slices.Equal(g.HashIDs, w.ids) || g.Text != w.text || !slices.Equal(g.Messages, w.messages) {
			t.Errorf("request %d = %+v, want %+v", i, g, w)
		}
	}
}

// TestFormatsFromTheirDocumentation: each format's sample, written from its documentation,
// is told from its content, maps onto the one request type, and says which fields it had.
func TestFormatsFromTheirDocumentation(t *testing.T) {
	cases := []struct {
		file   string
		format Format
		block  int
		fields []string
		prefix bool
		skip   int
		want   []wantRequest
	}{
		{"bailian.jsonl", FormatBailian, 16, []string{"timestamp", "input_length", "output_length", "hash_ids", "chat_id", "parent_chat_id", "type", "turn"}, true, 0, []wantRequest{
			{1, 500, 40, 12, []uint64{9137, 2210, 5521}, "", nil},
			{2, 1250, 20, 7, []uint64{9137, 774}, "", nil},
			{3, 3000, 70, 30, []uint64{9137, 2210, 5521, 60412, 118}, "", nil},
		}},
		{"burstgpt.csv", FormatBurstGPT, 512, []string{"Timestamp", "Model", "Request tokens", "Response tokens", "Total tokens", "Log Type"}, false, 1, []wantRequest{
			{2, 3000, 310, 45, nil, "", nil},
			{4, 8000, 1204, 250, nil, "", nil}, // line 3's 0 request tokens: skipped and counted
			{5, 21000, 77, 0, nil, "", nil},
		}},
		{"azure.csv", FormatAzure, 512, []string{"TIMESTAMP", "ContextTokens", "GeneratedTokens"}, false, 0, []wantRequest{
			{2, 0, 512, 32, nil, "", nil},
			{3, 1250, 2048, 128, nil, "", nil},
			{4, 1250, 96, 4, nil, "", nil},
		}},
		{"aiperf-sessions.jsonl", FormatMooncake, 512, []string{"timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay", "text_input", "messages"}, true, 0, []wantRequest{
			{1, 0, 1200, 40, []uint64{0, 1, 2}, "", nil},
			{2, 500, 600, 20, []uint64{3, 4}, "", nil},
			{3, 1500, 1800, 30, []uint64{0, 1, 2, 5}, "", nil}, // session a's delay after its first turn
			{4, 2500, 12, 16, nil, "Summarise the plot of a short story in two lines.", nil},
			{5, 3000, 20, 2, nil, "", []Message{{"system", "You answer in one word."}, {"user", "Colour of the sky?"}}}, // session b's, 2.5 s after its 500 ms
		}},
	}
	for _, tc := range cases {
		t.Run(tc.file, func(t *testing.T) {
			text := fixture(t, tc.file)
			for _, named := range []Format{FormatAuto, tc.format} {
				r, err := NewFormatReader(strings.NewReader(text), tc.file, named, 0)
				if err != nil {
					t.Fatal(err)
				}
				got, err := ReadAll(r)
				if err != nil {
					t.Fatal(err)
				}
				for i := range got {
					if len(got[i].HashIDs) == 0 {
						got[i].HashIDs = nil
					}
				}
				checkRequests(t, got, tc.want)
				info := r.Info()
				want := Info{Format: string(tc.format), Detected: named == FormatAuto, Fields: tc.fields, PrefixInformation: tc.prefix, SkippedRows: tc.skip}
				if !infoEqual(info, want) || r.BlockTokens() != tc.block {
					t.Errorf("named %s: info %+v, block %d; want %+v, block %d", named, info, r.BlockTokens(), want, tc.block)
				}
			}
		})
	}
}

func infoEqual(a, b Info) bool {
	return a.Format == b.Format && a.Detected == b.Detected && a.Gzip == b.Gzip && slices.Equal(a.Fields, b.Fields) &&
		a.PrefixInformation == b.PrefixInformation && a.SkippedRows == b.SkippedRows
}

func gzipped(t testing.TB, text string) []byte {
	t.Helper()
	var b bytes.Buffer
	zw := gzip.NewWriter(&b)
	if _, err := zw.Write([]byte(text)); err != nil {
		t.Fatal(err)
	}
	if err := zw.Close(); err != nil {
		t.Fatal(err)
	}
	return b.Bytes()
}

// TestGzipTraces: a compressed trace reads as its content, any format; one cut short stops
// at the line it reached, naming the file.
func TestGzipTraces(t *testing.T) {
	for _, file := range []string{"bailian.jsonl", "burstgpt.csv", "aiperf-sessions.jsonl"} {
		plain, _, err := readFormat(t, fixture(t, file), file, FormatAuto, 0)
		if err != nil {
			t.Fatal(err)
		}
		r, err := NewFormatReader(bytes.NewReader(gzipped(t, fixture(t, file))), file+".gz", FormatAuto, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(r)
		if err != nil || len(got) != len(plain) || !r.Info().Gzip || !r.Info().Detected {
			t.Errorf("%s.gz: %d requests (want %d), info %+v, %v", file, len(got), len(plain), r.Info(), err)
		}
	}

	var long strings.Builder
	for i := range 2000 {
		long.WriteString(`{"timestamp": ` + strings.Repeat("1", 1) + `, "input_length": 600, "output_length": 5, "hash_ids": [` + string(rune('0'+i%10)) + `, 1]}` + "\n")
	}
	z := gzipped(t, long.String())
	for _, cut := range []int{len(z) - 4, len(z) / 2} {
		r, err := NewFormatReader(bytes.NewReader(z[:cut]), "cut.jsonl.gz", FormatAuto, 0)
		if err != nil {
			t.Fatal(err)
		}
		got, err := ReadAll(r)
		var fe *FormatError
		if !errors.As(err, &fe) || !errors.Is(err, ErrCompressed) || fe.File != "cut.jsonl.gz" || fe.Line != len(got)+1 ||
			!strings.Contains(err.Error(), "the compressed file is cut short") {
			t.Errorf("cut at %d of %d: %d requests, %v", cut, len(z), len(got), err)
		}
	}
	// A gzip header that is not one.
	if _, err := NewFormatReader(bytes.NewReader([]byte{0x1f, 0x8b, 1}), "bad.gz", FormatAuto, 0); !errors.Is(err, ErrCompressed) ||
		err.Error() != "bad.gz: bad gzip stream: the compressed file is cut short" {
		t.Errorf("a three-byte gzip file: %v", err)
	}
}

// TestFormatErrorsNameFileAndLine: each format's bad input stops at its first bad line,
// naming the file and the line.
func TestFormatErrorsNameFileAndLine(t *testing.T) {
	const burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n"
	const azure = "TIMESTAMP,ContextTokens,GeneratedTokens\n"
	const bailian = `{"chat_id": 7, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 20, "output_length": 3, "type": "text", "turn": 1, "hash_ids": [5, 6]}` + "\n"
	cases := []struct {
		name   string
		text   string
		format Format
		err    error
		msg    string
	}{
		{"a CSV missing a column", "Timestamp,Model,Request tokens,Total tokens,Log Type\n3,ChatGPT,310,355,Conversation log\n", FormatBurstGPT, ErrMissingField,
			`t.csv:1: missing field: column "Response tokens" (a burstgpt trace's header names "Timestamp", "Request tokens", "Response tokens", "Model", "Total tokens", "Log Type")`},
		{"Azure without GeneratedTokens", "TIMESTAMP,ContextTokens\n2023-11-11 10:00:00,5\n", FormatAzure, ErrMissingField,
			`t.csv:1: missing field: column "GeneratedTokens" (a azure trace's header names "TIMESTAMP", "ContextTokens", "GeneratedTokens")`},
		{"a row short of a field", burst + "3,ChatGPT,310,45,355\n", FormatAuto, ErrNotCSV, "t.csv:2: not a CSV row: wrong number of fields"},
		{"a date that does not parse", azure + "2023-11-11 10:00:00.5,10,2\n2023-11-31 25:00:00,10,2\n", FormatAuto, ErrBadValue,
			`t.csv:3: bad value: TIMESTAMP "2023-11-31 25:00:00" is not a date and time such as 2023-11-16 18:15:46.6805900`},
		{"a date that goes back", azure + "2023-11-11 10:00:01,10,2\n2023-11-11 10:00:00,10,2\n", FormatAuto, ErrNotMonotonic,
			"t.csv:3: timestamp goes back: TIMESTAMP 2023-11-11 10:00:00 is before line 2's (a trace is in arrival order)"},
		{"seconds that go back", burst + "5,ChatGPT,10,1,11,API log\n4,ChatGPT,10,1,11,API log\n", FormatAuto, ErrNotMonotonic,
			"t.csv:3: timestamp goes back: Timestamp 4 is before line 2's (a trace is in arrival order)"},
		{"NaN seconds", burst + "NaN,ChatGPT,10,1,11,API log\n", FormatAuto, ErrBadValue, `t.csv:2: bad value: Timestamp "NaN" is not a number`},
		{"infinite seconds", burst + "+Inf,ChatGPT,10,1,11,API log\n", FormatAuto, ErrBadValue, `t.csv:2: bad value: Timestamp "+Inf" is not a number`},
		{"seconds beyond any trace", burst + "1e300,ChatGPT,10,1,11,API log\n", FormatAuto, ErrBadValue, "t.csv:2: bad value: Timestamp 1e300 is beyond any trace"},
		{"huge request tokens", burst + "1,ChatGPT,1e15,1,11,API log\n", FormatAuto, ErrBadValue,
			"t.csv:2: bad value: Request tokens 1e15 is above the most tokens a request may count (1099511627776)"},
		{"fractional tokens", azure + "2023-11-11 10:00:00,10.5,2\n", FormatAuto, ErrBadValue, "t.csv:2: bad value: ContextTokens 10.5 is not a whole number of tokens"},
		{"Azure's 0 context tokens", azure + "2023-11-11 10:00:00,0,2\n", FormatAuto, ErrBadValue, "t.csv:2: bad value: ContextTokens 0: a prompt has at least 1 token"},
		{"only a header", burst, FormatAuto, ErrEmpty, "t.csv: empty trace: no requests"},
		{"only skipped rows", burst + "1,ChatGPT,0,0,0,API log\n", FormatAuto, ErrEmpty, "t.csv: empty trace: no requests"},
		{"no header at all", "", FormatBurstGPT, ErrMissingField, "t.csv:1: missing field: no header row (a burstgpt trace starts with its column names)"},
		{"a Bailian line without hash_ids", bailian + `{"chat_id": 8, "parent_chat_id": 7, "timestamp": 2, "input_length": 40, "output_length": 3, "type": "text", "turn": 2}` + "\n",
			FormatAuto, ErrMissingField, "t.csv:2: missing field: hash_ids"},
		{"a Bailian line without chat_id", bailian + `{"timestamp": 2, "input_length": 40, "output_length": 3, "hash_ids": [5]}` + "\n",
			FormatAuto, ErrMissingField, "t.csv:2: missing field: chat_id (a Bailian trace's lines each name their chat)"},
		{"Bailian seconds that go back", bailian + `{"chat_id": 8, "timestamp": 1.25, "input_length": 40, "output_length": 3, "hash_ids": [5]}` + "\n",
			FormatAuto, ErrNotMonotonic, "t.csv:2: timestamp goes back: 1250 ms is before line 1's 1500 ms (a trace is in arrival order)"},
		{"Bailian ids beyond 16-token blocks", `{"chat_id": 8, "timestamp": 1, "input_length": 17, "output_length": 3, "hash_ids": [5, 6, 7]}` + "\n",
			FormatAuto, ErrTooManyBlocks, "t.csv:1: more hash ids than the input length spans: 3 hash ids for input_length 17, at most ceil(17/16) = 2 (is the block size 16 tokens?)"},
		{"a delay without a session", `{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}` + "\n" + `{"delay": 5, "input_length": 4, "output_length": 1, "hash_ids": [1]}`,
			FormatAuto, ErrMissingField, "t.csv:2: missing field: timestamp (a delay counts from an earlier line of the same session_id)"},
		{"a delay before its session's first turn", `{"session_id": "s", "delay": 5, "input_length": 4, "output_length": 1, "hash_ids": [1]}`,
			FormatAuto, ErrMissingField, "t.csv:1: missing field: timestamp (a delay counts from an earlier line of the same session_id)"},
		{"a negative delay", `{"session_id": 3, "timestamp": 10, "input_length": 4, "output_length": 1, "hash_ids": [1]}` + "\n" + `{"session_id": 3, "delay": -5, "input_length": 4, "output_length": 1, "hash_ids": [1]}`,
			FormatAuto, ErrBadValue, "t.csv:2: bad value: delay -5 is negative"},
		{"text_input that is not a string", `{"timestamp": 0, "input_length": 4, "output_length": 1, "text_input": 42}`,
			FormatAuto, ErrBadValue, "t.csv:1: bad value: text_input \"42\" is not a non-empty string"},
		{"messages with a tool call", `{"timestamp": 0, "input_length": 4, "output_length": 1, "messages": [{"role": "assistant", "content": "", "tool_calls": []}]}`,
			FormatAuto, ErrBadValue, `t.csv:1: bad value: messages "[{\"role\": \"assistant\", \"content\": \"\", \"t"... is not a non-empty list of {"role", "content"} strings (tool calls and content parts are not replayed)`},
		{"messages as content parts", `{"timestamp": 0, "input_length": 4, "output_length": 1, "messages": [{"role": "user", "content": [{"type": "text", "text": "hi"}]}]}`,
			FormatAuto, ErrBadValue, `t.csv:1: bad value: messages "[{\"role\": \"user\", \"content\": [{\"type\": \""... is not a non-empty list of {"role", "content"} strings (tool calls and content parts are not replayed)`},
		{"messages without a role", `{"timestamp": 0, "input_length": 4, "output_length": 1, "messages": [{"content": "hi"}]}`,
			FormatAuto, ErrBadValue, "t.csv:1: bad value: messages[0] has no role"},
		{"text_input and messages", `{"timestamp": 0, "input_length": 4, "output_length": 1, "text_input": "a", "messages": [{"role": "user", "content": "hi"}]}`,
			FormatAuto, ErrBadValue, "t.csv:1: bad value: text_input and messages: a line gives its prompt one way"},
		{"a CSV named as Mooncake", burst + "3,ChatGPT,310,45,355,Conversation log\n", FormatMooncake, ErrNotJSON,
			"t.csv:1: not a JSON object: invalid character 'T' looking for beginning of value"},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			_, _, err := readFormat(t, tc.text, "t.csv", tc.format, 0)
			if !errors.Is(err, tc.err) || err.Error() != tc.msg {
				t.Errorf("error %q\nwant  %q (%v)", err, tc.msg, tc.err)
			}
		})
	}
	if _, err := NewFormatReader(strings.NewReader(bailian), "b.jsonl", FormatAuto, 512); err == nil ||
		err.Error() != "b.jsonl: a Bailian trace's hash ids name blocks of 16 tokens, not 512 (set block_tokens = 16, or --block-tokens 16)" {
		t.Errorf("a Bailian trace at 512-token blocks: %v", err)
	}
	if _, err := NewFormatReader(strings.NewReader(bailian), "b.jsonl", "sharegpt", 0); err == nil || !strings.Contains(err.Error(), `"sharegpt" is not a trace format`) {
		t.Errorf("an unknown format: %v", err)
	}
}

// TestCSVLineTooLong: a CSV line past MaxLineBytes stops the read instead of being held.
func TestCSVLineTooLong(t *testing.T) {
	text := "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n1,ChatGPT,10,1,11,API log\n" + strings.Repeat("x", MaxLineBytes+10)
	_, _, err := readFormat(t, text, "t.csv", FormatAuto, 0)
	if !errors.Is(err, ErrLineTooLong) || !strings.HasPrefix(err.Error(), "t.csv:3: line too long") {
		t.Errorf("%v", err)
	}
}

// TestAnalyzeWithoutPrefixInformation: a trace of lengths and arrivals has an unknown hit
// rate: null in JSON, said in words, never 0.
func TestAnalyzeWithoutPrefixInformation(t *testing.T) {
	cfg := Config{CapacityTokens: []int64{1e4}, Tiers: &Tiers{GPUTokens: 1e4, HostTokens: 1e5}}
	a, err := AnalyzeFile(context.Background(), filepath.Join("testdata", "burstgpt.csv"), Window{}, cfg)
	if err != nil {
		t.Fatal(err)
	}
	if !a.PrefixUnknown() || a.Requests != 3 || a.PromptTokens != 310+1204+77 || a.Format.SkippedRows != 1 {
		t.Errorf("analysis %+v format %+v", a, a.Format)
	}
	b, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	var got map[string]any
	if err := json.Unmarshal(b, &got); err != nil {
		t.Fatal(err)
	}
	for _, k := range []string{"max_hit_rate", "max_hit_tokens", "distinct_blocks", "tiers"} {
		if v, ok := got[k]; !ok || v != nil {
			t.Errorf("%s = %v (present %v), want null: %s", k, v, ok, b)
		}
	}
	if c := got["capacities"].([]any)[0].(map[string]any); c["hit_rate"] != nil || c["hit_tokens"] != nil || c["capacity_tokens"] != 1e4 {
		t.Errorf("capacity %v", c)
	}
	if f := got["trace_format"].(map[string]any); f["format"] != "burstgpt" || f["prefix_information"] != false {
		t.Errorf("trace_format %v", f)
	}
	var text strings.Builder
	if err := a.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"format burstgpt (told from its content)", "1 rows skipped", "no prefix information", "unknown at every capacity"} {
		if !strings.Contains(text.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, text.String())
		}
	}
	if strings.Contains(text.String(), "%") {
		t.Errorf("text gives a rate:\n%s", text.String())
	}

	// A Bailian trace's hit rate is known, at its own 16-token blocks.
	a, err = AnalyzeFile(context.Background(), filepath.Join("testdata", "bailian.jsonl"), Window{}, Config{})
	if err != nil {
		t.Fatal(err)
	}
	// Request 2 hits its first block (16 tokens), request 3 its first two (32): 48 of 130.
	if a.PrefixUnknown() || a.BlockTokens != 16 || a.MaxHitTokens != 48 || a.PromptTokens != 130 {
		t.Errorf("bailian analysis %+v", a)
	}
}

// rowsReader hands out generated trace text a line at a time, holding none of it.
type rowsReader struct {
	header string
	row    func(i int) string
	n, i   int
	buf    []byte
}

func (r *rowsReader) Read(p []byte) (int, error) {
	for len(r.buf) == 0 {
		switch {
		case r.header != "":
			r.buf, r.header = []byte(r.header), ""
		case r.i < r.n:
			r.buf = []byte(r.row(r.i))
			r.i++
		default:
			return 0, io.EOF
		}
	}
	n := copy(p, r.buf)
	r.buf = r.buf[n:]
	return n, nil
}

// TestReadersStream: reading a large trace keeps no more live memory than its buffers,
// whatever the format (the live heap once collected, not a timing).
func TestReadersStream(t *testing.T) {
	cases := []struct {
		name   string
		header string
		rows   int
		row    func(i int) string
	}{
		{"burstgpt", "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n", 300_000,
			func(i int) string { return fmt.Sprintf("%d,ChatGPT,%d,%d,0,API log\n", i, 1+i%3000, i%500) }},
		{"azure", "TIMESTAMP,ContextTokens,GeneratedTokens\n", 200_000,
			func(i int) string {
				return time.Date(2023, 11, 11, 0, 0, 0, 0, time.UTC).Add(time.Duration(i)*time.Millisecond).Format("2006-01-02 15:04:05.0000000") + fmt.Sprintf(",%d,%d\n", 1+i%3000, i%500)
			}},
		{"bailian", "", 100_000,
			func(i int) string {
				return fmt.Sprintf(`{"chat_id": %d, "parent_chat_id": -1, "timestamp": %d, "input_length": 40, "output_length": 3, "type": "text", "turn": 1, "hash_ids": [%d, 2, 3]}`+"\n", i, i, i)
			}},
		{"mooncake.gz", "", 100_000, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			var in io.Reader = &rowsReader{header: tc.header, row: tc.row, n: tc.rows}
			if tc.row == nil {
				pr, pw := io.Pipe()
				go func() {
					zw := gzip.NewWriter(pw)
					for i := range tc.rows {
						fmt.Fprintf(zw, `{"timestamp": %d, "input_length": 1500, "output_length": 3, "hash_ids": [%d, 2, 3]}`+"\n", i, i)
					}
					zw.Close()
					pw.Close()
				}()
				in = pr
			}
			r, err := NewFormatReader(in, tc.name, FormatAuto, 0)
			if err != nil {
				t.Fatal(err)
			}
			var before, after runtime.MemStats
			runtime.GC()
			runtime.ReadMemStats(&before)
			var req Request
			n := 0
			for {
				err := r.Next(&req)
				if errors.Is(err, io.EOF) {
					break
				}
				if err != nil {
					t.Fatal(err)
				}
				n++
			}
			runtime.GC()
			runtime.ReadMemStats(&after)
			grew := int64(after.HeapAlloc) - int64(before.HeapAlloc)
			if n != tc.rows || grew > 4<<20 {
				t.Errorf("read %d of %d rows; the live heap grew by %d bytes", n, tc.rows, grew)
			}
			runtime.KeepAlive(r)
		})
	}
}

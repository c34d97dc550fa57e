package trace

import (
	"errors"
	"slices"
	"strings"
	"testing"
	"time"
)

// readAll reads every request of text.
func readAll(t testing.TB, text string, blockTokens int) ([]Request, error) {
	t.Helper()
	return ReadAll(NewReader(strings.NewReader(text), "t.jsonl", blockTokens))
}

func TestReaderAcceptsMooncakeLines(t *testing.T) {
	text := `{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}` + "\r\n" +
		"\n   \n" + // blank lines are skipped, and still count as lines
		`{"hash_ids":[0,14],"output_length":0,"input_length":600,"timestamp":12.5,"extra":{"a":[1,"x"]}}` + "\n" +
		`{"timestamp": 12.5, "input_length": 1, "output_length": 3, "hash_ids": []}` // no final newline
	got, err := readAll(t, text, 512)
	if err != nil {
		t.Fatal(err)
	}
	want := []Request{
		{Line: 1, Timestamp: 0, InputLength: 6758, OutputLength: 500, HashIDs: []uint64{0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13}},
		{Line: 4, Timestamp: 12500 * time.Microsecond, InputLength: 600, OutputLength: 0, HashIDs: []uint64{0, 14}},
		{Line: 5, Timestamp: 12500 * time.Microsecond, InputLength: 1, OutputLength: 3, HashIDs: []uint64{}},
	}
	if len(got) != len(want) {
		t.Fatalf("got %d requests, want %d: %+v", len(got), len(want), got)
	}
	for i := range want {
		g, w := got[i], want[i]
		if g.Line != w.Line || g.Timestamp != w.Timestamp || g.InputLength != w.InputLength || g.OutputLength != w.OutputLength || !slices.Equal(g.HashIDs, w.HashIDs) {
			t.Errorf("request %d = %+v, want %+v", i, g, w)
		}
	}
}

func TestReaderErrorsNameFileAndLine(t *testing.T) {
	ok := `{"timestamp": 100, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}` + "\n"
	cases := []struct {
		name  string
		text  string
		block int
		err   error
		msg   string // the whole message, file and line included
	}{
		{"empty file", "", 512, ErrEmpty, "t.jsonl: empty trace: no requests"},
		{"only blank lines", "\n\n  \n", 512, ErrEmpty, "t.jsonl: empty trace: no requests"},
		{"not JSON", ok + "timestamp=3\n", 512, ErrNotJSON, "t.jsonl:2: not a JSON object: invalid character 'i' in literal true (expecting 'r')"},
		{"truncated JSON", ok + `{"timestamp": 3, "input_length"` + "\n", 512, ErrNotJSON, "t.jsonl:2: not a JSON object: unexpected end of JSON input"},
		{"a list, not an object", "[1, 2]\n", 512, ErrNotJSON, `t.jsonl:1: not a JSON object: "[1, 2]"`},
		{"missing timestamp", `{"input_length": 4, "output_length": 1, "hash_ids": [1]}`, 512, ErrMissingField, "t.jsonl:1: missing field: timestamp"},
		{"null input_length", `{"timestamp": 0, "input_length": null, "output_length": 1, "hash_ids": [1]}`, 512, ErrMissingField, "t.jsonl:1: missing field: input_length"},
		{"missing output_length", `{"timestamp": 0, "input_length": 4, "hash_ids": [1]}`, 512, ErrMissingField, "t.jsonl:1: missing field: output_length"},
		{"missing hash_ids", `{"timestamp": 0, "input_length": 4, "output_length": 1}`, 512, ErrMissingField, "t.jsonl:1: missing field: hash_ids"},
		{"negative timestamp", `{"timestamp": -1, "input_length": 4, "output_length": 1, "hash_ids": [1]}`, 512, ErrBadValue, "t.jsonl:1: bad value: timestamp -1 is negative"},
		{"negative output", `{"timestamp": 0, "input_length": 4, "output_length": -2, "hash_ids": [1]}`, 512, ErrBadValue, "t.jsonl:1: bad value: output_length -2 is negative"},
		{"zero input", `{"timestamp": 0, "input_length": 0, "output_length": 1, "hash_ids": []}`, 512, ErrBadValue, "t.jsonl:1: bad value: input_length 0: a prompt has at least 1 token"},
		{"fractional input", `{"timestamp": 0, "input_length": 4.5, "output_length": 1, "hash_ids": [1]}`, 512, ErrBadValue, "t.jsonl:1: bad value: input_length 4.5 is not a whole number of tokens"},
		{"huge input", `{"timestamp": 0, "input_length": 1e15, "output_length": 1, "hash_ids": [1]}`, 512, ErrBadValue, "t.jsonl:1: bad value: input_length 1e15 is above the most tokens a request may count (1099511627776)"},
		{"string timestamp", `{"timestamp": "0", "input_length": 4, "output_length": 1, "hash_ids": [1]}`, 512, ErrBadValue, `t.jsonl:1: bad value: timestamp "\"0\"" is not a number`},
		{"hash_ids not a list", `{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": 7}`, 512, ErrBadValue, `t.jsonl:1: bad value: hash_ids "7" is not a list`},
		{"negative hash id", `{"timestamp": 0, "input_length": 4000, "output_length": 1, "hash_ids": [1, -5]}`, 512, ErrBadValue, `t.jsonl:1: bad value: hash_ids[1] "-5" is not a non-negative integer`},
		{"fractional hash id", `{"timestamp": 0, "input_length": 4000, "output_length": 1, "hash_ids": [1.5]}`, 512, ErrBadValue, `t.jsonl:1: bad value: hash_ids[0] "1.5" is not a non-negative integer`},
		{"hash id over 64 bits", `{"timestamp": 0, "input_length": 4000, "output_length": 1, "hash_ids": [18446744073709551616]}`, 512, ErrBadValue, "t.jsonl:1: bad value: hash_ids[0] does not fit in 64 bits"},
		{"timestamp goes back", ok + ok + `{"timestamp": 99, "input_length": 4, "output_length": 1, "hash_ids": [1]}`, 512, ErrNotMonotonic,
			"t.jsonl:3: timestamp goes back: 99 ms is before line 2's 100 ms (a trace is in arrival order)"},
		// 1024 tokens span exactly 2 blocks of 512; 1025 would span 3.
		{"too many hash ids", `{"timestamp": 0, "input_length": 1024, "output_length": 1, "hash_ids": [1, 2, 3]}`, 512, ErrTooManyBlocks,
			"t.jsonl:1: more hash ids than the input length spans: 3 hash ids for input_length 1024, at most ceil(1024/512) = 2 (is the block size 512 tokens?)"},
		{"a block size too small for the trace", ok, 1024, ErrTooManyBlocks,
			"t.jsonl:1: more hash ids than the input length spans: 2 hash ids for input_length 1024, at most ceil(1024/1024) = 1 (is the block size 1024 tokens?)"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			_, err := readAll(t, c.text, c.block)
			var fe *FormatError
			if !errors.Is(err, c.err) || !errors.As(err, &fe) || fe.File != "t.jsonl" {
				t.Fatalf("error %v, want a FormatError wrapping %v", err, c.err)
			}
			if err.Error() != c.msg {
				t.Errorf("message\n %s\nwant\n %s", err, c.msg)
			}
		})
	}
}

// TestReaderFewerIDsAreAllowed: a request may name fewer blocks than it spans; the rest are
// private (see blockKeys).
func TestReaderFewerIDsAreAllowed(t *testing.T) {
	got, err := readAll(t, `{"timestamp": 0, "input_length": 5000, "output_length": 1, "hash_ids": [3]}`, 512)
	if err != nil || len(got) != 1 || got[0].Blocks(512) != 10 || len(got[0].HashIDs) != 1 {
		t.Fatalf("got %+v, %v", got, err)
	}
}

// TestReaderSkipsAByteOrderMark: a trace saved with a UTF-8 byte-order mark reads as without;
// only at the file's start is it one.
func TestReaderSkipsAByteOrderMark(t *testing.T) {
	const line = `{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [3]}`
	got, err := readAll(t, "\xef\xbb\xbf"+line+"\n"+line, 512)
	if err != nil || len(got) != 2 || got[0].InputLength != 5 {
		t.Fatalf("got %+v, %v", got, err)
	}
	if _, err := readAll(t, line+"\n\xef\xbb\xbf"+line, 512); err == nil {
		t.Error("a byte-order mark on line 2 accepted")
	}
}

func TestReaderRepeatsItsError(t *testing.T) {
	r := NewReader(strings.NewReader("nope\n"+`{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1]}`), "t.jsonl", 512)
	var req Request
	first := r.Next(&req)
	if first == nil || r.Next(&req) != first {
		t.Fatalf("first %v; a reader past an error must keep returning it", first)
	}
}

func TestReaderRejectsHugeLines(t *testing.T) {
	huge := strings.Repeat(" ", MaxLineBytes+1)
	_, err := readAll(t, huge, 512)
	if !errors.Is(err, ErrLineTooLong) || !strings.HasPrefix(err.Error(), "t.jsonl:1: line too long") {
		t.Fatalf("error %v", err)
	}
}

// TestAppendJSONRoundTrips: what the generator writes, the reader reads back unchanged.
func TestAppendJSONRoundTrips(t *testing.T) {
	reqs := []Request{
		{Timestamp: 27482 * time.Millisecond, InputLength: 6955, OutputLength: 52, HashIDs: []uint64{46, 47, 2353}},
		{Timestamp: 27482*time.Millisecond + 250*time.Microsecond, InputLength: 1, OutputLength: 0, HashIDs: nil},
	}
	for _, r := range reqs {
		text := append(r.AppendJSON(nil), '\n')
		got, err := readAll(t, string(text), 512)
		if err != nil || len(got) != 1 || got[0].Timestamp != r.Timestamp || got[0].InputLength != r.InputLength ||
			got[0].OutputLength != r.OutputLength || !slices.Equal(got[0].HashIDs, append([]uint64{}, r.HashIDs...)) {
			t.Errorf("%s read back as %+v, %v", text, got, err)
		}
	}
	if s := string(reqs[0].AppendJSON(nil)); s != `{"timestamp": 27482, "input_length": 6955, "output_length": 52, "hash_ids": [46, 47, 2353]}` {
		t.Errorf("line %s is not in the public traces' style", s)
	}
}

package trace

import (
	"bytes"
	"errors"
	"io"
	"slices"
	"testing"
)

// FuzzReader feeds arbitrary files to the reader: it never panics, every error is a
// *FormatError (or a read error), and every request it accepts keeps the format's rules and
// reads back unchanged from its own JSON.
func FuzzReader(f *testing.F) {
	for _, seed := range []string{
		`{"timestamp": 0, "input_length": 6758, "output_length": 500, "hash_ids": [0, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10, 11, 12, 13]}` + "\n",
		`{"timestamp": 0, "input_length": 1, "output_length": 0, "hash_ids": []}` + "\n" + `{"timestamp": 0.5, "input_length": 513, "output_length": 1, "hash_ids": [1, 2]}`,
		`{"timestamp": 5, "input_length": 4, "output_length": 1, "hash_ids": [1]}` + "\n" + `{"timestamp": 4, "input_length": 4, "output_length": 1, "hash_ids": [1]}`,
		`{"timestamp": 1e3, "input_length": 1e3, "output_length": 2, "hash_ids": [ 18446744073709551615 ]}`,
		`{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1, 2]}`,
		`{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [-1]}`,
		`{"timestamp": 0, "input_length": "4", "output_length": 1, "hash_ids": [1], "x": {"y": [1, {"z": "]"}]}}`,
		`{"timestamp": null, "hash_ids": null}`,
		"\r\n\r\n",
		"[]",
		`{"timestamp": 0, "input_length": 4, "output_length": 1, "hash_ids": [1,]}`,
		"{\"timestamp\": 0, \"input_length\": 4, \"output_length\": 1, \"hash_ids\": [\t1\n]}",
	} {
		f.Add([]byte(seed), 512)
		f.Add([]byte(seed), 1)
	}
	f.Fuzz(func(t *testing.T, data []byte, blockTokens int) {
		if blockTokens <= 0 || blockTokens > 1<<20 {
			blockTokens = 512
		}
		r := NewReader(bytes.NewReader(data), "fuzz.jsonl", blockTokens)
		var req Request
		last := int64(-1)
		for n := 0; ; n++ {
			err := r.Next(&req)
			if errors.Is(err, io.EOF) {
				if n == 0 {
					t.Fatal("io.EOF from a trace without requests: want ErrEmpty")
				}
				return
			}
			if err != nil {
				var fe *FormatError
				if !errors.As(err, &fe) {
					t.Fatalf("error %v (%T) is not a FormatError", err, err)
				}
				return
			}
			if req.InputLength < 1 || req.OutputLength < 0 || req.Timestamp < 0 || int64(req.Timestamp) < last ||
				len(req.HashIDs) > req.Blocks(blockTokens) || req.Line < 1 {
				t.Fatalf("accepted a request that breaks the format: %+v", req)
			}
			last = int64(req.Timestamp)
			back := NewReader(bytes.NewReader(req.AppendJSON(nil)), "back", blockTokens)
			var again Request
			if err := back.Next(&again); err != nil || again.InputLength != req.InputLength ||
				again.OutputLength != req.OutputLength || !slices.Equal(again.HashIDs, req.HashIDs) ||
				again.Timestamp != req.Timestamp {
				t.Fatalf("%+v read back as %+v, %v", req, again, err)
			}
		}
	})
}

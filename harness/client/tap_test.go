package client

import (
	"io"
	"strings"
	"testing"
	"testing/iotest"
)

func TestTailReaderSeesDone(t *testing.T) {
	long := strings.Repeat("data: {\"choices\":[]}\n\n", 20)
	tests := []struct {
		body string
		want bool
	}{
		{long + "data: [DONE]\n\n", true},
		{"data: [DONE]", true},
		{long, false},
		{"", false},
		{long + "data: [DONE]\n\ndata: {}\n\n", false},
	}
	for _, tt := range tests {
		readers := map[string]func(io.Reader) io.Reader{
			"one byte": iotest.OneByteReader,
			"half":     iotest.HalfReader,
			"whole":    func(r io.Reader) io.Reader { return r },
		}
		for name, wrap := range readers {
			tail := &tailReader{inner: io.NopCloser(wrap(strings.NewReader(tt.body)))}
			if _, err := io.Copy(io.Discard, tail); err != nil {
				t.Fatal(err)
			}
			if got := tail.endsWithDone(); got != tt.want {
				t.Errorf("%s reads of %q...: endsWithDone %v, want %v", name, tt.body[max(0, len(tt.body)-30):], got, tt.want)
			}
		}
	}
}

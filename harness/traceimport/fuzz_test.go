package traceimport

import "testing"

// FuzzParseLine: no line makes the parser panic, and a line it accepts has messages with
// roles or a non-empty id prompt (else a text one), a non-negative output length and a
// known kind of timestamp.
func FuzzParseLine(f *testing.F) {
	for _, s := range []string{
		`{"model": "m", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 3, "timestamp": 12.5}`,
		`{"custom_id": "a", "method": "POST", "url": "/v1/completions", "body": {"prompt": [1, 2]}, "response": {"body": {"usage": {"completion_tokens": 2}}}}`,
		`{"messages": [{"role": "user", "content": [{"type": "text", "text": "x"}, {"type": "image_url"}]}], "timestamp": "2026-01-02T03:04:05Z"}`,
		`{"prompt": "x", "timestamp": "1500-01-01T00:00:00Z"}`, `{"prompt": ["one"]}`, `{"prompt": [[1]]}`, `{}`, `[]`, `{"messages": []}`,
	} {
		f.Add([]byte(s))
	}
	f.Fuzz(func(t *testing.T, b []byte) {
		l, err := parseLine(b)
		if err != nil {
			return
		}
		for _, m := range l.chat {
			if m.Role == "" {
				t.Errorf("accepted %q with a message without a role", b)
			}
		}
		if (l.chat != nil && len(l.chat) == 0) || (l.ids != nil && len(l.ids) == 0) {
			t.Errorf("accepted %q with an empty prompt", b)
		}
		if l.output < 0 || (l.stamp != "" && l.stamp != "ms" && l.stamp != "rfc3339") || l.at < 0 {
			t.Errorf("accepted %q with output %d, timestamp %s %d", b, l.output, l.stamp, l.at)
		}
	})
}

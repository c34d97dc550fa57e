package termsafe

import (
	"bytes"
	"errors"
	"fmt"
	"strings"
	"testing"
)

type verdictWord string

func TestString(t *testing.T) {
	cases := []struct{ in, want string }{
		{"Qwen/Qwen3-8B", "Qwen/Qwen3-8B"},
		{"naïve 模型", "naïve 模型"},
		{"m\x1b]0;pwned\x07", `m\x1b]0;pwned\x07`},
		{"m\x1b[2J\x1b[H", `m\x1b[2J\x1b[H`},
		{"m\ngate PASS on replay: ok", `m\ngate PASS on replay: ok`},
		{"a\rb\tc", `a\rb\tc`},
		{"del\x7f", `del\x7f`},
		{"c1\u009b2J", `c1\u009b2J`},
		{"rtl\u202eevil", `rtl\u202eevil`},
		{"ls\u2028x", `ls\u2028x`},
		{"bad\xffutf8", `bad\xffutf8`},
		{"", ""},
	}
	for _, c := range cases {
		if got := String(c.in); got != c.want {
			t.Errorf("String(%q) = %q, want %q", c.in, got, c.want)
		}
		if got := String(c.in); strings.ContainsAny(got, "\x1b\n\r\x07") {
			t.Errorf("String(%q) = %q still holds a control character", c.in, got)
		}
	}
}

func TestArgs(t *testing.T) {
	got := fmt.Sprintf("model %s (max_model_len %d), %v, %s, %q", Args([]any{"x\x1b[2J\ny", 4096, errors.New("body\ngate PASS"), verdictWord("v\r"), "q\n"})...)
	want := `model x\x1b[2J\ny (max_model_len 4096), body\ngate PASS, v\r, "q\\n"`
	if got != want {
		t.Fatalf("got  %s\nwant %s", got, want)
	}
}

func TestWriterKeepsLinesEscapesTheRest(t *testing.T) {
	var b bytes.Buffer
	w := NewWriter(&b)
	fmt.Fprintf(w, "STEP\tVERDICT\nreplay\tcpu_reload\x1b]2;title\x07\n")
	want := "STEP\tVERDICT\nreplay\tcpu_reload\\x1b]2;title\\x07\n"
	if b.String() != want {
		t.Fatalf("got %q, want %q", b.String(), want)
	}
	b.Reset()
	if n, err := w.Write([]byte("plain\n")); n != 6 || err != nil || b.String() != "plain\n" {
		t.Fatalf("plain write: %d %v %q", n, err, b.String())
	}
}

func FuzzString(f *testing.F) {
	for _, s := range []string{"x\x1b[2J", "a\nb", "\u202e", "\xff", "\u009b"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		got := String(s)
		if strings.ContainsAny(got, "\x00\x07\x08\x1b\n\r\x7f\u009b\u202e\u2028") {
			t.Fatalf("String(%q) = %q holds a control character", s, got)
		}
		if String(got) != got {
			t.Fatalf("String is not idempotent on %q", s)
		}
	})
}

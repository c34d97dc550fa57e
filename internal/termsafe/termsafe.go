// Package termsafe makes text that kvbench did not write (a server's model ids, version,
// error bodies and stream errors, and such text read back from records) safe to print on a
// terminal. An escape sequence in it could retitle or clear the terminal or move the cursor,
// and a newline or carriage return could forge a line of kvbench's own ("gate PASS"). Each
// such character is written as a visible Go escape instead (\x1b, \n, \u202e), so the text
// still says what the server sent, on the line where kvbench put it.
//
// Files are not its business: JSON encodes control characters itself and the HTML report
// escapes its text; only console output goes through here.
package termsafe

import (
	"fmt"
	"io"
	"reflect"
	"strings"
	"unicode/utf8"
)

// unsafe reports whether r must not reach a terminal as it is: C0 and C1 control characters
// and DEL (escape sequences, line breaks, backspace), Unicode's line and paragraph separators,
// and the bidirectional overrides and isolates that make a line read differently from its
// bytes.
func unsafe(r rune) bool {
	switch {
	case r < 0x20, r == 0x7f, r >= 0x80 && r <= 0x9f:
		return true
	case r == '\u2028', r == '\u2029':
		return true
	case r >= '\u202a' && r <= '\u202e', r >= '\u2066' && r <= '\u2069', r == '\u200e', r == '\u200f', r == '\u061c':
		return true
	}
	return false
}

// String returns s with every character a terminal would act on (control characters,
// line breaks, bidirectional controls) and every byte that is not UTF-8 written as a Go
// escape, so s prints on one line as inert text.
func String(s string) string {
	if !needsEscape(s, false) {
		return s
	}
	return escape(s, false)
}

// needsEscape reports whether s holds anything escape would change; keepLines spares '\n'
// and '\t'.
func needsEscape(s string, keepLines bool) bool {
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		if r == utf8.RuneError && size == 1 {
			return true
		}
		if unsafe(r) && !(keepLines && (r == '\n' || r == '\t')) {
			return true
		}
		i += size
	}
	return false
}

func escape(s string, keepLines bool) string {
	var b strings.Builder
	b.Grow(len(s) + 8)
	for i := 0; i < len(s); {
		r, size := utf8.DecodeRuneInString(s[i:])
		switch {
		case r == utf8.RuneError && size == 1:
			fmt.Fprintf(&b, `\x%02x`, s[i])
		case keepLines && (r == '\n' || r == '\t'):
			b.WriteRune(r)
		case r == '\n':
			b.WriteString(`\n`)
		case r == '\r':
			b.WriteString(`\r`)
		case r == '\t':
			b.WriteString(`\t`)
		case r < 0x80 && unsafe(r):
			fmt.Fprintf(&b, `\x%02x`, r)
		case unsafe(r):
			fmt.Fprintf(&b, `\u%04x`, r)
		default:
			b.WriteString(s[i : i+size])
		}
		i += size
	}
	return b.String()
}

// Args returns args with each string (of any string type) and error replaced by its text
// passed through String, for a Printf whose format is kvbench's and whose arguments may not
// be. Other values (numbers, durations) are left as they are.
func Args(args []any) []any {
	out := make([]any, len(args))
	for i, a := range args {
		switch v := a.(type) {
		case string:
			out[i] = String(v)
		case error:
			out[i] = String(v.Error())
		default:
			rv := reflect.ValueOf(a)
			if st, ok := a.(fmt.Stringer); ok && rv.Kind() == reflect.String {
				out[i] = String(st.String())
			} else if rv.Kind() == reflect.String {
				out[i] = String(rv.String())
			} else {
				out[i] = a
			}
		}
	}
	return out
}

// Writer passes text to w with the characters String escapes written as escapes, except
// newlines and tabs: it is for multi-line reports (tables, summaries) whose lines are
// kvbench's but whose cells may hold a server's text. A write is escaped on its own, so a
// multi-byte character split across two writes is escaped byte by byte; the reports
// written through it write whole lines.
type Writer struct{ w io.Writer }

// NewWriter returns a Writer writing to w.
func NewWriter(w io.Writer) *Writer { return &Writer{w: w} }

// Write writes p, escaped, and reports len(p) written when all of it was.
func (tw *Writer) Write(p []byte) (int, error) {
	s := string(p)
	if !needsEscape(s, true) {
		return tw.w.Write(p)
	}
	if _, err := io.WriteString(tw.w, escape(s, true)); err != nil {
		return 0, err
	}
	return len(p), nil
}

// Package textout writes a text report in one write, so that a failing writer (a closed
// pipe, a full disk) is an error its caller sees, not a failure lost among many Fprintf
// calls whose results nobody checks.
package textout

import (
	"bytes"
	"io"
)

// Write fills a buffer with fill and writes it to w, returning the write's error.
func Write(w io.Writer, fill func(w io.Writer)) error {
	var b bytes.Buffer
	fill(&b)
	_, err := w.Write(b.Bytes())
	return err
}

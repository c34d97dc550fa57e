package proc

import (
	"os"
	"testing"
)

// TestDevNullIsNotATerminal: /dev/null is a character device, but live console lines
// (and their cost) are for terminals only.
func TestDevNullIsNotATerminal(t *testing.T) {
	f, err := os.OpenFile(os.DevNull, os.O_WRONLY, 0)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if IsTerminal(f) {
		t.Fatal("/dev/null taken for a terminal")
	}
	tty, err := os.OpenFile("/dev/tty", os.O_WRONLY, 0)
	if err != nil {
		return // no controlling terminal (CI): the negative case is what matters
	}
	defer tty.Close()
	if !IsTerminal(tty) {
		t.Fatal("/dev/tty not taken for a terminal")
	}
}

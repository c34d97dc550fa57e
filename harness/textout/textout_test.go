package textout

import (
	"errors"
	"fmt"
	"io"
	"strings"
	"testing"
)

type failing struct{ err error }

func (f failing) Write([]byte) (int, error) { return 0, f.err }

func TestWrite(t *testing.T) {
	var b strings.Builder
	if err := Write(&b, func(w io.Writer) { fmt.Fprintln(w, "a"); fmt.Fprintln(w, "b") }); err != nil || b.String() != "a\nb\n" {
		t.Fatalf("%q %v", b.String(), err)
	}
	full := errors.New("no space left on device")
	if err := Write(failing{full}, func(w io.Writer) { fmt.Fprintln(w, "a") }); !errors.Is(err, full) {
		t.Fatalf("err %v, want the writer's", err)
	}
}

package proc

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

func TestBrokenPipe(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	defer w.Close()
	if BrokenPipe(int(w.Fd())) {
		t.Fatal("a pipe with its reader open reads as broken")
	}
	r.Close()
	if !BrokenPipe(int(w.Fd())) {
		t.Fatal("a pipe whose reader closed reads as fine")
	}
	f, err := os.Create(filepath.Join(t.TempDir(), "out"))
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	if BrokenPipe(int(f.Fd())) {
		t.Fatal("a regular file reads as broken")
	}
}

// TestSocketSIGPIPEDoesNotStopARun: a SIGPIPE while stdout and stderr are open (as when
// net/http writes to a connection the server reset) is not a stop signal. The SIGTERM sent
// after it is what stops the context (pending signals are delivered lowest number first,
// SIGPIPE before SIGTERM).
func TestSocketSIGPIPEDoesNotStopARun(t *testing.T) {
	if BrokenPipe(1, 2) {
		t.Skip("the test's own stdout or stderr is a closed pipe")
	}
	ctx, stop := WithStopSignals(context.Background())
	defer stop()
	syscall.Kill(syscall.Getpid(), syscall.SIGPIPE)
	syscall.Kill(syscall.Getpid(), syscall.SIGTERM)
	select {
	case <-ctx.Done():
	case <-time.After(10 * time.Second):
		t.Fatal("SIGTERM did not stop the context within 10 s")
	}
	if cause := context.Cause(ctx).Error(); !strings.Contains(cause, "SIGTERM") {
		t.Fatalf("stopped by %q, want SIGTERM", cause)
	}
}

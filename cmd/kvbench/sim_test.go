package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"
)

// syncBuffer lets the test read what a running command writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

func TestSimServesUntilCancelled(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout syncBuffer
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, []string{"sim", "--profile", "tiny", "--addr", "127.0.0.1:0"}, &stdout, io.Discard)
	}()

	urlPattern := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)`)
	var url string
	for range 3000 { // up to 30 s for the server to print its address, on a loaded machine
		if m := urlPattern.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("sim exited early: %v\n%s", err, stdout.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if url == "" {
		t.Fatalf("no URL printed:\n%s", stdout.String())
	}
	if !strings.Contains(stdout.String(), "tiny: model tiny-sim") {
		t.Errorf("no profile summary:\n%s", stdout.String())
	}
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %v", err)
	}
	resp.Body.Close()

	cancel()
	select {
	case err := <-done:
		if err != nil {
			t.Errorf("sim returned %v after cancel, want nil", err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("sim did not stop after cancel")
	}
}

func TestSimUsageErrors(t *testing.T) {
	t.Setenv("KVBENCH_TEST_EMPTY_KEY", "")
	for _, args := range [][]string{
		{"sim", "--addr", "0.0.0.0:8000"},
		{"sim", "--addr", ":8000"},
		{"sim", "--addr", "192.0.2.1:8000"},
		{"sim", "--profile", "no-such-profile", "--addr", "127.0.0.1:0"},
		{"sim", "--speed", "-1"},
		{"sim", "--api-key-env", "KVBENCH_TEST_EMPTY_KEY"},
		{"sim", "extra"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		var ee *exitError
		if !errors.As(err, &ee) || ee.code != exitUsage {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

func TestSimHelpShowsExample(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"sim", "-h"}, &out, io.Discard)
	if !errors.Is(err, errHelpShown) || !strings.Contains(out.String(), "Example:") || !strings.Contains(out.String(), "--allow-remote") {
		t.Errorf("err %v, help:\n%s", err, out.String())
	}
}

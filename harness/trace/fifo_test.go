package trace

import (
	"context"
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

var errStopped = errors.New("received SIGINT")

// analyzeUntilStopped analyses path in the background, stops it with errStopped once
// ready returns, and returns AnalyzeFile's error; a wait past the guard fails the test.
func analyzeUntilStopped(t *testing.T, path string, ready func()) error {
	t.Helper()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	done := make(chan error, 1)
	go func() {
		_, err := AnalyzeFile(ctx, path, Window{}, Config{})
		done <- err
	}()
	ready()
	cancel(errStopped)
	select {
	case err := <-done:
		return err
	case <-time.After(30 * time.Second):
		t.Fatal("AnalyzeFile did not return after its context was cancelled")
		return nil
	}
}

// TestAnalyzeFIFOStaysInterruptible: a pipe named as the trace is read, and a stop ends
// both the wait for a writer and the wait for data.
func TestAnalyzeFIFOStaysInterruptible(t *testing.T) {
	fifo := filepath.Join(t.TempDir(), "trace.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	// No writer: the open waits.
	if err := analyzeUntilStopped(t, fifo, func() {}); !errors.Is(err, errStopped) {
		t.Errorf("waiting for a writer: %v, want the stop's cause", err)
	}

	// A writer that sends a line and then nothing: the read waits. (A new pipe: the open
	// above still waits on the first, and would take this writer.)
	fifo = filepath.Join(t.TempDir(), "slow.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	var w *os.File
	err := analyzeUntilStopped(t, fifo, func() {
		var err error
		w, err = os.OpenFile(fifo, os.O_WRONLY, 0) // returns once AnalyzeFile opened it
		if err != nil {
			t.Fatal(err)
		}
		if _, err := w.WriteString(`{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}` + "\n"); err != nil {
			t.Fatal(err)
		}
	})
	if !errors.Is(err, errStopped) || !strings.Contains(err.Error(), fifo) {
		t.Errorf("waiting for data: %v, want the stop's cause naming the file", err)
	}
	w.Close() // else the next reader never sees the end

	// A writer that sends a whole trace: the pipe is read like a file.
	fifo = filepath.Join(t.TempDir(), "whole.jsonl")
	if err := syscall.Mkfifo(fifo, 0o600); err != nil {
		t.Fatal(err)
	}
	go func() {
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0)
		if err != nil {
			return
		}
		w.WriteString(`{"timestamp": 0, "input_length": 5, "output_length": 1, "hash_ids": [1]}` + "\n")
		w.Close()
	}()
	a, err := AnalyzeFile(context.Background(), fifo, Window{}, Config{})
	if err != nil || a.Requests != 1 {
		t.Errorf("a whole trace through a pipe: %+v, %v", a, err)
	}
}

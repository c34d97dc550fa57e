package cli

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

func TestExitCode(t *testing.T) {
	tests := []struct {
		err      error
		code     int
		wantLine string
	}{
		{nil, ExitOK, ""},
		{ErrHelpShown, ExitOK, ""},
		{errors.New("boom"), ExitRuntime, "kvbench: boom\n"},
		{Usagef("bad %s", "flag"), ExitUsage, "kvbench: bad flag\n"},
		{fmt.Errorf("wrapped: %w", WithCode(ExitGateFailed, errors.New("gate"))), ExitGateFailed, "kvbench: wrapped: gate\n"},
		// One line, credentials redacted, escapes neutralised.
		{errors.New("get http://u:secret@h/x\nsecond \x1b[31m"), ExitRuntime, ""},
	}
	for _, tc := range tests {
		var out bytes.Buffer
		if code := ExitCode(tc.err, &out); code != tc.code {
			t.Errorf("ExitCode(%v) = %d, want %d", tc.err, code, tc.code)
		}
		if tc.wantLine != "" && out.String() != tc.wantLine {
			t.Errorf("ExitCode(%v) printed %q, want %q", tc.err, out.String(), tc.wantLine)
		}
	}
	var out bytes.Buffer
	ExitCode(errors.New("get http://u:secret@h/x\nsecond \x1b[31m"), &out)
	if s := out.String(); strings.Contains(s, "secret") || strings.Count(s, "\n") != 1 || strings.ContainsRune(s, 0x1b) {
		t.Errorf("error line %q leaks a credential, a line break or an escape", s)
	}
	if WithCode(ExitUsage, nil) != nil || UsageError(nil) != nil {
		t.Error("a nil error must stay nil")
	}
}

func TestParseTakesFlagsAnywhere(t *testing.T) {
	var help bytes.Buffer
	fs := NewFlagSet("demo", "FILE [flags]", "kvbench demo x", &help)
	n := fs.Int("n", 1, "a count")
	var format string
	FormatVar(fs, &format, "output", "text", "json")
	var labels StringList
	fs.Var(&labels, "label", "repeatable")
	args, err := Parse(fs, []string{"a", "-n", "3", "b", "--format", "json", "--label", "x=1", "--label", "y=2"})
	if err != nil {
		t.Fatal(err)
	}
	if strings.Join(args, ",") != "a,b" || *n != 3 || format != "json" || labels.String() != "x=1,y=2" {
		t.Fatalf("args %q n %d format %q labels %q", args, *n, format, labels.String())
	}
	_, err = Parse(fs, []string{"--format", "xml"})
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "--format must be text or json") {
		t.Fatalf("bad --format: %v", err)
	}
	if _, err := Parse(fs, []string{"-h"}); !errors.Is(err, ErrHelpShown) {
		t.Fatalf("-h: %v", err)
	}
	if h := help.String(); !strings.Contains(h, "Usage: kvbench demo FILE [flags]") || !strings.Contains(h, "Example:\n  kvbench demo x") || !strings.Contains(h, "-n int") {
		t.Fatalf("help:\n%s", h)
	}
}

func TestOutputJSONNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "out.json")
	var stdout bytes.Buffer
	if err := OutputJSON("--out", path, map[string]int{"a": 1}, &stdout); err != nil {
		t.Fatal(err)
	}
	if b, _ := os.ReadFile(path); string(b) != "{\n  \"a\": 1\n}\n" || stdout.String() != path+"\n" {
		t.Fatalf("file %q stdout %q", b, stdout.String())
	}
	err := OutputJSON("--out", path, 2, io.Discard)
	var ee *ExitError
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "exists") {
		t.Fatalf("second write: %v", err)
	}
	err = OutputJSON("--out", filepath.Join(dir, "no", "such.json"), 2, io.Discard)
	if !errors.As(err, &ee) || ee.Code != ExitUsage || !strings.Contains(err.Error(), "directory does not exist") {
		t.Fatalf("missing directory: %v", err)
	}
	stdout.Reset()
	if err := OutputJSON("--out", "", []int{1}, &stdout); err != nil || stdout.String() != "[\n  1\n]\n" {
		t.Fatalf("stdout %q, %v", stdout.String(), err)
	}
}

func TestRunDispatches(t *testing.T) {
	var got []string
	Register(Command{Name: "test-echo", Summary: "echo", Run: func(_ context.Context, args []string, _, _ io.Writer) error {
		got = args
		return nil
	}})
	defer delete(Commands, "test-echo")
	if err := Run(context.Background(), []string{"test-echo", "a", "b"}, io.Discard, io.Discard); err != nil || strings.Join(got, " ") != "a b" {
		t.Fatalf("args %q, %v", got, err)
	}
	var out bytes.Buffer
	if err := Run(context.Background(), []string{"--version"}, &out, io.Discard); err != nil || !strings.HasPrefix(out.String(), "kvbench ") {
		t.Fatalf("--version: %q, %v", out.String(), err)
	}
	out.Reset()
	if err := Run(context.Background(), nil, &out, io.Discard); ExitCode(err, io.Discard) != ExitUsage || !strings.Contains(out.String(), "test-echo") {
		t.Fatalf("no command: %v, usage %q", err, out.String())
	}
	for _, args := range [][]string{{"nope"}, {"help", "nope"}} {
		if err := Run(context.Background(), args, io.Discard, io.Discard); ExitCode(err, io.Discard) != ExitUsage {
			t.Errorf("%q: %v", args, err)
		}
	}
}

func TestInputErrorKeepsAStop(t *testing.T) {
	err := errors.New("read: bad line")
	if ExitCode(InputError(context.Background(), err), io.Discard) != ExitUsage {
		t.Error("a bad input must exit 2")
	}
	stopped, cancel := context.WithCancel(context.Background())
	cancel()
	if got := InputError(stopped, err); got != err {
		t.Errorf("after a stop: %v, want the error unmarked (exit 1)", got)
	}
}

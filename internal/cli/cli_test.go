package cli

import (
	"bytes"
	"context"
	"encoding/json"
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

// TestJSONFailure: under --format json a failure is one JSON document on stdout (its
// message, kind, place and exit code) as well as the stderr line; a command that printed
// its document before failing keeps it as the only one; text output prints nothing there.
func TestJSONFailure(t *testing.T) {
	Register(Command{Name: "jsonfail-test", Run: func(_ context.Context, args []string, stdout, _ io.Writer) error {
		fs := NewFlagSet("jsonfail-test", "", "", stdout)
		var format string
		FormatVar(fs, &format, "output", "text", "json")
		rest, err := Parse(fs, args)
		if err != nil {
			return err
		}
		if len(rest) > 0 && rest[0] == "printed" {
			if err := PrintJSON(stdout, Document{Schema: "x/v1", Value: map[string]bool{"regression": true}}); err != nil {
				return err
			}
			return WithCode(ExitRegression, errors.New("1 regression(s)"))
		}
		return UsageError(placed("scenario.toml:3", errors.New("scenario.toml:3: bad key; get http://u:secret@h/x")))
	}})
	defer delete(Commands, "jsonfail-test")
	for _, args := range [][]string{{"--format", "json"}, {"--format=json"}, {"-format", "json", "x"}} {
		var stdout, stderr bytes.Buffer
		err := Run(context.Background(), append([]string{"jsonfail-test"}, args...), &stdout, &stderr)
		if codeOf(err) != ExitUsage {
			t.Fatalf("%v: %v", args, err)
		}
		var doc ErrorDoc
		if err := json.Unmarshal(stdout.Bytes(), &doc); err != nil {
			t.Fatalf("%v: stdout %q: %v", args, stdout.String(), err)
		}
		if doc.Schema != ErrorSchema || doc.ExitCode != ExitUsage || doc.Error.Kind != "bad_input" || doc.Error.Place != "scenario.toml:3" ||
			!strings.HasPrefix(doc.Error.Message, "scenario.toml:3: bad key") || strings.Contains(doc.Error.Message, "secret") {
			t.Errorf("%v: %+v", args, doc)
		}
	}
	var stdout, stderr bytes.Buffer
	if err := Run(context.Background(), []string{"jsonfail-test", "--format", "json", "--nope"}, &stdout, &stderr); codeOf(err) != ExitUsage || !strings.Contains(stdout.String(), `"exit_code": 2`) {
		t.Errorf("a bad flag under --format json: %v, stdout %q", err, stdout.String())
	}
	stdout.Reset()
	if err := Run(context.Background(), []string{"jsonfail-test", "printed", "--format", "json"}, &stdout, &stderr); codeOf(err) != ExitRegression {
		t.Fatal(err)
	}
	var v map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &v); err != nil || v["schema"] != "x/v1" || v["regression"] != true {
		t.Errorf("the command's own document must stay the one on stdout: %q (%v)", stdout.String(), err)
	}
	stdout.Reset()
	if err := Run(context.Background(), []string{"jsonfail-test"}, &stdout, &stderr); err == nil || stdout.Len() != 0 {
		t.Errorf("text output: %v, stdout %q", err, stdout.String())
	}
	stdout.Reset()
	if err := Run(context.Background(), []string{"no-such-command", "--format", "json"}, &stdout, &stderr); err == nil || !strings.Contains(stdout.String(), `"unknown command`) {
		t.Errorf("unknown command under --format json: stdout %q", stdout.String())
	}
}

// TestDocumentPutsSchemaFirst: a printed document leads with its schema, the value's keys
// after it, and an empty object is the schema alone.
func TestDocumentPutsSchemaFirst(t *testing.T) {
	data, err := json.Marshal(Document{Schema: "s/v1", Value: struct {
		A string `json:"a"`
	}{"x"}})
	if err != nil || string(data) != `{"schema":"s/v1","a":"x"}` {
		t.Errorf("%s %v", data, err)
	}
	if data, err = json.Marshal(Document{Schema: "s/v1", Value: struct{}{}}); err != nil || string(data) != `{"schema":"s/v1"}` {
		t.Errorf("%s %v", data, err)
	}
	if _, err = json.Marshal(Document{Schema: "s/v1", Value: []int{1}}); err == nil {
		t.Error("a list is no document")
	}
}

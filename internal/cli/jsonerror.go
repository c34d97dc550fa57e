package cli

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"strings"
)

// ErrorSchema is the schema of the document a failed command prints on stdout under
// --format json.
const ErrorSchema = "anvil-serving.kvbench-error/v1"

// ErrorDoc is what a script reads on stdout when a command asked for JSON fails: the
// stderr line's message, what kind of failure it is (by its exit code) and, where the error
// names one, the place at fault (a file and line, a flag).
type ErrorDoc struct {
	Schema   string      `json:"schema"`
	Error    ErrorDetail `json:"error"`
	ExitCode int         `json:"exit_code"`
}

// ErrorDetail is the error itself.
type ErrorDetail struct {
	Message string `json:"message"`
	Kind    string `json:"kind"`
	Place   string `json:"place,omitempty"`
}

// Placer is an error that names the place at fault ("scenario.toml:12", "trace.jsonl:3").
type Placer interface{ Place() string }

// kinds names each exit code's failure.
var kinds = map[int]string{
	ExitRuntime:    "runtime",
	ExitUsage:      "bad_input",
	ExitGateFailed: "gate_failed",
	ExitRegression: "regression",
	ExitPushFailed: "push_failed",
}

// ErrorDocOf is err's document; err is not nil.
func ErrorDocOf(err error) ErrorDoc {
	code := codeOf(err)
	d := ErrorDoc{Schema: ErrorSchema, ExitCode: code, Error: ErrorDetail{Message: message(err), Kind: kinds[code]}}
	if d.Error.Kind == "" {
		d.Error.Kind = "runtime"
	}
	if code == ExitRuntime && errors.Is(err, context.Canceled) {
		d.Error.Kind = "interrupted"
	}
	var p Placer
	if errors.As(err, &p) {
		d.Error.Place = p.Place()
	}
	return d
}

// wantsJSON reports whether a command line asks for --format json (or names a command
// whose only output is JSON): then a failure is also a JSON document on stdout.
func wantsJSON(c Command, args []string) bool {
	if c.AlwaysJSON {
		return true
	}
	for i, a := range args {
		if a == "--" {
			return false
		}
		name, value, hasValue := strings.Cut(strings.TrimLeft(a, "-"), "=")
		if !strings.HasPrefix(a, "-") || name != "format" {
			continue
		}
		if !hasValue && i+1 < len(args) {
			value = args[i+1]
		}
		if value == "json" {
			return true
		}
	}
	return false
}

// countingWriter is stdout under --format json, to tell whether the command printed its
// document before it failed.
type countingWriter struct {
	w io.Writer
	n int64
}

func (c *countingWriter) Write(p []byte) (int, error) {
	n, err := c.w.Write(p)
	c.n += int64(n)
	return n, err
}

// runJSON runs c under --format json: a failure before the command printed anything prints
// its ErrorDoc on stdout. A failure that is a result (a regression, a failed gate) comes
// after the command's own document, which stays the one document on stdout: it says so
// itself, and the exit code says it again.
func runJSON(ctx context.Context, c Command, args []string, stdout, stderr io.Writer) error {
	cw := &countingWriter{w: stdout}
	err := c.Run(ctx, args, cw, stderr)
	if codeOf(err) != ExitOK && cw.n == 0 {
		data, merr := json.MarshalIndent(ErrorDocOf(err), "", "  ")
		if merr == nil {
			_, _ = stdout.Write(append(data, '\n')) // stderr carries the error anyway
		}
	}
	return err
}

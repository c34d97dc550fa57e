// Package cli is the kvbench command's plumbing, kept apart from its commands so that
// cmd/kvbench holds only what each command takes and says (flags, help, examples): exit
// codes and the one-line error that maps to each, flag sets whose -h shows an example,
// --format, JSON output, where progress lines go, the version, and the refusals of files
// the user named.
package cli

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"runtime/debug"
	"strings"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/profile"
	"github.com/anvil-serving/kvbench/internal/termsafe"
)

// Exit codes. A failed gate or regression is a result, not a crash, so each has its own code;
// so has a failed push, after which the run's records are on disk and 'kvbench push' retries.
const (
	ExitOK         = 0
	ExitRuntime    = 1
	ExitUsage      = 2
	ExitGateFailed = 3
	ExitRegression = 4
	ExitPushFailed = 5
)

// ExitError carries the exit code a failure maps to.
type ExitError struct {
	Code int
	Err  error
}

func (e *ExitError) Error() string { return e.Err.Error() }
func (e *ExitError) Unwrap() error { return e.Err }

// WithCode marks err with an exit code; nil stays nil.
func WithCode(code int, err error) error {
	if err == nil {
		return nil
	}
	return &ExitError{Code: code, Err: err}
}

// UsageError marks err as bad input (flags, files, server answers): exit code 2.
func UsageError(err error) error { return WithCode(ExitUsage, err) }

// Usagef is UsageError of a formatted error.
func Usagef(format string, args ...any) error { return UsageError(fmt.Errorf(format, args...)) }

// InputError is err as bad input (UsageError), unless ctx was stopped: an interrupted read
// of a server or a file stays an interrupt (exit 1), whatever error the stop caused.
func InputError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return UsageError(err)
}

// ErrHelpShown is returned when a command printed its help on -h: exit 0.
var ErrHelpShown = errors.New("help shown")

// ExitCode prints err as one line on stderr and returns the code it maps to.
func ExitCode(err error, stderr io.Writer) int {
	code := codeOf(err)
	if code == ExitOK {
		return code
	}
	fmt.Fprintf(stderr, "kvbench: %s\n", termsafe.String(message(err)))
	return code
}

// codeOf is the exit code err maps to.
func codeOf(err error) int {
	if err == nil || errors.Is(err, ErrHelpShown) {
		return ExitOK
	}
	var ee *ExitError
	if errors.As(err, &ee) {
		return ee.Code
	}
	return ExitRuntime
}

// message is err as one line without URL credentials, whatever error quoted one: the last
// line of defense, for stderr and the JSON error alike (stderr also drops escape sequences).
func message(err error) string {
	return redact.Text(strings.ReplaceAll(err.Error(), "\n", "; "))
}

// OutputError says in one line why a file the user named with flag (-o, --out, a profile)
// was not written: refused by the output rule (inside a run directory, or a kvbench record
// there), already there, or in a directory that does not exist, each bad input (exit 2).
// Other failures (a full disk) stay runtime errors.
func OutputError(flag, path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runs.ErrInsideRun), errors.Is(err, runs.ErrIsRecord):
		return UsageError(placed(path, fmt.Errorf("%s: %w", flag, err))) // err names the path
	case errors.Is(err, fs.ErrExist):
		return UsageError(placed(path, fmt.Errorf("%s %s exists: kvbench never overwrites a file it writes; choose another path or remove it", flag, path)))
	case errors.Is(err, fs.ErrNotExist):
		return UsageError(placed(path, fmt.Errorf("%s %s: its directory does not exist", flag, path)))
	}
	return err
}

// placedError is an error at a place its message names (a file the user gave).
type placedError struct {
	place string
	error
}

func (e placedError) Place() string { return e.place }
func (e placedError) Unwrap() error { return e.error }

func placed(place string, err error) error { return placedError{place, err} }

// PrintJSON writes v as indented JSON, the --format json output of every command.
func PrintJSON(w io.Writer, v any) error {
	enc := json.NewEncoder(w)
	enc.SetIndent("", "  ")
	return enc.Encode(v)
}

// Document is Value printed as JSON with "schema" as its first key: a document kvbench
// prints whose type does not carry its schema itself (the type is also a record's part).
type Document struct {
	Schema string
	Value  any
}

// MarshalJSON writes {"schema": ..., Value's keys...}; Value must encode as an object
// without a schema key.
func (d Document) MarshalJSON() ([]byte, error) {
	var body bytes.Buffer
	enc := json.NewEncoder(&body)
	enc.SetEscapeHTML(false) // a selector's characters as the user wrote them
	if err := enc.Encode(d.Value); err != nil {
		return nil, err
	}
	obj := bytes.TrimSpace(body.Bytes())
	if len(obj) < 2 || obj[0] != '{' {
		return nil, fmt.Errorf("document of schema %s: not a JSON object", d.Schema)
	}
	schema, _ := json.Marshal(d.Schema)
	out := append([]byte(`{"schema":`), schema...)
	if rest := bytes.TrimSpace(obj[1:]); len(rest) > 0 && rest[0] != '}' {
		out = append(out, ',')
	}
	return append(out, obj[1:]...), nil
}

// ConsoleFor is where a command's progress lines go: stderr when stdout carries JSON.
func ConsoleFor(format string, stdout, stderr io.Writer) io.Writer {
	if format == "json" {
		return stderr
	}
	return stdout
}

// Emit prints v as JSON (format json) or through text, on a writer that keeps a server's
// escape sequences off the terminal.
func Emit(stdout io.Writer, format string, v any, text func(io.Writer) error) error {
	if format == "json" {
		return PrintJSON(stdout, v)
	}
	return text(termsafe.NewWriter(stdout))
}

// OutputJSON writes v, a record, to the file path names (never over an existing one) and
// prints the path, or prints v when path is empty; flag names the option in errors.
func OutputJSON(flag, path string, v any, stdout io.Writer) error {
	if path == "" {
		return PrintJSON(stdout, v)
	}
	if _, err := runs.WriteOutputJSON(path, v); err != nil {
		return OutputError(flag, path, err)
	}
	_, err := fmt.Fprintln(stdout, path)
	return err
}

// RunOnDirs parses a command's run directories, builds its record from them (an error is bad
// input) and writes it atomically to out (never over an existing file), or prints it.
func RunOnDirs[T any](fs *flag.FlagSet, args []string, out *string, stdout io.Writer, build func(dirs []string) (T, error)) error {
	dirs, err := Parse(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return Usagef("%s: name at least one run directory", fs.Name())
	}
	v, err := build(dirs)
	if err != nil {
		return UsageError(err)
	}
	return OutputJSON("--out", *out, v, stdout)
}

// LoadRuns loads run directories; a directory that is not a readable run is bad input.
func LoadRuns(dirs []string) ([]*runs.Run, error) {
	rs, err := runs.LoadAll(dirs)
	return rs, UsageError(err)
}

// Profiles are the --cpuprofile and --memprofile flags of a long command.
type Profiles struct{ CPU, Mem string }

// Register adds the flags to fs.
func (p *Profiles) Register(fs *flag.FlagSet) {
	fs.StringVar(&p.CPU, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof); KVBENCH_PPROF=DIR sets both profiles")
	fs.StringVar(&p.Mem, "memprofile", "", "write an allocation profile of the whole run to this file at the end")
}

// Start starts the profiles the flags (or $KVBENCH_PPROF) ask for; stop ends and writes them.
func (p Profiles) Start() (stop func() error, err error) {
	stop, err = profile.Start(profile.File{Flag: "--cpuprofile", Path: p.CPU}, profile.File{Flag: "--memprofile", Path: p.Mem})
	if errors.Is(err, profile.ErrBadInput) {
		return nil, UsageError(err)
	}
	return stop, err
}

// BuildVersion is set at build time with -ldflags "-X .../internal/cli.BuildVersion=...";
// otherwise the module's build info is used.
var BuildVersion = ""

// Version is kvbench's version, as records and --version show it.
func Version() string {
	if BuildVersion != "" {
		return BuildVersion
	}
	if bi, ok := debug.ReadBuildInfo(); ok {
		v := bi.Main.Version
		for _, s := range bi.Settings {
			if s.Key == "vcs.revision" && len(s.Value) >= 12 {
				v += "+" + s.Value[:12]
			}
		}
		if v != "" {
			return v
		}
	}
	return "devel"
}

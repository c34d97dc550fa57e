// Command kvbench proves, with the server's own counters, whether KV-cache offloading on an
// OpenAI-compatible LLM server stores, evicts and reloads KV blocks, and how fast.
package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"os"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/internal/proc"
	"github.com/anvil-serving/kvbench/internal/termsafe"
)

// Exit codes. A failed gate or regression is a result, not a crash, so each has its own code;
// so has a failed push, after which the run's records are on disk and 'kvbench push' retries.
const (
	exitOK         = 0
	exitRuntime    = 1
	exitUsage      = 2
	exitGateFailed = 3
	exitRegression = 4
	exitPushFailed = 5
)

// command is one kvbench subcommand. run gets the arguments after the subcommand's name.
type command struct {
	name    string
	summary string
	run     func(ctx context.Context, args []string, stdout, stderr io.Writer) error
}

// commands is filled by register calls in each subcommand's file.
var commands = map[string]command{}

func register(c command) { commands[c.name] = c }

func main() {
	ctx, stop := proc.WithStopSignals(context.Background())
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	// The error is printed while SIGPIPE is still caught: once stop releases it, a write to
	// a closed stderr would kill the process with 141 instead of the code.
	code := exitCode(err, os.Stderr)
	stop()
	os.Exit(code)
}

func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	if len(args) > 0 && (args[0] == "--version" || args[0] == "-version") {
		args = append([]string{"version"}, args[1:]...)
	}
	if len(args) > 1 && args[0] == "help" {
		// kvbench help COMMAND is kvbench COMMAND -h.
		c, ok := commands[args[1]]
		if !ok {
			return usageErrorf("help: unknown command %q (see 'kvbench help')", args[1])
		}
		return c.run(ctx, []string{"-h"}, stdout, stderr)
	}
	if len(args) == 0 || args[0] == "-h" || args[0] == "--help" || args[0] == "help" {
		err := printUsage(stdout)
		if len(args) == 0 {
			return usageErrorf("no command given")
		}
		return err
	}
	c, ok := commands[args[0]]
	if !ok {
		return usageErrorf("unknown command %q (see 'kvbench help')", args[0])
	}
	return c.run(ctx, args[1:], stdout, stderr)
}

// printUsage writes kvbench's help in one write, returning the write's error.
func printUsage(out io.Writer) error {
	return textout.Write(out, writeUsage)
}

func writeUsage(w io.Writer) {
	names := make([]string, 0, len(commands))
	for n := range commands {
		names = append(names, n)
	}
	sort.Strings(names)
	fmt.Fprintln(w, "kvbench proves KV-cache offload (store, eviction, reload) with server counters.")
	fmt.Fprintln(w, "\nUsage: kvbench COMMAND [flags] [args]\n\nCommands:")
	for _, n := range names {
		fmt.Fprintf(w, "  %-12s %s\n", n, commands[n].summary)
	}
	fmt.Fprintln(w, "\nExample:\n  kvbench demo                      # the whole job on the embedded engine, no GPU")
	fmt.Fprintln(w, "  kvbench plan eviction-6x150k-replay")
	fmt.Fprintln(w, "\nRun 'kvbench help COMMAND' (or 'kvbench COMMAND -h') for a command's flags; 'kvbench --version' for the version.")
}

// exitError carries the exit code a failure maps to.
type exitError struct {
	code int
	err  error
}

func (e *exitError) Error() string { return e.err.Error() }
func (e *exitError) Unwrap() error { return e.err }

// usageError marks err as bad input (flags, files, server answers): exit code 2.
func usageError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitUsage, err: err}
}

func usageErrorf(format string, args ...any) error {
	return usageError(fmt.Errorf(format, args...))
}

// exitCode prints err as one line on stderr and returns the code it maps to.
func exitCode(err error, stderr io.Writer) int {
	if err == nil {
		return exitOK
	}
	if errors.Is(err, errHelpShown) {
		return exitOK
	}
	code := exitRuntime
	var ee *exitError
	if errors.As(err, &ee) {
		code = ee.code
	}
	// The last line of defense: no URL credentials on the terminal, whatever error quoted one,
	// and no escape sequence or line break of a server's text (an error body, a model id).
	msg := termsafe.String(redact.Text(strings.ReplaceAll(err.Error(), "\n", "; ")))
	fmt.Fprintf(stderr, "kvbench: %s\n", msg)
	return code
}

// errHelpShown is returned when a command printed its help on -h.
var errHelpShown = errors.New("help shown")

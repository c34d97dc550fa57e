// Command kvbench proves, with the server's own counters, whether KV-cache offloading on an
// OpenAI-compatible LLM server stores, evicts and reloads KV blocks, and how fast.
//
// This package holds what each command takes and says: its flags, help, examples and the
// exit code each outcome maps to. The plumbing (dispatch, flag parsing, output) is
// internal/cli; the work is in the packages each command calls.
package main

import (
	"context"
	"io"
	"os"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/proc"
)

func main() {
	ctx, stop := proc.WithStopSignals(context.Background())
	err := run(ctx, os.Args[1:], os.Stdout, os.Stderr)
	// The error is printed while SIGPIPE is still caught: once stop releases it, a write to
	// a closed stderr would kill the process with 141 instead of the code.
	code := cli.ExitCode(err, os.Stderr)
	stop()
	os.Exit(code)
}

// run is kvbench with args (without the program's name): what main and the tests call.
func run(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	return cli.Run(ctx, args, stdout, stderr)
}

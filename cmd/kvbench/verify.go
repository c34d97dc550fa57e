package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/anvil-serving/kvbench/harness/claims"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "verify", summary: "check a recipe's claimed numbers against runs (exit 3 unless all reproduced)", run: runVerify})
}

func runVerify(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("verify", "CLAIM.toml RUN_DIR... [flags]",
		"kvbench verify claims/ds4-offload16.toml results/eviction-6x150k-replay-20260802T061907Z\nkvbench verify claim.toml results/a results/b --format json --out results/verify.json", stdout)
	var format string
	formatVar(fs, &format, "output: text (table) or json (the verify record)", "text", "json")
	out := fs.String("out", "", "also write the verify record to this file (never overwritten)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return usageErrorf("verify: want a claim file and at least one run directory, got %d arguments", len(args))
	}
	rec, err := claims.VerifyFiles(args[0], args[1:], kvbenchVersion(), time.Now())
	if err != nil {
		return usageError(err)
	}
	if *out != "" {
		if _, err := runs.WriteOutputJSON(*out, rec); err != nil {
			return outputError("verify: --out", *out, err)
		}
	}
	if err := emit(stdout, format, rec, rec.WriteText); err != nil {
		return err
	}
	if !rec.AllReproduced {
		return &exitError{code: exitGateFailed, err: fmt.Errorf("%s", rec.Summary())}
	}
	return nil
}

// loadRunDirs loads run directories; an unreadable or changed run is bad input (exit 2).
func loadRunDirs(dirs []string) ([]*runs.Run, error) {
	rs, err := runs.LoadAll(dirs)
	return rs, usageError(err)
}

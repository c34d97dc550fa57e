package main

import (
	"context"
	"fmt"
	"io"
	"time"

	"github.com/anvil-serving/kvbench/harness/claims"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
)

func init() {
	cli.Register(cli.Command{Name: "verify", Summary: "check a recipe's claimed numbers against runs (exit 3 unless all reproduced)", Run: runVerify})
}

func runVerify(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("verify", "CLAIM.toml RUN_DIR... [flags]",
		"kvbench verify claims/ds4-offload16.toml results/eviction-6x150k-replay-20260802T061907Z\nkvbench verify claim.toml results/a results/b --format json --out results/verify.json", stdout)
	var format string
	cli.FormatVar(fs, &format, "output: text (table) or json (the verify record)", "text", "json")
	out := fs.String("out", "", "also write the verify record to this file (never overwritten)")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return cli.Usagef("verify: want a claim file and at least one run directory, got %d arguments", len(args))
	}
	rec, err := claims.VerifyFiles(args[0], args[1:], cli.Version(), time.Now())
	if err != nil {
		return cli.UsageError(err)
	}
	if *out != "" {
		if _, err := runs.WriteOutputJSON(*out, rec); err != nil {
			return cli.OutputError("verify: --out", *out, err)
		}
	}
	if err := cli.Emit(stdout, format, rec, rec.WriteText); err != nil {
		return err
	}
	if !rec.AllReproduced {
		return &cli.ExitError{Code: cli.ExitGateFailed, Err: fmt.Errorf("%s", rec.Summary())}
	}
	return nil
}

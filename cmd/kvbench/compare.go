package main

import (
	"cmp"
	"context"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/export"
)

func init() {
	cli.Register(cli.Command{Name: "compare", Summary: "compare a candidate run (or sweep) with a baseline (exit 4 on regression)", Run: runCompare})
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var push export.PushFlags
	fs := cli.NewFlagSet("compare", "BASELINE_RUN CANDIDATE_RUN [flags]",
		"kvbench compare baselines/eviction-6x150k-replay results/eviction-6x150k-replay-20260802T061907Z\nkvbench compare base/ cand/ --format markdown >> \"$GITHUB_STEP_SUMMARY\"\nkvbench compare base/ cand/ --push http://pushgateway:9091 --push-label cluster=eu1   # the result as series, for alerts\nkvbench compare baselines/chat-sweep results/chat-capacity-offload16-sweep-20260803T020000Z   # two sweeps: capacity", stdout)
	push.Register(fs, "push the comparison's series (kvbench_compare_regressions, ...) to this Prometheus Pushgateway, grouped under job "+export.CompareJob+" and the candidate's identity; a failed push exits 5 unless a regression (4) outranks it")
	var format string
	cli.FormatVar(fs, &format, "output: text (table), json or markdown", "text", "json", "markdown")
	tolerance := fs.Float64("tolerance", compare.DefaultTolerance, "relative change below which nothing counts (0.10 = 10%), whatever the noise")
	allow := fs.Bool("allow-mismatch", false, "compare runs of different scenarios, models or prompt identities anyway")
	allowIncomplete := fs.Bool("allow-incomplete", false, "compare a run that did not finish (interrupted, failed or killed) anyway")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return cli.Usagef("compare: want a baseline and a candidate run directory, got %d arguments", len(args))
	}
	if *tolerance < 0 {
		return cli.Usagef("compare: --tolerance must not be negative")
	}
	if err := push.Check(); err != nil {
		return err
	}
	if runs.IsSweep(args[0]) || runs.IsSweep(args[1]) {
		if push.URL != "" {
			return cli.Usagef("compare: --push compares runs, not sweeps")
		}
		res, err := compare.SweepDirs(args[0], args[1], *tolerance, *allow)
		if err != nil {
			return cli.UsageError(err)
		}
		return cmp.Or(res.Write(stdout, format), regressionError(res.Regressions()))
	}
	loaded, err := cli.LoadRuns(args)
	if err != nil {
		return err
	}
	res, err := compare.Compare(loaded[0], loaded[1], compare.Options{Tolerance: *tolerance, AllowMismatch: *allow, AllowIncomplete: *allowIncomplete})
	if err != nil {
		return cli.UsageError(err) // refused: an unfinished, warm or different run
	}
	cmpErr := regressionError(res.Regressions())
	if format != "text" { // the table says it; beside a document, stderr does
		_ = res.WriteWarnings(stderr)
	}
	if err := res.Write(stdout, format); err != nil || push.URL == "" {
		return cmp.Or(err, cmpErr)
	}
	if err := export.PushComparison(ctx, res, loaded[1], push.Opts); err != nil {
		if cmpErr != nil { // a regression (exit 4) outranks a failed push (5)
			return fmt.Errorf("%w; also: the comparison's push failed: %v", cmpErr, err)
		}
		return pushError(err)
	}
	fmt.Fprintf(stderr, "pushed the comparison to %s\n", redact.URL(push.URL))
	return cmpErr
}

// regressionError marks a comparison's regressions: exit 4.
func regressionError(err error) error { return cli.WithCode(cli.ExitRegression, err) }

package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/report"
)

func init() {
	cli.Register(cli.Command{Name: "report", Summary: "write one self-contained HTML report of runs (two of one scenario: compared; of different scenarios: side by side)", Run: runReport})
}

func runReport(_ context.Context, args []string, stdout, _ io.Writer) error {
	flags := cli.NewFlagSet("report", "RUN_DIR... -o report.html [flags]",
		"kvbench report results/eviction-6x150k-replay-20260802T061907Z -o report.html\nkvbench report baselines/nightly results/nightly-20260803T020000Z -o nightly.html   # baseline first: with the comparison\nkvbench report results/eviction-6x150k-replay-* results/offload8-control-* -o study.html   # a study: side by side\nkvbench report results/chat-capacity-offload16-sweep-20260803T020000Z -o sweep.html   # a sweep: every level", stdout)
	out := flags.String("o", "", "the HTML file to write (never overwritten)")
	title := flags.String("title", "", "page title (default: the scenario names)")
	tolerance := flags.Float64("tolerance", compare.DefaultTolerance, "with two runs of one scenario: the comparison's relative tolerance")
	args, err := cli.Parse(flags, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return cli.Usagef("report: name at least one run directory")
	}
	if *out == "" {
		return cli.Usagef("report: -o FILE is required (the HTML file to write)")
	}
	loaded, sweeps, err := report.LoadDirs(args)
	if err != nil {
		return cli.UsageError(err)
	}
	page, err := report.Page(*title, loaded, sweeps, *tolerance, time.Now())
	if page == nil {
		return err
	}
	if _, err := runs.WriteOutput(*out, page); err != nil {
		return cli.OutputError("report: -o", *out, err)
	}
	abs, _ := filepath.Abs(*out)
	fmt.Fprintf(stdout, "report: %s\n", abs)
	return cli.UsageError(err) // nil, or the runs do not compare: the page says why
}

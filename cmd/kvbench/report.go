package main

import (
	"bytes"
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/report"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "report", summary: "write one self-contained HTML report of runs (two of one scenario: compared; of different scenarios: side by side)", run: runReport})
}

func runReport(_ context.Context, args []string, stdout, _ io.Writer) error {
	flags := newFlagSet("report", "RUN_DIR... -o report.html [flags]",
		"kvbench report results/eviction-6x150k-replay-20260802T061907Z -o report.html\nkvbench report baselines/nightly results/nightly-20260803T020000Z -o nightly.html   # baseline first: with the comparison\nkvbench report results/eviction-6x150k-replay-* results/offload8-control-* -o study.html   # a study: side by side\nkvbench report results/chat-capacity-offload16-sweep-20260803T020000Z -o sweep.html   # a sweep: every level", stdout)
	out := flags.String("o", "", "the HTML file to write (never overwritten)")
	title := flags.String("title", "", "page title (default: the scenario names)")
	tolerance := flags.Float64("tolerance", compare.DefaultTolerance, "with two runs of one scenario: the comparison's relative tolerance")
	args, err := parseFlags(flags, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usageErrorf("report: name at least one run directory")
	}
	if *out == "" {
		return usageErrorf("report: -o FILE is required (the HTML file to write)")
	}
	if args, err = expandSweeps(args); err != nil {
		return err
	}
	loaded, err := loadRunDirs(args)
	if err != nil {
		return err
	}
	// Two runs of one scenario are compared; a report shows what differs rather than refusing:
	// a model or prompt mismatch is listed on the page. Runs of different scenarios are a
	// study, shown side by side.
	data, err := report.Build(*title, time.Now().UTC().Format(time.RFC3339), loaded, compare.Options{Tolerance: *tolerance, AllowMismatch: true, AllowIncomplete: true})
	if err != nil {
		return err
	}
	var buf bytes.Buffer
	if err := report.Render(&buf, data); err != nil {
		return fmt.Errorf("rendering the report: %w", err)
	}
	if _, err := runs.WriteOutput(*out, buf.Bytes()); err != nil {
		return outputError("report: -o", *out, err)
	}
	abs, _ := filepath.Abs(*out)
	fmt.Fprintf(stdout, "report: %s\n", abs)
	return nil
}

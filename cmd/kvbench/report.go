package main

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"path/filepath"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/report"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "report", summary: "write one self-contained HTML report of runs (two runs: with their comparison)", run: runReport})
}

func runReport(_ context.Context, args []string, stdout, _ io.Writer) error {
	flags := newFlagSet("report", "RUN_DIR... -o report.html [flags]",
		"kvbench report results/eviction-6x150k-replay-20260802T061907Z -o report.html\nkvbench report baselines/nightly results/nightly-20260803T020000Z -o nightly.html   # baseline first: with the comparison", stdout)
	out := flags.String("o", "", "the HTML file to write (never overwritten)")
	title := flags.String("title", "", "page title (default: the scenario names)")
	tolerance := flags.Float64("tolerance", compare.DefaultTolerance, "with two runs: the comparison's relative tolerance")
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
	loaded, err := loadRunDirs(args)
	if err != nil {
		return err
	}
	var cmp *compare.Result
	if len(loaded) == 2 {
		// A report shows what differs rather than refusing: mismatches are listed on the page.
		if cmp, err = compare.Compare(loaded[0], loaded[1], compare.Options{Tolerance: *tolerance, AllowMismatch: true, AllowIncomplete: true}); err != nil {
			return err
		}
	}
	if *title == "" {
		var names []string
		for _, r := range loaded {
			names = append(names, r.Scenario.Name)
		}
		*title = "kvbench report: " + strings.Join(names, " vs ")
	}
	data := report.Collect(*title, time.Now().UTC().Format(time.RFC3339), loaded, cmp)
	var buf bytes.Buffer
	if err := report.Render(&buf, data); err != nil {
		return fmt.Errorf("rendering the report: %w", err)
	}
	if _, err := runs.WriteFile(*out, buf.Bytes()); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return usageErrorf("report: %s exists: choose another -o or remove it", *out)
		}
		return err
	}
	abs, _ := filepath.Abs(*out)
	fmt.Fprintf(stdout, "report: %s\n", abs)
	return nil
}

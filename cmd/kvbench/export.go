package main

import (
	"context"
	"errors"
	"io"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/export"
)

func init() {
	cli.Register(cli.Command{Name: "export", Summary: "write runs' and capacity sweeps' series as OpenMetrics text (node_exporter textfile collector)", Run: runExport})
}

func runExport(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("export", "RUN_OR_SWEEP_DIR... [flags]",
		"kvbench export --format openmetrics results/smoke-20260803T020000Z\nkvbench export results/smoke-20260803T020000Z -o /var/lib/node_exporter/textfile/kvbench.prom --label cluster=eu1", stdout)
	var format string
	cli.FormatVar(fs, &format, "output: openmetrics (the text format node_exporter's textfile collector reads)", "openmetrics")
	out := fs.String("o", "", "write to this file atomically (temp file, then rename over it) instead of stdout; never a kvbench record or a file in a run directory")
	series := export.NewSeriesFlags(fs) // --label, --per-request-series
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return cli.Usagef("export: want one or more run or sweep directories")
	}
	extra, err := series.Labels()
	if err != nil {
		return cli.UsageError(err)
	}
	loaded, sweeps, err := export.LoadDirs(args) // runs and capacity sweeps
	if err != nil {
		return err
	}
	text, err := export.OpenMetrics(loaded, sweeps, extra, series.PerRequest)
	if errors.Is(err, export.ErrDuplicate) {
		return cli.Usagef("export: %w (runs of one scenario, recipe and endpoint: export one, or tell them apart with --label)", err)
	} else if err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(text)
		return err
	}
	// A collector reading the file never sees half of it; it runs as another user.
	return cli.OutputError("export: -o", *out, runs.ReplaceOutput(*out, text, 0o644))
}

package main

import (
	"context"
	"errors"
	"io"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/export"
)

func init() {
	register(command{name: "export", summary: "write runs' series as OpenMetrics text (node_exporter textfile collector)", run: runExport})
}

func runExport(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("export", "RUN_DIR... [flags]",
		"kvbench export --format openmetrics results/smoke-20260803T020000Z\nkvbench export results/smoke-20260803T020000Z -o /var/lib/node_exporter/textfile/kvbench.prom --label cluster=eu1", stdout)
	var format string
	formatVar(fs, &format, "output: openmetrics (the text format node_exporter's textfile collector reads)", "openmetrics")
	out := fs.String("o", "", "write to this file atomically (temp file, then rename over it) instead of stdout; never a kvbench record or a file in a run directory")
	var labels stringList
	fs.Var(&labels, "label", "NAME=VALUE added to every series, e.g. cluster=eu1 (repeatable)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) == 0 {
		return usageErrorf("export: want one or more run directories")
	}
	extra, err := export.ParseLabels("--label", labels)
	if err != nil {
		return usageError(err)
	}
	loaded, err := loadRunDirs(args)
	if err != nil {
		return err
	}
	text, err := export.OpenMetrics(loaded, extra)
	if errors.Is(err, export.ErrDuplicate) {
		return usageErrorf("export: %w (runs of one scenario, recipe and endpoint: export one, or tell them apart with --label)", err)
	} else if err != nil {
		return err
	}
	if *out == "" {
		_, err := stdout.Write(text)
		return err
	}
	// A collector reading the file never sees half of it; it runs as another user.
	return outputError("export: -o", *out, runs.ReplaceOutput(*out, text, 0o644))
}

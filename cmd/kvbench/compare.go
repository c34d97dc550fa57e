package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/export"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "compare", summary: "compare a candidate run (or sweep) with a baseline (exit 4 on regression)", run: runCompare})
}

func runCompare(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var push pushFlags
	fs := newFlagSet("compare", "BASELINE_RUN CANDIDATE_RUN [flags]",
		"kvbench compare baselines/eviction-6x150k-replay results/eviction-6x150k-replay-20260802T061907Z\nkvbench compare base/ cand/ --format markdown >> \"$GITHUB_STEP_SUMMARY\"\nkvbench compare base/ cand/ --push http://pushgateway:9091 --push-label cluster=eu1   # the result as series, for alerts\nkvbench compare baselines/chat-sweep results/chat-capacity-offload16-sweep-20260803T020000Z   # two sweeps: capacity", stdout)
	push.register(fs, "push the comparison's series (kvbench_compare_regressions, ...) to this Prometheus Pushgateway, grouped under job "+export.CompareJob+" and the candidate's identity; a failed push exits 5 unless a regression (4) outranks it")
	format := fs.String("format", "text", "output: text (table), json or markdown")
	tolerance := fs.Float64("tolerance", compare.DefaultTolerance, "relative change below which nothing counts (0.10 = 10%), whatever the noise")
	allow := fs.Bool("allow-mismatch", false, "compare runs of different scenarios, models or prompt identities anyway")
	allowIncomplete := fs.Bool("allow-incomplete", false, "compare a run that did not finish (interrupted, failed or killed) anyway")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return usageErrorf("compare: want a baseline and a candidate run directory, got %d arguments", len(args))
	}
	if *format != "text" && *format != "json" && *format != "markdown" {
		return usageErrorf("compare: --format must be text, json or markdown")
	}
	if *tolerance < 0 {
		return usageErrorf("compare: --tolerance must not be negative")
	}
	if err := push.check(); err != nil {
		return err
	}
	if runs.IsSweep(args[0]) || runs.IsSweep(args[1]) {
		if push.url != "" {
			return usageErrorf("compare: --push compares runs, not sweeps")
		}
		return compareSweeps(args, *format, *tolerance, *allow, stdout)
	}
	loaded, err := loadRunDirs(args)
	if err != nil {
		return err
	}
	res, err := compare.Compare(loaded[0], loaded[1], compare.Options{Tolerance: *tolerance, AllowMismatch: *allow, AllowIncomplete: *allowIncomplete})
	if err != nil {
		if errors.Is(err, compare.ErrMismatch) || errors.Is(err, compare.ErrIncomplete) {
			return usageError(err)
		}
		return err
	}
	switch *format {
	case "json":
		if err := printJSON(stdout, res); err != nil {
			return err
		}
	case "markdown":
		if err := res.WriteMarkdown(stdout); err != nil {
			return err
		}
	default:
		if err := res.WriteText(stdout); err != nil {
			return err
		}
	}
	if push.url == "" {
		return compareError(res)
	}
	return pushComparison(ctx, &push, res, loaded[1], stderr)
}

// pushComparison pushes res's series, grouped by the candidate's identity and the labels, and
// folds a failed push into compare's result: a regression (exit 4) outranks it (exit 5).
func pushComparison(ctx context.Context, p *pushFlags, res *compare.Result, candidate *runs.Run, stderr io.Writer) error {
	cmpErr := compareError(res)
	fams, err := export.CompareFamilies(res, nil)
	if err == nil {
		err = export.PushFamilies(ctx, fams, export.CompareJob, append(export.Identity(candidate), p.parsed...), p.options())
	}
	if err == nil {
		fmt.Fprintf(stderr, "pushed the comparison to %s\n", redact.URL(p.url))
		return cmpErr
	}
	if cmpErr != nil {
		return fmt.Errorf("%w; also: the comparison's push failed: %v", cmpErr, err)
	}
	return pushError(err)
}

// compareError maps a regression to its exit code.
func compareError(res *compare.Result) error {
	if !res.Regression {
		return nil
	}
	return &exitError{code: exitRegression, err: fmt.Errorf("%d regression(s): %s", len(res.Findings), strings.Join(res.Findings, "; "))}
}

// compareSweeps compares two capacity sweeps (directories holding sweep.json).
func compareSweeps(dirs []string, format string, tolerance float64, allow bool, stdout io.Writer) error {
	var loaded []*record.Sweep
	for _, d := range dirs {
		s, err := runs.LoadSweep(d)
		if err != nil {
			return usageError(err)
		}
		loaded = append(loaded, s)
	}
	res, err := compare.CompareSweeps(loaded[0], loaded[1], dirs[0], dirs[1], tolerance, allow)
	if err != nil {
		if errors.Is(err, compare.ErrMismatch) || errors.Is(err, compare.ErrIncomplete) {
			return usageError(err)
		}
		return err
	}
	switch format {
	case "json":
		if err := printJSON(stdout, res); err != nil {
			return err
		}
	case "markdown":
		if err := res.WriteMarkdown(stdout); err != nil {
			return err
		}
	default:
		if err := res.WriteText(stdout); err != nil {
			return err
		}
	}
	if res.Regression {
		return &exitError{code: exitRegression, err: fmt.Errorf("capacity regression: %s", strings.Join(res.Findings, "; "))}
	}
	return nil
}

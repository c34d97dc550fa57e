package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/study"
)

func init() {
	register(command{name: "summarize", summary: "merge run directories into one kv-offload-replay/v1 study record", run: runSummarize})
	register(command{name: "accounting", summary: "write the kv-accounting-summary/v1 of run directories", run: runAccounting})
}

// writeOrPrint writes v atomically to out (never over an existing file), or prints it.
func writeOrPrint(out string, v any, stdout io.Writer) error {
	if out == "" {
		return printJSON(stdout, v)
	}
	if _, err := runs.WriteOutputJSON(out, v); err != nil {
		return outputError("--out", out, err)
	}
	fmt.Fprintln(stdout, out)
	return nil
}

func baseOf(out string) string {
	if out == "" {
		return ""
	}
	abs, err := filepath.Abs(filepath.Dir(out))
	if err != nil {
		return ""
	}
	return abs
}

func absDirs(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		if a, err := filepath.Abs(d); err == nil {
			out[i] = a
		} else {
			out[i] = d
		}
	}
	return out
}

func runSummarize(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("summarize", "RUN_DIR... [--out FILE]", "kvbench summarize results/eviction-6x150k-replay-20261130T101500Z results/offload8-control-20261130T103000Z --out study.json", stdout)
	out := fs.String("out", "", "write the study record to FILE (default: print it)")
	allowMixed := fs.Bool("allow-mixed", false, "merge runs even if their model, runtime or topology differ")
	allowIncomplete := fs.Bool("allow-incomplete", false, "merge a run that did not finish (interrupted, failed or killed) anyway")
	dirs, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return usageErrorf("summarize: name at least one run directory")
	}
	runs, err := loadRunDirs(absDirs(dirs))
	if err != nil {
		return err
	}
	// A study record has no status of its own: a run that did not finish would pass for one
	// that did.
	for _, r := range runs {
		if r.Status != record.StatusCompleted && !*allowIncomplete {
			return usageErrorf("summarize: %s is %s (%s): not every step was measured (--allow-incomplete to merge it anyway)", r.Dir, r.Status, r.StopReason)
		}
	}
	o, err := study.Summarize(runs, baseOf(*out), *allowMixed)
	if err != nil {
		return usageError(err)
	}
	return writeOrPrint(*out, o, stdout)
}

func runAccounting(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("accounting", "RUN_DIR... [--pool-bytes-per-gpu N --gpus N] [--out FILE]",
		"kvbench accounting results/*-2026*/ --pool-bytes-per-gpu 7650410496 --gpus 2 --pool-source plans/load-preview.json --out accounting.json", stdout)
	out := fs.String("out", "", "write the summary to FILE (default: print it)")
	var spec study.PoolSpec
	fs.Int64Var(&spec.BytesPerGPU, "pool-bytes-per-gpu", 0, "configured KV pool bytes per GPU (default: derive from the server's token slots x measured bytes per stored token)")
	fs.IntVar(&spec.GPUs, "gpus", 1, "GPUs the pool spans")
	fs.StringVar(&spec.SourcePath, "pool-source", "", "file the configured byte figure came from (recorded with its sha256)")
	dirs, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(dirs) == 0 {
		return usageErrorf("accounting: name at least one run directory")
	}
	if spec.GPUs < 1 || spec.BytesPerGPU < 0 {
		return usageErrorf("accounting: --gpus must be at least 1 and --pool-bytes-per-gpu not negative")
	}
	runs, err := loadRunDirs(absDirs(dirs))
	if err != nil {
		return err
	}
	o, err := study.Accounting(runs, spec, baseOf(*out))
	if err != nil {
		return usageError(err)
	}
	return writeOrPrint(*out, o, stdout)
}

package main

import (
	"context"
	"errors"
	"io"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/study"
)

func init() {
	cli.Register(cli.Command{Name: "summarize", Summary: "merge run directories into one kv-offload-replay/v1 study record", Run: runSummarize})
	cli.Register(cli.Command{Name: "accounting", Summary: "write the kv-accounting-summary/v1 of run directories", Run: runAccounting})
}

func runSummarize(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("summarize", "RUN_DIR... [--out FILE]", "kvbench summarize results/eviction-6x150k-replay-20261130T101500Z results/offload8-control-20261130T103000Z --out study.json", stdout)
	out := fs.String("out", "", "write the study record to FILE (default: print it)")
	allowMixed := fs.Bool("allow-mixed", false, "merge runs even if their model, runtime or topology differ")
	allowIncomplete := fs.Bool("allow-incomplete", false, "merge a run that did not finish (interrupted, failed or killed) anyway")
	shards := fs.Bool("shards", false, "join the runs of shards 1..N (--shard K/N) of one trace scenario into one "+study.ShardsSchema+" record of the window instead (docs/traces.md)")
	return cli.RunOnDirs(fs, args, out, stdout, func(dirs []string) (any, error) {
		if *shards {
			return study.ShardsDirs(dirs, *allowIncomplete)
		}
		return study.SummarizeDirs(dirs, *out, *allowMixed, *allowIncomplete)
	})
}

func runAccounting(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("accounting", "RUN_DIR... [--pool-bytes-per-gpu N --gpus N] [--out FILE]",
		"kvbench accounting results/*-2026*/ --pool-bytes-per-gpu 7650410496 --gpus 2 --pool-source plans/load-preview.json --out accounting.json", stdout)
	out := fs.String("out", "", "write the summary to FILE (default: print it)")
	var spec study.PoolSpec
	fs.Int64Var(&spec.BytesPerGPU, "pool-bytes-per-gpu", 0, "configured KV pool bytes per GPU (default: derive from the server's token slots x measured bytes per stored token)")
	fs.IntVar(&spec.GPUs, "gpus", 1, "GPUs the pool spans")
	fs.StringVar(&spec.SourcePath, "pool-source", "", "file the configured byte figure came from (recorded with its sha256)")
	return cli.RunOnDirs(fs, args, out, stdout, func(dirs []string) (*study.Summary, error) {
		if spec.GPUs < 1 || spec.BytesPerGPU < 0 {
			return nil, errors.New("accounting: --gpus must be at least 1 and --pool-bytes-per-gpu not negative")
		}
		return study.AccountingDirs(dirs, spec, *out)
	})
}

package main

import (
	"context"
	"errors"
	"io"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/export"
)

func init() {
	cli.Register(cli.Command{Name: "push", Summary: "push finished runs and capacity sweeps to a Prometheus Pushgateway (exit 5 when a push fails)", Run: runPush})
}

// pushError marks err as a failed push: exit 5.
func pushError(err error) error { return cli.WithCode(cli.ExitPushFailed, err) }

// pushResult folds a run's failed push into the run's own result: a failed push exits 5
// and names the run's failed gates too, whose records are on disk.
func pushResult(pushErr, runErr error) error {
	if pushErr == nil {
		return runErr
	}
	msg := pushErr.Error()
	if runErr != nil {
		msg += "; also: " + runErr.Error()
	}
	return pushError(errors.New(msg))
}

func runPush(ctx context.Context, args []string, stdout, _ io.Writer) error {
	var p export.PushFlags
	fs := cli.NewFlagSet("push", "RUN_OR_SWEEP_DIR... PUSHGATEWAY_URL [flags]",
		"kvbench push results/smoke-20260803T020000Z http://pushgateway:9091\n"+
			"kvbench push results/nightly/*/*/ http://pushgateway:9091 --push-label cluster=eu1   # every night of the nightly script, oldest first: the last wins", stdout)
	p.Register(fs, "")
	allowIncomplete := fs.Bool("allow-incomplete", false, "push a run that a signal or a kill stopped (interrupted, incomplete) anyway; its kvbench_run_status says so")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return cli.Usagef("push: want one or more run directories and the Pushgateway URL, got %d arguments", len(args))
	}
	p.URL = args[len(args)-1]
	if err := p.Check(); err != nil {
		return err
	}
	loaded, sweeps, err := export.LoadDirs(args[:len(args)-1]) // runs and capacity sweeps
	if err != nil {
		return err
	}
	err = export.PushRuns(ctx, loaded, sweeps, *allowIncomplete, p.Opts, stdout)
	if errors.Is(err, export.ErrUnfinished) {
		return cli.UsageError(err) // refused before anything was pushed
	}
	return pushError(err)
}

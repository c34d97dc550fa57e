package main

import (
	"context"
	"errors"
	"flag"
	"io"
	"os"

	"github.com/anvil-serving/kvbench/internal/export"
)

func init() {
	register(command{name: "push", summary: "push finished runs to a Prometheus Pushgateway (exit 5 when a push fails)", run: runPush})
}

// pushFlags are the flags that push a run: run's and compare's --push and the push command's.
type pushFlags struct {
	url  string
	conf export.PushConfig  // the other flags, checked into opts
	opts export.PushOptions // set by check
}

// register adds the flags; pushURL is the --push flag's help (empty: the URL is an argument).
func (p *pushFlags) register(fs *flag.FlagSet, pushURL string) {
	if pushURL != "" {
		fs.StringVar(&p.url, "push", "", pushURL)
	}
	fs.Var((*stringList)(&p.conf.Labels), "push-label", "NAME=VALUE added to the push's grouping key (job, scenario, recipe, endpoint), e.g. cluster=eu1 (repeatable)")
	fs.DurationVar(&p.conf.Timeout, "push-timeout", export.DefaultPushTimeout, "bound on one push, connection and answer included")
	fs.StringVar(&p.conf.UserEnv, "push-user-env", "", "environment variable holding the Pushgateway's basic-auth user (with --push-password-env; e.g. from a Kubernetes Secret)")
	fs.StringVar(&p.conf.PasswordEnv, "push-password-env", "", "environment variable holding the Pushgateway's basic-auth password (never printed or written)")
}

// check validates the URL, labels and credentials as bad input (exit 2), before anything runs.
func (p *pushFlags) check() (err error) {
	p.conf.URL = p.url
	p.opts, err = p.conf.Options(os.Getenv)
	return usageError(err)
}

// pushError marks err as a failed push: exit 5.
func pushError(err error) error {
	if err == nil {
		return nil
	}
	return &exitError{code: exitPushFailed, err: err}
}

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
	var p pushFlags
	fs := newFlagSet("push", "RUN_DIR... PUSHGATEWAY_URL [flags]",
		"kvbench push results/smoke-20260803T020000Z http://pushgateway:9091\n"+
			"kvbench push results/nightly/*/*/ http://pushgateway:9091 --push-label cluster=eu1   # every night of the nightly script, oldest first: the last wins", stdout)
	p.register(fs, "")
	allowIncomplete := fs.Bool("allow-incomplete", false, "push a run that a signal or a kill stopped (interrupted, incomplete) anyway; its kvbench_run_status says so")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return usageErrorf("push: want one or more run directories and the Pushgateway URL, got %d arguments", len(args))
	}
	p.url = args[len(args)-1]
	if err := p.check(); err != nil {
		return err
	}
	loaded, err := loadRunDirs(args[:len(args)-1])
	if err != nil {
		return err
	}
	err = export.PushRuns(ctx, loaded, *allowIncomplete, p.opts, stdout)
	if errors.Is(err, export.ErrUnfinished) {
		return usageError(err) // refused before anything was pushed
	}
	return pushError(err)
}

package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"os"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/export"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "push", summary: "push finished runs to a Prometheus Pushgateway (exit 5 when a push fails)", run: runPush})
}

// pushFlags are the flags that push a run: run's and compare's --push and the push command's.
type pushFlags struct {
	url         string
	labels      stringList
	timeout     time.Duration
	userEnv     string
	passwordEnv string
	// parsed are the labels and the basic-auth credentials, read by check.
	parsed             []export.Label
	username, password string
}

// register adds the flags; pushURL is the --push flag's help (empty: the URL is an argument).
func (p *pushFlags) register(fs *flag.FlagSet, pushURL string) {
	if pushURL != "" {
		fs.StringVar(&p.url, "push", "", pushURL)
	}
	fs.Var(&p.labels, "push-label", "NAME=VALUE added to the push's grouping key (job, scenario, recipe, endpoint), e.g. cluster=eu1 (repeatable)")
	fs.DurationVar(&p.timeout, "push-timeout", export.DefaultPushTimeout, "bound on one push, connection and answer included")
	fs.StringVar(&p.userEnv, "push-user-env", "", "environment variable holding the Pushgateway's basic-auth user (with --push-password-env; e.g. from a Kubernetes Secret)")
	fs.StringVar(&p.passwordEnv, "push-password-env", "", "environment variable holding the Pushgateway's basic-auth password (never printed or written)")
}

// check validates the URL, labels and credentials as bad input (exit 2), before anything runs.
func (p *pushFlags) check() error {
	if p.url != "" {
		if err := checkPushURL(p.url); err != nil {
			return err
		}
	}
	if p.timeout <= 0 {
		return usageErrorf("--push-timeout must be positive")
	}
	labels, err := parseLabels("--push-label", p.labels)
	if err != nil {
		return err
	}
	p.parsed = labels
	return p.readCredentials()
}

// readCredentials reads the basic-auth user and password from the variables the flags name.
func (p *pushFlags) readCredentials() error {
	if p.userEnv == "" && p.passwordEnv == "" {
		return nil
	}
	if p.userEnv == "" || p.passwordEnv == "" {
		return usageErrorf("--push-user-env and --push-password-env go together (basic auth needs both)")
	}
	if u, err := url.Parse(p.url); err == nil && u.User != nil {
		return usageErrorf("push URL %q has user info and --push-password-env names a password: give the credentials one way", redact.URL(p.url))
	}
	for _, v := range []struct{ flag, name string }{{"--push-user-env", p.userEnv}, {"--push-password-env", p.passwordEnv}} {
		if os.Getenv(v.name) == "" {
			return usageErrorf("%s: environment variable %s is unset or empty", v.flag, v.name)
		}
	}
	p.username, p.password = os.Getenv(p.userEnv), os.Getenv(p.passwordEnv)
	return nil
}

// options are the push options of p's URL, labels, timeout and credentials.
func (p *pushFlags) options() export.PushOptions {
	return export.PushOptions{URL: p.url, Labels: p.parsed, Timeout: p.timeout, Username: p.username, Password: p.password}
}

// notPushable says why r is not pushed: a run a signal or a kill stopped (interrupted, or
// incomplete: run.json still says running) measured only part of its steps, and its push
// would replace the group's last complete run without a word. A failed run is pushed: its
// status series says failed, and the alerts on it fire. Both paths (run --push and push)
// refuse the same runs with the same words; allow pushes it anyway, its status series
// saying what it is.
func notPushable(r *runs.Run, allow bool) error {
	if allow || (r.Status != record.StatusInterrupted && r.Status != record.StatusIncomplete) {
		return nil
	}
	reason := r.StopReason
	if reason == "" {
		reason = "no stop reason recorded"
	}
	return usageErrorf("not pushed: %s is %s (%s); its push would replace the group's last complete run with part of one (kvbench push --allow-incomplete pushes it, marked %s)", r.Dir, r.Status, reason, r.Status)
}

// parseLabels reads NAME=VALUE labels given with flag, each name once.
func parseLabels(flag string, list []string) ([]export.Label, error) {
	var out []export.Label
	seen := map[string]bool{}
	for _, s := range list {
		l, err := export.ParseLabel(s)
		if err != nil {
			return nil, usageErrorf("%s: %w", flag, err)
		}
		if seen[l.Name] {
			return nil, usageErrorf("%s: %q given twice", flag, l.Name)
		}
		seen[l.Name] = true
		out = append(out, l)
	}
	return out, nil
}

func checkPushURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return usageErrorf("push URL %q: want the Pushgateway's http(s) base URL, e.g. http://pushgateway:9091", redact.URL(raw))
	}
	if strings.Contains(u.Path, "/metrics/job") {
		return usageErrorf("push URL %q: give the Pushgateway's base URL without /metrics/job/...", redact.URL(raw))
	}
	return nil
}

// push loads dir and pushes it; a failure is a push failure (exit 5), the run is on disk.
func (p *pushFlags) push(ctx context.Context, dir string) error {
	r, err := runs.Load(dir)
	if err != nil {
		return usageError(err)
	}
	if err := notPushable(r, false); err != nil {
		return err
	}
	if err := export.Push(ctx, r, p.options()); err != nil {
		return pushError(err)
	}
	return nil
}

// pushError marks err as a failed push: exit 5.
func pushError(err error) error {
	return &exitError{code: exitPushFailed, err: err}
}

// pushAfterRun pushes a finished run and folds the push's failure into the run's own result:
// a failed push exits 5 and names the run's failed gates too, whose records are on disk.
func pushAfterRun(ctx context.Context, p *pushFlags, dir string, runErr error, stderr io.Writer) error {
	if ctx.Err() != nil {
		// A stop signal: the run is interrupted, and push refuses it as p.push would.
		fmt.Fprintf(stderr, "not pushed: %s is interrupted (%v); its push would replace the group's last complete run with part of one (kvbench push --allow-incomplete pushes it, marked interrupted)\n", dir, context.Cause(ctx))
		return runErr
	}
	err := p.push(ctx, dir)
	if err == nil {
		fmt.Fprintf(stderr, "pushed %s to %s\n", dir, redact.URL(p.url))
		return runErr
	}
	var ee *exitError
	if errors.As(err, &ee) && ee.code == exitUsage {
		fmt.Fprintln(stderr, err) // refused: the run's own result says what it did
		return runErr
	}
	msg := fmt.Sprintf("%v (the records are in %s; retry: kvbench push %s %s)", err, dir, dir, redact.URL(p.url))
	if runErr != nil {
		msg += "; also: " + runErr.Error()
	}
	return pushError(errors.New(msg))
}

func runPush(ctx context.Context, args []string, stdout, stderr io.Writer) error {
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
	dirs := args[:len(args)-1]
	loaded, err := loadRunDirs(dirs)
	if err != nil {
		return err
	}
	// Every run is checked before any is pushed: a refusal pushes nothing.
	for _, r := range loaded {
		if err := notPushable(r, *allowIncomplete); err != nil {
			return err
		}
	}
	// Runs with the same grouping key replace each other on the Pushgateway: the last given wins.
	var failed []string
	for _, r := range loaded {
		if err := export.Push(ctx, r, p.options()); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if r.Status != record.StatusCompleted {
			fmt.Fprintf(stdout, "pushed %s (marked %s)\n", r.Dir, r.Status)
			continue
		}
		fmt.Fprintf(stdout, "pushed %s\n", r.Dir)
	}
	if len(failed) > 0 {
		return pushError(fmt.Errorf("%d of %d push(es) failed: %s", len(failed), len(loaded), strings.Join(failed, "; ")))
	}
	return nil
}

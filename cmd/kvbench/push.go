package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/export"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "push", summary: "push finished runs to a Prometheus Pushgateway (exit 5 when a push fails)", run: runPush})
}

// pushFlags are the flags that push a run: run's --push and the push command's.
type pushFlags struct {
	url     string
	labels  stringList
	timeout time.Duration
	// parsed are the labels, checked by check.
	parsed []export.Label
}

// register adds the flags; withURL adds --push (run's spelling; push takes the URL as an argument).
func (p *pushFlags) register(fs *flag.FlagSet, withURL bool) {
	if withURL {
		fs.StringVar(&p.url, "push", "", "after the records are written, push the run's series to this Prometheus Pushgateway (http://pushgateway:9091); a failed push exits 5 and 'kvbench push' retries it")
	}
	fs.Var(&p.labels, "push-label", "NAME=VALUE added to the push's grouping key (job, scenario, recipe, endpoint), e.g. cluster=eu1 (repeatable)")
	fs.DurationVar(&p.timeout, "push-timeout", export.DefaultPushTimeout, "bound on one push, connection and answer included")
}

// check validates the URL and labels as bad input (exit 2), before anything runs.
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
	return nil
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
	if err := export.Push(ctx, r, export.PushOptions{URL: p.url, Labels: p.parsed, Timeout: p.timeout}); err != nil {
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
		fmt.Fprintf(stderr, "not pushed (interrupted); push it later: kvbench push %s %s\n", dir, redact.URL(p.url))
		return runErr
	}
	err := p.push(ctx, dir)
	if err == nil {
		fmt.Fprintf(stderr, "pushed %s to %s\n", dir, redact.URL(p.url))
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
		"kvbench push results/smoke-20260803T020000Z http://pushgateway:9091\nkvbench push results/nightly/*/ http://pushgateway:9091 --push-label cluster=eu1", stdout)
	p.register(fs, false)
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
	// Runs with the same grouping key replace each other on the Pushgateway: the last given wins.
	var failed []string
	for _, r := range loaded {
		if err := export.Push(ctx, r, export.PushOptions{URL: p.url, Labels: p.parsed, Timeout: p.timeout}); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		fmt.Fprintf(stdout, "pushed %s\n", r.Dir)
	}
	if len(failed) > 0 {
		return pushError(fmt.Errorf("%d of %d push(es) failed: %s", len(failed), len(loaded), strings.Join(failed, "; ")))
	}
	return nil
}

package export

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net/url"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// PushConfig is a push as kvbench's --push flags give it: the Pushgateway's URL, labels as
// NAME=VALUE, the timeout, and the names of the environment variables holding basic-auth
// credentials (a Kubernetes Secret's), so a password is never on a command line.
type PushConfig struct {
	// URL is the Pushgateway's base URL; "" checks the rest alone (run without --push).
	URL                  string
	Labels               []string
	Timeout              time.Duration
	UserEnv, PasswordEnv string
	PerRequest           bool
}

// Options checks c and reads its credentials with getenv (os.Getenv): the options of a valid
// push, or an error naming the flag at fault. Every error is bad input, found before
// anything runs.
func (c PushConfig) Options(getenv func(string) string) (PushOptions, error) {
	if c.URL != "" {
		if err := checkURL(c.URL); err != nil {
			return PushOptions{}, err
		}
	}
	if c.Timeout <= 0 {
		return PushOptions{}, errors.New("--push-timeout must be positive")
	}
	labels, err := ParseLabels("--push-label", c.Labels)
	if err != nil {
		return PushOptions{}, err
	}
	opts := PushOptions{URL: c.URL, Labels: labels, Timeout: c.Timeout, PerRequest: c.PerRequest}
	if c.UserEnv == "" && c.PasswordEnv == "" {
		return opts, nil
	}
	if c.UserEnv == "" || c.PasswordEnv == "" {
		return PushOptions{}, errors.New("--push-user-env and --push-password-env go together (basic auth needs both)")
	}
	// Two sources of one password: whichever won, the user would not know which was sent.
	if u, err := url.Parse(c.URL); err == nil && u.User != nil {
		return PushOptions{}, fmt.Errorf("push URL %q has user info and --push-password-env names a password: give the credentials one way", redact.URL(c.URL))
	}
	for _, v := range []struct{ flag, name string }{{"--push-user-env", c.UserEnv}, {"--push-password-env", c.PasswordEnv}} {
		if getenv(v.name) == "" {
			return PushOptions{}, fmt.Errorf("%s: environment variable %s is unset or empty", v.flag, v.name)
		}
	}
	opts.Username, opts.Password = getenv(c.UserEnv), getenv(c.PasswordEnv)
	return opts, nil
}

// checkURL accepts a Pushgateway's http(s) base URL; the push package appends the group's
// path itself, so a URL that already holds one would push to a path no one reads.
func checkURL(raw string) error {
	u, err := url.Parse(raw)
	if err != nil || (u.Scheme != "http" && u.Scheme != "https") || u.Host == "" {
		return fmt.Errorf("push URL %q: want the Pushgateway's http(s) base URL, e.g. http://pushgateway:9091", redact.URL(raw))
	}
	if strings.Contains(u.Path, "/metrics/job") {
		return fmt.Errorf("push URL %q: give the Pushgateway's base URL without /metrics/job/...", redact.URL(raw))
	}
	return nil
}

// ParseLabels reads NAME=VALUE labels (ParseLabel) given with flag, each name once: a name
// given twice would leave one of its values unsaid.
func ParseLabels(flag string, list []string) ([]Label, error) {
	var out []Label
	seen := map[string]bool{}
	for _, s := range list {
		l, err := ParseLabel(s)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", flag, err)
		}
		if seen[l.Name] {
			return nil, fmt.Errorf("%s: %q given twice", flag, l.Name)
		}
		seen[l.Name] = true
		out = append(out, l)
	}
	return out, nil
}

// ErrUnfinished means a run was not pushed: a signal or a kill stopped it.
var ErrUnfinished = errors.New("run did not finish")

// UnfinishedError says why a run is not pushed: a run a signal or a kill stopped
// (interrupted, or incomplete: run.json still says running) measured only part of its
// steps, and its push would replace the group's last complete run without a word.
type UnfinishedError struct {
	Dir, Status string
	// Reason is the run's stop reason; "" when none was recorded.
	Reason string
}

func (e *UnfinishedError) Error() string {
	reason := e.Reason
	if reason == "" {
		reason = "no stop reason recorded"
	}
	return fmt.Sprintf("not pushed: %s is %s (%s); its push would replace the group's last complete run with part of one (kvbench push --allow-incomplete pushes it, marked %s)", e.Dir, e.Status, reason, e.Status)
}

func (e *UnfinishedError) Unwrap() error { return ErrUnfinished }

// CheckPushable returns an *UnfinishedError for a run a signal or a kill stopped, unless
// allow (then its status series says what it is). A failed run is pushable: its status
// series says failed, and the alerts on it fire.
func CheckPushable(r *runs.Run, allow bool) error {
	if allow || (r.Status != record.StatusInterrupted && r.Status != record.StatusIncomplete) {
		return nil
	}
	return &UnfinishedError{Dir: r.Dir, Status: r.Status, Reason: r.StopReason}
}

// PushRuns pushes rs in order, then each capacity sweep of sweeps (its own group: job
// SweepJob and its identity), and writes a line to w for each pushed, naming the status of
// one that did not complete. Every run and sweep is checked before any is pushed, so a
// refusal pushes nothing. Runs of one grouping key replace each other: the last wins. A
// failed push does not stop the others; the error names each failure.
func PushRuns(ctx context.Context, rs []*runs.Run, sweeps []Sweep, allowIncomplete bool, opts PushOptions, w io.Writer) error {
	for _, r := range rs {
		if err := CheckPushable(r, allowIncomplete); err != nil {
			return err
		}
	}
	for _, s := range sweeps {
		if st := s.Record.Status; !allowIncomplete && st != record.StatusCompleted {
			return &UnfinishedError{Dir: s.Dir, Status: st, Reason: s.Record.StopReason}
		}
	}
	var failed []string
	for _, r := range rs {
		if err := Push(ctx, r, opts); err != nil {
			failed = append(failed, err.Error())
			continue
		}
		if r.Status != record.StatusCompleted {
			fmt.Fprintf(w, "pushed %s (marked %s)\n", r.Dir, r.Status)
			continue
		}
		fmt.Fprintf(w, "pushed %s\n", r.Dir)
	}
	for _, s := range sweeps {
		if err := PushSweep(ctx, s.Record, opts); err != nil {
			failed = append(failed, s.Dir+": "+err.Error())
			continue
		}
		fmt.Fprintf(w, "pushed sweep %s\n", s.Dir)
	}
	if len(failed) > 0 {
		return fmt.Errorf("%d of %d push(es) failed: %s", len(failed), len(rs)+len(sweeps), strings.Join(failed, "; "))
	}
	return nil
}

// SweepJob is the Pushgateway job of capacity sweeps' series: a sweep's group never
// replaces a run's.
const SweepJob = "kvbench_sweep"

// PushSweep replaces a sweep's group (job SweepJob, its identity and opts.Labels) with its
// series. Errors are redacted.
func PushSweep(ctx context.Context, sw *record.Sweep, opts PushOptions) error {
	fams, err := SweepFamilies(sw, nil)
	if err != nil {
		return err
	}
	return PushFamilies(ctx, fams, SweepJob, append(SweepIdentity(sw), opts.Labels...), opts)
}

// PushComparison replaces the comparison's group on the Pushgateway with res's series: job
// CompareJob, the candidate's identity and opts.Labels. Errors are redacted.
func PushComparison(ctx context.Context, res *compare.Result, candidate *runs.Run, opts PushOptions) error {
	fams, err := CompareFamiliesFor(res, nil, opts.PerRequest)
	if err != nil {
		return err
	}
	return PushFamilies(ctx, fams, CompareJob, append(Identity(candidate), opts.Labels...), opts)
}

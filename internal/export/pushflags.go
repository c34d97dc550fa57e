package export

import (
	"flag"
	"os"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// PushFlags are the flags that push a run: run's and compare's --push and the push
// command's.
type PushFlags struct {
	URL  string
	conf PushConfig  // the other flags, checked into Opts
	Opts PushOptions // set by Check
}

// Register adds the flags; pushURL is the --push flag's help (empty: the URL is an argument).
func (p *PushFlags) Register(fs *flag.FlagSet, pushURL string) {
	if pushURL != "" {
		fs.StringVar(&p.URL, "push", "", pushURL)
	}
	fs.Var((*cli.StringList)(&p.conf.Labels), "push-label", "NAME=VALUE added to the push's grouping key (job, scenario, recipe, endpoint), e.g. cluster=eu1 (repeatable)")
	fs.DurationVar(&p.conf.Timeout, "push-timeout", DefaultPushTimeout, "bound on one push, connection and answer included")
	fs.StringVar(&p.conf.UserEnv, "push-user-env", "", "environment variable holding the Pushgateway's basic-auth user (with --push-password-env; e.g. from a Kubernetes Secret)")
	fs.BoolVar(&p.conf.PerRequest, "per-request-series", false, PerRequestHelp)
	fs.StringVar(&p.conf.PasswordEnv, "push-password-env", "", "environment variable holding the Pushgateway's basic-auth password (never printed or written)")
}

// PerRequestHelp is the --per-request-series flag's help, of push's and export's.
const PerRequestHelp = "also a series per request (time to first output, decode rate, ... with a request label); by default series are per step and per replay, a bounded number however many requests a step has (a trace's thousands)"

// SeriesFlags are the export command's flags that shape its series: --label and
// --per-request-series.
type SeriesFlags struct {
	labels     cli.StringList
	PerRequest bool
}

// NewSeriesFlags registers the flags on fs.
func NewSeriesFlags(fs *flag.FlagSet) *SeriesFlags {
	s := &SeriesFlags{}
	fs.Var(&s.labels, "label", "NAME=VALUE added to every series, e.g. cluster=eu1 (repeatable)")
	fs.BoolVar(&s.PerRequest, "per-request-series", false, PerRequestHelp)
	return s
}

// Labels parses the --label values (a bad one is bad input).
func (s *SeriesFlags) Labels() ([]Label, error) { return ParseLabels("--label", s.labels) }

// Check validates the URL, labels and credentials as bad input (exit 2), before anything runs.
func (p *PushFlags) Check() (err error) {
	p.conf.URL = p.URL
	p.Opts, err = p.conf.Options(os.Getenv)
	return cli.UsageError(err)
}

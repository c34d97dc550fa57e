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
	fs.StringVar(&p.conf.PasswordEnv, "push-password-env", "", "environment variable holding the Pushgateway's basic-auth password (never printed or written)")
}

// Check validates the URL, labels and credentials as bad input (exit 2), before anything runs.
func (p *PushFlags) Check() (err error) {
	p.conf.URL = p.URL
	p.Opts, err = p.conf.Options(os.Getenv)
	return cli.UsageError(err)
}

package target

import (
	"context"
	"errors"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Validate checks each scenario file or built-in name as a run would before sending
// anything (plan.Check). For each that passes it writes "PATH: ok (N steps)", then where its
// requests would go, who chose that, and its probe commands: the file's own choices, so a
// stranger's scenario can be read before it runs. It returns every problem, joined; an
// error writing to w ends it at once.
func Validate(ctx context.Context, w io.Writer, files []string) error {
	var errs []error
	for _, f := range files {
		sc, err := scenarios.Resolve(f)
		if err == nil {
			err = plan.Check(ctx, sc)
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(w, "%s: ok (%d steps)\n", sc.Path, len(sc.Steps))
		resolved := *sc
		r, err := Apply(&resolved, Overrides{})
		if err != nil {
			errs = append(errs, err)
			continue
		}
		if err := r.WriteTarget(w, &resolved, false); err != nil {
			return err
		}
	}
	return errors.Join(errs...)
}

// WriteTarget writes where sc's requests would go and who chose it (WriteTrust), then its
// probe commands, under a heading when headed (a plan's).
func (r *Resolved) WriteTarget(w io.Writer, sc *scenarios.Scenario, headed bool) error {
	if err := r.WriteTrust(w, sc); err != nil {
		return err
	}
	if headed && len(sc.Probes) > 0 {
		fmt.Fprintf(w, "\nprobe commands (kvbench run needs --allow-probes or --no-probes):\n")
	}
	return WriteProbes(w, sc)
}

// Admit is everything a run checks before it sends a request, each refusal bad input: the
// user's consent to where requests go and which key goes with them (Consent), to the
// scenario's probes (ProbeConsent), and the key itself (APIKey), which it returns.
func (r *Resolved) Admit(sc *scenarios.Scenario, allowProbes, noProbes bool) (string, error) {
	if err := r.Consent(sc); err != nil {
		return "", err
	}
	if err := ProbeConsent(sc, allowProbes, noProbes); err != nil {
		return "", err
	}
	return APIKey(sc)
}

package runner

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/scenarios"
)

// SetupError is a failure before the first request: a URL, a server or a scenario that is
// not what the run needs. It is bad input, not a failed run: nothing was measured.
type SetupError struct{ Err error }

func (e *SetupError) Error() string { return e.Err.Error() }
func (e *SetupError) Unwrap() error { return e.Err }

// RunScenario connects to sc's server, preflights it, prints the brief on s.Console and
// runs sc, the way every command that runs a scenario does. Preflight's problems refuse the
// run unless force. A failure before the run starts is a *SetupError, unless ctx ended.
func RunScenario(ctx context.Context, sc *scenarios.Scenario, apiKey string, force bool, s Settings) (*Outcome, error) {
	con := s.Console
	t, err := Connect(sc, apiKey)
	if err != nil {
		return nil, &SetupError{err}
	}
	con.Printf("%s", target.Destination(sc))
	con.Printf("preflight %s against %s", sc.Name, redact.URL(sc.Target.Endpoint))
	rep, p, err := Preflight(ctx, sc, t, s.Choices)
	if err != nil {
		if ctx.Err() != nil {
			return nil, err
		}
		return nil, &SetupError{err}
	}
	rep.WriteBrief(con)
	if len(rep.Problems) > 0 && !force {
		return nil, &SetupError{fmt.Errorf("%s cannot run on %s: %s (--force to run anyway)", sc.Name, redact.URL(sc.Target.Endpoint), strings.Join(rep.Problems, "; "))}
	}
	return Run(ctx, NewConfig(t, rep, p, s))
}

// PreflightServer connects to sc's server and preflights it, saying first on w where the
// requests go (the preflight command). A failure is a *SetupError, unless ctx ended.
func PreflightServer(ctx context.Context, sc *scenarios.Scenario, apiKey string, w io.Writer) (*PreflightReport, error) {
	t, err := Connect(sc, apiKey)
	if err != nil {
		return nil, &SetupError{err}
	}
	fmt.Fprintln(w, target.Destination(sc))
	rep, _, err := Preflight(ctx, sc, t, plan.Choices{})
	if err != nil && ctx.Err() == nil {
		err = &SetupError{err}
	}
	return rep, err
}

// GateSummary names each failed gate and why ("" when every gate passed).
func (o *Outcome) GateSummary() string {
	failed := o.GatesFailed()
	if len(failed) == 0 {
		return ""
	}
	why := make([]string, len(failed))
	for i, g := range failed {
		why[i] = fmt.Sprintf("%s: %s", g.Gate.Step, g.Reason)
	}
	return fmt.Sprintf("%d gate(s) failed: %s", len(failed), strings.Join(why, "; "))
}

package main

import (
	"context"
	"errors"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/internal/termsafe"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "scenarios", summary: "list the built-in scenarios", run: runScenarios})
	register(command{name: "validate", summary: "check scenario files (all problems, with lines)", run: runValidate})
	register(command{name: "plan", summary: "show a scenario's requests, prompt identities and capacity math", run: runPlan})
}

func runScenarios(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("scenarios", "", "kvbench scenarios", stdout)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, n := range scenarios.BuiltinNames() {
		sc, err := scenarios.Builtin(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\n", n, sc.Description)
	}
	return tw.Flush()
}

func runValidate(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("validate", "FILE|NAME...", "kvbench validate scenarios/my-study.toml", stdout)
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErrorf("validate: name at least one scenario file")
	}
	var errs []error
	for _, f := range files {
		sc, err := scenarios.Resolve(f)
		if err == nil {
			err = plan.Check(ctx, sc) // what run would refuse before sending anything
		}
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d steps)\n", sc.Path, len(sc.Steps))
		// Where a run would send requests, and with which key: the file's own choices.
		var tf targetFlags
		resolved := *sc
		if err := tf.apply(&resolved); err != nil {
			errs = append(errs, err)
			continue
		}
		if err := writeTrust(stdout, tf, &resolved, false); err != nil {
			return err
		}
	}
	if len(errs) > 0 {
		return usageError(errors.Join(errs...))
	}
	return nil
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("plan", "FILE|NAME [flags]", "kvbench plan eviction-6x150k-replay\nkvbench plan smoke --endpoint http://127.0.0.1:8000/v1   # counts tokens with /tokenize", stdout)
	var tf targetFlags
	tf.register(fs)
	estimate := fs.Bool("estimate", false, "estimate tokens (4 bytes per token) even if the scenario counts on the server: no traffic")
	var format string
	formatVar(fs, &format, "output format: text or json", "text", "json")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("plan: want one scenario file or built-in name, got %d", len(args))
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return err
	}
	if err := tf.apply(sc); err != nil {
		return err
	}
	if err := sc.ResolveSalt(); err != nil { // a random salt: the plan shows one draw
		return err
	}
	var p *plan.Plan
	if sc.Prompt.TokenCounting == "server" && !*estimate {
		if err := tf.consent(sc); err != nil {
			return fmt.Errorf("%w (or use --estimate to plan without a server)", err)
		}
		key, err := target.APIKey(sc)
		if err != nil {
			return usageErrorf("%w (use --estimate to plan without a server)", err)
		}
		fmt.Fprintf(consoleFor(format, stdout, stderr), "counting tokens on the server: %s\n", target.Destination(sc))
		if p, err = runner.PlanOnServer(ctx, sc, key); err != nil {
			return fmt.Errorf("%w (use --estimate to plan without a server)", preflightError(ctx, err))
		}
	} else if p, err = plan.Make(ctx, sc, nil); err != nil {
		return preflightError(ctx, err)
	}
	if format == "json" {
		return printJSON(stdout, struct {
			Scenario *scenarios.Scenario `json:"scenario"`
			*plan.Plan
		}{sc, p})
	}
	if err := p.WriteText(termsafe.NewWriter(stdout)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ntarget (kvbench run sends requests here):\n")
	return writeTrust(stdout, tf, sc, true)
}

// writeTrust writes where sc's requests would go and who chose it, then its probe commands
// (headed: a plan's), so a stranger's scenario can be read before it runs.
func writeTrust(w io.Writer, tf targetFlags, sc *scenarios.Scenario, headed bool) error {
	if err := tf.resolved.WriteTrust(w, sc); err != nil {
		return err
	}
	if headed && len(sc.Probes) > 0 {
		fmt.Fprintf(w, "\nprobe commands (kvbench run needs --allow-probes or --no-probes):\n")
	}
	return target.WriteProbes(w, sc)
}

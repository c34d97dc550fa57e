package main

import (
	"context"
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
	return usageError(target.Validate(ctx, stdout, files))
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
	sc, err := tf.scenario("plan", args)
	if err != nil {
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
	} else if p, err = plan.Make(ctx, sc, plan.Facts{}); err != nil {
		return preflightError(ctx, err)
	}
	if format == "json" {
		return printJSON(stdout, struct {
			Scenario *scenarios.Scenario `json:"scenario"`
			*plan.Plan
		}{p.Scenario, p})
	}
	if err := p.WriteText(termsafe.NewWriter(stdout)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ntarget (kvbench run sends requests here):\n")
	return tf.resolved.WriteTarget(stdout, p.Scenario, true)
}

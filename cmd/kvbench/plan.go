package main

import (
	"context"
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/internal/termsafe"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	cli.Register(cli.Command{Name: "scenarios", Summary: "list the built-in scenarios", Run: runScenarios})
	cli.Register(cli.Command{Name: "validate", Summary: "check scenario files (all problems, with lines)", Run: runValidate})
	cli.Register(cli.Command{Name: "plan", Summary: "show a scenario's requests, prompt identities and capacity math", Run: runPlan})
}

func runScenarios(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("scenarios", "", "kvbench scenarios", stdout)
	if _, err := cli.Parse(fs, args); err != nil {
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
	fs := cli.NewFlagSet("validate", "FILE|NAME...", "kvbench validate scenarios/my-study.toml", stdout)
	files, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return cli.Usagef("validate: name at least one scenario file")
	}
	return cli.UsageError(target.Validate(ctx, stdout, files))
}

func runPlan(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("plan", "FILE|NAME [flags]", "kvbench plan eviction-6x150k-replay\nkvbench plan smoke --endpoint http://127.0.0.1:8000/v1   # counts tokens with /tokenize", stdout)
	var tf target.Flags
	tf.Register(fs)
	estimate := fs.Bool("estimate", false, "estimate tokens (4 bytes per token) even if the scenario counts on the server: no traffic")
	var format string
	cli.FormatVar(fs, &format, "output format: text or json", "text", "json")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	sc, err := tf.Scenario("plan", args)
	if err != nil {
		return err
	}
	var p *plan.Plan
	if sc.Prompt.TokenCounting == "server" && !*estimate {
		key, err := tf.Key(sc)
		if err != nil {
			return fmt.Errorf("%w (or use --estimate to plan without a server)", err)
		}
		fmt.Fprintf(cli.ConsoleFor(format, stdout, stderr), "counting tokens on the server: %s\n", target.Destination(sc))
		if p, err = runner.PlanOnServer(ctx, sc, key); err != nil {
			return fmt.Errorf("%w (use --estimate to plan without a server)", cli.InputError(ctx, err))
		}
	} else if p, err = plan.Make(ctx, sc, plan.Facts{}); err != nil {
		return cli.InputError(ctx, err)
	}
	if format == "json" {
		return cli.PrintJSON(stdout, cli.Document{Schema: plan.Schema, Value: struct {
			Scenario *scenarios.Scenario `json:"scenario"`
			*plan.Plan
		}{p.Scenario, p}})
	}
	if err := p.WriteText(termsafe.NewWriter(stdout)); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\ntarget (kvbench run sends requests here):\n")
	return tf.Resolved.WriteTarget(stdout, p.Scenario, true)
}

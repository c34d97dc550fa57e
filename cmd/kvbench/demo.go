package main

import (
	"cmp"
	"context"
	"errors"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/study"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	cli.Register(cli.Command{Name: "demo", Summary: "the whole job on the embedded engine: seed study 001, merged record, accounting", Run: runDemo})
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("demo", "[--engine NAME] [--endpoint URL] [--out DIR]",
		"kvbench demo                                        # embedded engine, no GPU\nkvbench demo --engine sglang                        # the same studies in SGLang HiCache's dialect\nkvbench demo --endpoint http://gpu-host:8000/v1     # the same studies on a real server", stdout)
	endpoint := fs.String("endpoint", "", "run both studies against this server instead of the embedded engine")
	controlEndpoint := fs.String("control-endpoint", "", "server for the offload8 control (default: --endpoint)")
	out := fs.String("out", "results", "directory the demo directory is created in")
	speed := fs.Float64("speed", 0, "embedded engine time scale (default: the profiles' own, 100x)")
	engineName := fs.String("engine", engine.Default, "engine whose dialect the studies run against: "+strings.Join(engine.Names(), ", "))
	if _, err := cli.Parse(fs, args); err != nil {
		return err
	}
	def, err := engine.ByName(*engineName)
	if err != nil {
		return cli.Usagef("--engine: %v", err)
	}
	var outcomes []*runner.Outcome
	err = study.RunDemo(ctx, stdout, study.DemoOptions{Engine: def, Endpoint: *endpoint, ControlEndpoint: *controlEndpoint, Out: *out, Speed: *speed},
		func(ctx context.Context, sc *scenarios.Scenario, t study.DemoTarget, dir string) (string, error) {
			o := runOptions{out: dir, format: "text", engineInProcess: true}
			o.target.Endpoint, o.target.MetricsURLs, o.target.Backend = t.Endpoint, t.Metrics, t.Backend
			if err := o.target.Apply(sc); err != nil {
				return "", err
			}
			outcome, err := runScenario(ctx, sc, o, stdout, stderr)
			if err != nil {
				return "", err
			}
			outcomes = append(outcomes, outcome)
			if outcome.Interrupted {
				return "", outcomeError(outcome)
			}
			return outcome.Dir, nil
		})
	if ie := (*study.InputError)(nil); errors.As(err, &ie) {
		return cli.UsageError(ie.Err)
	}
	if err != nil {
		return err
	}
	return cmp.Or(outcomeError(outcomes[0]), outcomeError(outcomes[1]))
}

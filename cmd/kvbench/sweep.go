package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"strings"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/sweep"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	cli.Register(cli.Command{Name: "sweep", Summary: "run a conversation step at several user counts, or a trace step at several request rates, and report the capacity within a TTFT p90", Run: runSweep})
}

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o runOptions
	fs := o.register("sweep", stdout, "SCENARIO (--users 8,16,32,64 | --time-scales 1,0.5,0.25 | --endpoints URL,URL,...) [--ttft-p90-ms X] [flags]",
		"kvbench sweep chat-capacity-offload16 --endpoint http://127.0.0.1:8000/v1 --users 8,16,32,64 --ttft-p90-ms 2000\n"+
			"kvbench sweep my-trace.toml --trace conversation_trace.jsonl --endpoint http://127.0.0.1:8000/v1 --time-scales 1,0.5,0.25 --ttft-p90-ms 2000\n"+
			"kvbench sweep my-trace.toml --endpoints http://127.0.0.1:8000/v1,http://127.0.0.1:8001/v1,http://127.0.0.1:8002/v1   # one host-tier size each")
	flags := sweep.RegisterFlags(fs)
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	sc, err := o.scenario("sweep", args)
	if err != nil {
		return err
	}
	p, err := flags.Plan(sc, o.target.Endpoint != "" || len(o.target.MetricsURLs) > 0)
	if err != nil {
		return cli.Usagef("sweep: %w", err)
	}
	// What a level's run would refuse before sending anything (the key's variable, hosts
	// the file names, probes) is refused before the sweep directory exists.
	if _, err := o.target.Admit(sc, o.allowProbes, o.noProbes); err != nil {
		return err
	}
	consoleW := cli.ConsoleFor(o.format, stdout, stderr)
	res, err := sweep.Run(ctx, p, o.out, cli.Version(), consoleW, func(ctx context.Context, level *scenarios.Scenario, dir string) (*runner.Outcome, error) {
		lo := o
		lo.out, lo.format = dir, "text"
		return runScenario(ctx, level, lo, consoleW, stderr)
	})
	if err != nil {
		return err
	}
	sw := res.Record
	if err := cli.Emit(stdout, o.format, sw, func(w io.Writer) error { fmt.Fprintln(w); return derive.WriteSweep(w, sw) }); err != nil {
		return err
	}
	fmt.Fprintf(consoleW, "sweep record: %s\n", filepath.Join(res.Dir, runs.SweepFile))
	// The exit code follows run's: a sweep that did less than asked exits 1, one whose levels
	// failed gates 3.
	if sw.Status != record.StatusCompleted {
		return &cli.ExitError{Code: cli.ExitRuntime, Err: fmt.Errorf("sweep %s: %s; what was measured is in %s", sw.Status, sw.StopReason, res.Dir)}
	}
	if len(res.GatesFailed) > 0 {
		return &cli.ExitError{Code: cli.ExitGateFailed, Err: fmt.Errorf("sweep: %d level(s) failed gates: %s; the records are in %s", len(res.GatesFailed), strings.Join(res.GatesFailed, "; "), res.Dir)}
	}
	return nil
}

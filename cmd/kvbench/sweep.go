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
	fs := o.register("sweep", stdout, "SCENARIO (--users 8,16,32,64 | --time-scales 1,0.5,0.25) [--ttft-p90-ms X] [flags]",
		"kvbench sweep chat-capacity-offload16 --endpoint http://127.0.0.1:8000/v1 --users 8,16,32,64 --ttft-p90-ms 2000\n"+
			"kvbench sweep my-trace.toml --trace conversation_trace.jsonl --endpoint http://127.0.0.1:8000/v1 --time-scales 1,0.5,0.25 --ttft-p90-ms 2000")
	users := fs.String("users", "", "conversation step: user counts to run, ascending, comma-separated (e.g. 8,16,32,64)")
	scales := fs.String("time-scales", "", "trace step (open loop): time_scale values to run, descending, so each level offers a higher request rate (e.g. 1,0.5,0.25)")
	threshold := fs.Float64("ttft-p90-ms", 0, "TTFT p90 (ms) a level must stay within to count toward capacity; 0: report levels only")
	stepID := fs.String("step", "", "the conversation or trace step to sweep (default: the scenario's only one)")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	sc, err := o.scenario("sweep", args)
	if err != nil {
		return err
	}
	p, err := sweep.NewPlan(sc, *stepID, *users, *scales, *threshold)
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

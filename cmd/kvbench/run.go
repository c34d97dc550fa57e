package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/internal/export"
	"github.com/anvil-serving/kvbench/internal/proc"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	cli.Register(cli.Command{Name: "run", Summary: "run a scenario and write its records under results/", Run: runRun})
	cli.Register(cli.Command{Name: "preflight", Summary: "check a server against a scenario without running it", Run: runPreflight})
}

// runOptions are the flags run, sweep and demo share.
type runOptions struct {
	target                                     target.Flags
	out, format                                string
	force, noProbes, allowProbes, probeSecrets bool
	choices                                    plan.Choices // --repeat and --salt
	profiles                                   cli.Profiles
	engineInProcess                            bool          // the server is the demo's engine, in this process
	sinks                                      []events.Sink // after the run directory and the console (a push)
}

func (o *runOptions) register(fsName string, stdout io.Writer, usage, example string) *flag.FlagSet {
	fs := cli.NewFlagSet(fsName, usage, example, stdout)
	o.target.Register(fs)
	fs.StringVar(&o.out, "out", "results", "directory the run directory is created in")
	cli.FormatVar(fs, &o.format, "output: text (console and table) or json (the run record on stdout)", "text", "json")
	fs.BoolVar(&o.force, "force", false, "run even if preflight finds the scenario cannot run here")
	fs.BoolVar(&o.allowProbes, "allow-probes", false, "run the scenario's [[probe]] commands, which run as you on this machine: read them first ('kvbench validate' lists them); a scenario with probes is refused without this or --no-probes")
	fs.BoolVar(&o.noProbes, "no-probes", false, "skip the scenario's probe commands")
	fs.BoolVar(&o.probeSecrets, "probe-secrets", false, "pass probes the environment variables whose names contain KEY, TOKEN, SECRET or PASSWORD (dropped by default; the --api-key-env variable is never passed)")
	o.choices.Register(fs)
	o.profiles.Register(fs)
	return fs
}

// scenario loads the one scenario args name and applies the target flags.
func (o *runOptions) scenario(cmd string, args []string) (*scenarios.Scenario, error) {
	if len(args) == 1 {
		if err := runs.CheckOutputDir(o.out); err != nil {
			return nil, cli.Usagef("%s: --out: %w", cmd, err)
		}
	}
	return o.target.Scenario(cmd, args)
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o runOptions
	var push export.PushFlags
	fs := o.register("run", stdout, "SCENARIO [flags]",
		"kvbench run eviction-6x150k-replay --endpoint http://127.0.0.1:8000/v1\nkvbench run my-study.toml --metrics http://gpu0:8000/metrics --metrics http://gpu1:8001/metrics --format json\nkvbench run smoke --endpoint http://gpu-host:8000/v1 --repeat 3 --push http://pushgateway:9091 --push-label cluster=eu1")
	push.Register(fs, "after the records are written, push the run's series to this Prometheus Pushgateway (http://pushgateway:9091); a failed push exits 5 and 'kvbench push' retries it")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if err := push.Check(); err != nil {
		return err
	}
	sc, err := o.scenario("run", args)
	if err != nil {
		return err
	}
	stopProfiles, err := o.profiles.Start()
	if err != nil {
		return err
	}
	// The push sink comes after the run directory's, so it pushes the final run.json; its
	// line is shown after the run's summary and records line, where it always was.
	var pusher *export.Pusher
	var pushed bytes.Buffer
	if push.URL != "" {
		pusher = export.NewPusher(ctx, push.Opts, &pushed)
		o.sinks = append(o.sinks, pusher)
	}
	outcome, err := runScenario(ctx, sc, o, stdout, stderr)
	stderr.Write(pushed.Bytes())
	if perr := stopProfiles(); err == nil && perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if pusher != nil {
		return pushResult(pusher.Err(), outcomeError(outcome))
	}
	return outcomeError(outcome)
}

// runScenario runs sc, printing the console to stderr (json) or stdout (text), then the
// record (json) or its summary (text) on stdout.
func runScenario(ctx context.Context, sc *scenarios.Scenario, o runOptions, stdout, stderr io.Writer) (*runner.Outcome, error) {
	key, err := o.target.Admit(sc, o.allowProbes, o.noProbes)
	if err != nil {
		return nil, err
	}
	consoleW := cli.ConsoleFor(o.format, stdout, stderr)
	con := runner.NewConsole(consoleW, proc.IsTerminal(consoleW))
	sinks := append([]events.Sink{runner.NewRunDirSink(o.out), con}, o.sinks...)
	outcome, err := runner.RunScenario(ctx, sc, key, o.force, runner.Settings{
		Sinks: sinks, KvbenchVersion: cli.Version(), Console: con,
		NoProbes: o.noProbes || !o.allowProbes, ProbeSecrets: o.probeSecrets,
		EngineInProcess: o.engineInProcess,
		Choices:         o.choices, // the flags, checked as they were parsed
	})
	if err != nil {
		return outcome, setupError(err)
	}
	werr := cli.Emit(stdout, o.format, outcome.Record, func(w io.Writer) error {
		fmt.Fprintln(w)
		return outcome.Record.WriteSummary(w)
	})
	con.Printf("records: %s", outcome.Dir)
	// A run stopped by a closed stdout cannot print its summary there either: its own
	// stop (interrupted) is the error to report, not the second broken pipe.
	if werr != nil && outcomeError(outcome) == nil {
		return outcome, fmt.Errorf("writing the run's summary: %w", werr)
	}
	return outcome, nil
}

// outcomeError maps a failed or interrupted run to exit 1 and failed gates to exit 3.
func outcomeError(o *runner.Outcome) error {
	switch {
	case o.Failed != "":
		return &cli.ExitError{Code: cli.ExitRuntime, Err: fmt.Errorf("run failed: %s; what was measured is in %s", o.Failed, o.Dir)}
	case o.Interrupted:
		return fmt.Errorf("interrupted: what was measured is in %s", o.Dir)
	case o.GateSummary() != "":
		return &cli.ExitError{Code: cli.ExitGateFailed, Err: errors.New(o.GateSummary())}
	}
	return nil
}

// setupError maps a failure before the first request (a URL, server or scenario that is not
// what the run needs) to exit 2; an interrupt stays an interrupt.
func setupError(err error) error {
	var se *runner.SetupError
	if errors.As(err, &se) {
		return cli.UsageError(se.Err)
	}
	return err
}

func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := cli.NewFlagSet("preflight", "SCENARIO [flags]", "kvbench preflight eviction-6x150k-replay --endpoint http://127.0.0.1:8000/v1", stdout)
	var o runOptions
	o.target.Register(fs)
	cli.FormatVar(fs, &o.format, "output: text or json", "text", "json")
	args, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	sc, err := o.target.Scenario("preflight", args)
	if err != nil {
		return err
	}
	key, err := o.target.Key(sc)
	if err != nil {
		return err
	}
	rep, err := runner.PreflightServer(ctx, sc, key, cli.ConsoleFor(o.format, stdout, stderr))
	if err != nil {
		return setupError(err)
	}
	if err := cli.Emit(stdout, o.format, cli.Document{Schema: runner.PreflightSchema, Value: rep}, func(w io.Writer) error { return rep.WriteText(w, sc.Name) }); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return cli.Usagef("%s cannot run on %s: %s", sc.Name, redact.URL(sc.Target.Endpoint), strings.Join(rep.Problems, "; "))
	}
	return nil
}

package main

import (
	"bytes"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/internal/export"
	"github.com/anvil-serving/kvbench/internal/proc"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/internal/termsafe"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "run", summary: "run a scenario and write its records under results/", run: runRun})
	register(command{name: "preflight", summary: "check a server against a scenario without running it", run: runPreflight})
}

// runOptions are the flags run, sweep and demo share.
type runOptions struct {
	target                                     targetFlags
	out, format                                string
	force, noProbes, allowProbes, probeSecrets bool
	repeat                                     int
	salt                                       string // overrides prompt.salt ("random": a fresh one)
	cpuProfile, memProfile                     string
	engineInProcess                            bool          // the server is the demo's engine, in this process
	sinks                                      []events.Sink // after the run directory and the console (a push)
}

func (o *runOptions) register(fsName string, stdout io.Writer, usage, example string) *flag.FlagSet {
	fs := newFlagSet(fsName, usage, example, stdout)
	o.target.register(fs)
	fs.StringVar(&o.out, "out", "results", "directory the run directory is created in")
	formatVar(fs, &o.format, "output: text (console and table) or json (the run record on stdout)", "text", "json")
	fs.BoolVar(&o.force, "force", false, "run even if preflight finds the scenario cannot run here")
	fs.BoolVar(&o.allowProbes, "allow-probes", false, "run the scenario's [[probe]] commands, which run as you on this machine: read them first ('kvbench validate' lists them); a scenario with probes is refused without this or --no-probes")
	fs.BoolVar(&o.noProbes, "no-probes", false, "skip the scenario's probe commands")
	fs.BoolVar(&o.probeSecrets, "probe-secrets", false, "pass probes the environment variables whose names contain KEY, TOKEN, SECRET or PASSWORD (dropped by default; the --api-key-env variable is never passed)")
	fs.Func("repeat", "run the steps `N` times with fresh prompts (seed + k) to measure noise (overrides the scenario's repeat)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > scenarios.MaxRepeat {
			return fmt.Errorf("want a count from 1 to %d", scenarios.MaxRepeat)
		}
		o.repeat = n
		return nil
	})
	fs.Func("salt", "give the prompts fresh bytes of the same shapes, so a server's caches hold none of an earlier run's: letters, digits, '.', '-' and '_', or random for a new salt each run (nightly runs); overrides the scenario's prompt.salt, and compare still compares the runs", func(v string) error {
		o.salt = v
		return scenarios.CheckSalt(v)
	})
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof); KVBENCH_PPROF=DIR sets both profiles")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the whole run to this file at the end")
	return fs
}

// scenario loads the one scenario args name and applies the target flags.
func (o *runOptions) scenario(cmd string, args []string) (*scenarios.Scenario, error) {
	if len(args) == 1 {
		if err := runs.CheckOutputDir(o.out); err != nil {
			return nil, usageErrorf("%s: --out: %w", cmd, err)
		}
	}
	return o.target.scenario(cmd, args)
}

func runRun(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o runOptions
	var push pushFlags
	fs := o.register("run", stdout, "SCENARIO [flags]",
		"kvbench run eviction-6x150k-replay --endpoint http://127.0.0.1:8000/v1\nkvbench run my-study.toml --metrics http://gpu0:8000/metrics --metrics http://gpu1:8001/metrics --format json\nkvbench run smoke --endpoint http://gpu-host:8000/v1 --repeat 3 --push http://pushgateway:9091 --push-label cluster=eu1")
	push.register(fs, "after the records are written, push the run's series to this Prometheus Pushgateway (http://pushgateway:9091); a failed push exits 5 and 'kvbench push' retries it")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if err := push.check(); err != nil {
		return err
	}
	sc, err := o.scenario("run", args)
	if err != nil {
		return err
	}
	stopProfiles, err := startProfiles(o.cpuProfile, o.memProfile)
	if err != nil {
		return err
	}
	// The push sink comes after the run directory's, so it pushes the final run.json; its
	// line is shown after the run's summary and records line, where it always was.
	var pusher *export.Pusher
	var pushed bytes.Buffer
	if push.url != "" {
		pusher = export.NewPusher(ctx, push.opts, &pushed)
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
	key, err := o.admit(sc)
	if err != nil {
		return nil, err
	}
	consoleW := consoleFor(o.format, stdout, stderr)
	con := runner.NewConsole(consoleW, proc.IsTerminal(consoleW))
	sinks := append([]events.Sink{runs.NewRunDirSink(o.out), con}, o.sinks...)
	outcome, err := runner.RunScenario(ctx, sc, key, o.force, runner.Settings{
		Sinks: sinks, KvbenchVersion: kvbenchVersion(), Console: con,
		NoProbes: o.noProbes || !o.allowProbes, ProbeSecrets: o.probeSecrets,
		EngineInProcess: o.engineInProcess,
		Choices:         plan.Choices{Repeat: o.repeat, Salt: o.salt}, // the flags, checked as they were parsed
	})
	if err != nil {
		return outcome, setupError(err)
	}
	werr := emit(stdout, o.format, outcome.Record, func(w io.Writer) error {
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

// admit is everything a run checks before it sends a request (see Resolved.Admit), each
// refusal bad input (exit 2). It returns the key.
func (o *runOptions) admit(sc *scenarios.Scenario) (string, error) {
	key, err := o.target.resolved.Admit(sc, o.allowProbes, o.noProbes)
	return key, usageError(err)
}

// outcomeError maps a failed or interrupted run to exit 1 and failed gates to exit 3.
func outcomeError(o *runner.Outcome) error {
	switch {
	case o.Failed != "":
		return &exitError{code: exitRuntime, err: fmt.Errorf("run failed: %s; what was measured is in %s", o.Failed, o.Dir)}
	case o.Interrupted:
		return fmt.Errorf("interrupted: what was measured is in %s", o.Dir)
	case o.GateSummary() != "":
		return &exitError{code: exitGateFailed, err: errors.New(o.GateSummary())}
	}
	return nil
}

// setupError maps a failure before the first request (a URL, server or scenario that is not
// what the run needs) to exit 2; an interrupt stays an interrupt.
func setupError(err error) error {
	var se *runner.SetupError
	if errors.As(err, &se) {
		return usageError(se.Err)
	}
	return err
}

func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("preflight", "SCENARIO [flags]", "kvbench preflight eviction-6x150k-replay --endpoint http://127.0.0.1:8000/v1", stdout)
	var o runOptions
	o.target.register(fs)
	formatVar(fs, &o.format, "output: text or json", "text", "json")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	sc, err := o.target.scenario("preflight", args)
	if err != nil {
		return err
	}
	if err := o.target.consent(sc); err != nil {
		return err
	}
	key, err := target.APIKey(sc)
	if err != nil {
		return usageError(err)
	}
	rep, err := runner.PreflightServer(ctx, sc, key, consoleFor(o.format, stdout, stderr))
	if err != nil {
		return setupError(err)
	}
	if err := emit(stdout, o.format, rep, func(w io.Writer) error { return rep.WriteText(w, sc.Name) }); err != nil {
		return err
	}
	if len(rep.Problems) > 0 {
		return usageErrorf("%s cannot run on %s: %s", sc.Name, redact.URL(sc.Target.Endpoint), strings.Join(rep.Problems, "; "))
	}
	return nil
}

// preflightError maps a preflight failure to exit 2: every one of them is a server, URL or
// scenario that is not what the run needs. An interrupt stays an interrupt.
func preflightError(ctx context.Context, err error) error {
	if ctx.Err() != nil {
		return err
	}
	return usageError(err)
}

// consoleFor is where a command's progress lines go: stderr when stdout carries JSON.
func consoleFor(format string, stdout, stderr io.Writer) io.Writer {
	if format == "json" {
		return stderr
	}
	return stdout
}

// emit prints v as JSON (format json) or through text, on a writer that keeps a server's
// escape sequences off the terminal.
func emit(stdout io.Writer, format string, v any, text func(io.Writer) error) error {
	if format == "json" {
		return printJSON(stdout, v)
	}
	return text(termsafe.NewWriter(stdout))
}

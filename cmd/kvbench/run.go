package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"os"
	"strings"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runner"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/termsafe"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "run", summary: "run a scenario and write its records under results/", run: runRun})
	register(command{name: "preflight", summary: "check a server against a scenario without running it", run: runPreflight})
}

// runOptions are the flags run and demo share.
type runOptions struct {
	target   targetFlags
	out      string
	format   string
	force    bool
	noProbes bool
	// allowProbes runs the scenario's probe commands; without it or noProbes, a scenario
	// with probes is refused.
	allowProbes  bool
	probeSecrets bool
	repeat       int
	// salt overrides the scenario's prompt.salt ("random": a fresh one for this run).
	salt string
	// cpuProfile and memProfile name pprof files written around the whole run.
	cpuProfile string
	memProfile string
	// engineInProcess: the server is the demo's embedded engine, in this process.
	engineInProcess bool
}

func (o *runOptions) register(fsName string, stdout io.Writer, usage, example string) *flag.FlagSet {
	fs := newFlagSet(fsName, usage, example, stdout)
	o.target.register(fs)
	fs.StringVar(&o.out, "out", "results", "directory the run directory is created in")
	fs.StringVar(&o.format, "format", "text", "output: text (console and table) or json (the run record on stdout)")
	fs.BoolVar(&o.force, "force", false, "run even if preflight finds the scenario cannot run here")
	fs.BoolVar(&o.allowProbes, "allow-probes", false, "run the scenario's [[probe]] commands, which run as you on this machine: read them first ('kvbench validate' lists them); a scenario with probes is refused without this or --no-probes")
	fs.BoolVar(&o.noProbes, "no-probes", false, "skip the scenario's probe commands")
	fs.BoolVar(&o.probeSecrets, "probe-secrets", false, "pass probes the environment variables whose names contain KEY, TOKEN, SECRET or PASSWORD (dropped by default; the --api-key-env variable is never passed)")
	fs.IntVar(&o.repeat, "repeat", 0, "run the steps N times with fresh prompts (seed + k) to measure noise (overrides the scenario's repeat)")
	fs.StringVar(&o.salt, "salt", "", "give the prompts fresh bytes of the same shapes, so a server's caches hold none of an earlier run's: letters, digits, '.', '-' and '_', or random for a new salt each run (nightly runs); overrides the scenario's prompt.salt, and compare still compares the runs")
	fs.StringVar(&o.cpuProfile, "cpuprofile", "", "write a CPU profile of the whole run to this file (go tool pprof); KVBENCH_PPROF=DIR sets both profiles")
	fs.StringVar(&o.memProfile, "memprofile", "", "write an allocation profile of the whole run to this file at the end")
	return fs
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
	if len(args) != 1 {
		return usageErrorf("run: want one scenario file or built-in name, got %d", len(args))
	}
	if o.format != "text" && o.format != "json" {
		return usageErrorf("run: --format must be text or json")
	}
	if err := runs.CheckOutputDir(o.out); err != nil {
		return usageErrorf("run: --out: %w", err)
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return err
	}
	if err := o.target.apply(sc); err != nil {
		return err
	}
	stopProfiles, err := startProfiles(o.cpuProfile, o.memProfile)
	if err != nil {
		return err
	}
	outcome, err := runScenario(ctx, sc, o, stdout, stderr)
	if perr := stopProfiles(); err == nil && perr != nil {
		return perr
	}
	if err != nil {
		return err
	}
	if push.url != "" {
		return pushAfterRun(ctx, &push, outcome.Dir, outcomeError(outcome), stderr)
	}
	return outcomeError(outcome)
}

// runScenario preflights and runs sc, printing the console to stderr (json) or stdout (text).
func runScenario(ctx context.Context, sc *scenarios.Scenario, o runOptions, stdout, stderr io.Writer) (*runner.Outcome, error) {
	consoleW := stdout
	if o.format == "json" {
		consoleW = stderr
	}
	if o.repeat < 0 || o.repeat > scenarios.MaxRepeat {
		return nil, usageErrorf("--repeat must be between 1 and %d", scenarios.MaxRepeat)
	}
	if o.repeat > 0 {
		sc.Repeat = o.repeat
	}
	if o.salt != "" {
		if err := sc.SetSalt(o.salt); err != nil {
			return nil, usageError(err)
		}
	}
	if err := sc.ResolveSalt(); err != nil {
		return nil, err
	}
	key, err := o.admit(sc)
	if err != nil {
		return nil, err
	}
	con := runner.NewConsole(consoleW, isTerminal(consoleW))
	t, err := runner.Connect(sc, key)
	if err != nil {
		return nil, usageError(err)
	}
	con.Printf("%s", destination(sc))
	con.Printf("preflight %s against %s", sc.Name, redact.URL(sc.Target.Endpoint))
	rep, p, err := runner.Preflight(ctx, sc, t)
	if err != nil {
		return nil, preflightError(ctx, err)
	}
	rep.WriteBrief(con)
	if len(rep.Problems) > 0 && !o.force {
		return nil, usageErrorf("%s cannot run on %s: %s (--force to run anyway)", sc.Name, redact.URL(sc.Target.Endpoint), strings.Join(rep.Problems, "; "))
	}
	cfg := runner.NewConfig(sc, t, rep, p, runner.Settings{
		ResultsDir: o.out, KvbenchVersion: kvbenchVersion(), Console: con,
		NoProbes: o.noProbes || !o.allowProbes, ProbeSecrets: o.probeSecrets,
		EngineInProcess: o.engineInProcess,
	})
	outcome, err := runner.Run(ctx, cfg)
	if err != nil {
		return outcome, err
	}
	var werr error
	if o.format == "json" {
		werr = printJSON(stdout, outcome.Record)
	} else {
		fmt.Fprintln(stdout)
		werr = outcome.Record.WriteSummary(termsafe.NewWriter(stdout))
	}
	con.Printf("records: %s", outcome.Dir)
	// A run stopped by a closed stdout cannot print its summary there either: its own
	// stop (interrupted) is the error to report, not the second broken pipe.
	if werr != nil && outcomeError(outcome) == nil {
		return outcome, fmt.Errorf("writing the run's summary: %w", werr)
	}
	return outcome, nil
}

// admit is everything a run checks before it sends a request, each refusal bad input (exit
// 2): the user's consent to where requests go and which key goes with them, to the
// scenario's probes, and the key itself. It returns the key.
func (o *runOptions) admit(sc *scenarios.Scenario) (string, error) {
	if err := o.target.consent(sc); err != nil {
		return "", err
	}
	if err := probeConsent(sc, o.allowProbes, o.noProbes); err != nil {
		return "", err
	}
	return apiKey(sc)
}

// outcomeError maps an interrupted run or failed gates to their exit codes.
func outcomeError(o *runner.Outcome) error {
	if o.Failed != "" {
		return &exitError{code: exitRuntime, err: fmt.Errorf("run failed: %s; what was measured is in %s", o.Failed, o.Dir)}
	}
	if o.Interrupted {
		return fmt.Errorf("interrupted: what was measured is in %s", o.Dir)
	}
	if failed := o.GatesFailed(); len(failed) > 0 {
		var why []string
		for _, g := range failed {
			why = append(why, fmt.Sprintf("%s: %s", g.Gate.Step, g.Reason))
		}
		return &exitError{code: exitGateFailed, err: fmt.Errorf("%d gate(s) failed: %s", len(failed), strings.Join(why, "; "))}
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

func runPreflight(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("preflight", "SCENARIO [flags]", "kvbench preflight eviction-6x150k-replay --endpoint http://127.0.0.1:8000/v1", stdout)
	var tf targetFlags
	tf.register(fs)
	format := fs.String("format", "text", "output: text or json")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("preflight: want one scenario file or built-in name, got %d", len(args))
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return err
	}
	if err := tf.apply(sc); err != nil {
		return err
	}
	if err := tf.consent(sc); err != nil {
		return err
	}
	key, err := apiKey(sc)
	if err != nil {
		return err
	}
	t, err := runner.Connect(sc, key)
	if err != nil {
		return usageError(err)
	}
	say := stdout
	if *format == "json" {
		say = stderr
	}
	fmt.Fprintln(say, destination(sc))
	rep, _, err := runner.Preflight(ctx, sc, t)
	if err != nil {
		return preflightError(ctx, err)
	}
	if *format == "json" {
		if err := printJSON(stdout, rep); err != nil {
			return err
		}
	} else {
		if err := rep.WriteText(termsafe.NewWriter(stdout), sc.Name); err != nil {
			return err
		}
	}
	if len(rep.Problems) > 0 {
		return usageErrorf("%s cannot run on %s: %s", sc.Name, redact.URL(sc.Target.Endpoint), strings.Join(rep.Problems, "; "))
	}
	return nil
}

// isTerminal reports whether w is a terminal (live console lines).
func isTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	if !ok {
		return false
	}
	st, err := f.Stat()
	return err == nil && st.Mode()&os.ModeCharDevice != 0 && isTTY(f.Fd())
}

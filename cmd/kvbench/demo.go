package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runner"
	"github.com/anvil-serving/kvbench/sim"
	"github.com/anvil-serving/kvbench/harness/study"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "demo", summary: "the whole job on the embedded engine: seed study 001, merged record, accounting", run: runDemo})
}

// demoRun is one of the demo's two runs.
type demoRun struct {
	scenario string
	profile  string
	endpoint string
	outcome  *runner.Outcome
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[--endpoint URL] [--out DIR]",
		"kvbench demo                                        # embedded engine, no GPU\nkvbench demo --endpoint http://gpu-host:8000/v1     # the same studies on a real server", stdout)
	endpoint := fs.String("endpoint", "", "run both studies against this server instead of the embedded engine")
	controlEndpoint := fs.String("control-endpoint", "", "server for the offload8 control (default: --endpoint)")
	out := fs.String("out", "results", "directory the demo directory is created in")
	speed := fs.Float64("speed", 0, "embedded engine time scale (default: the profiles' own, 100x)")
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	runs := []*demoRun{
		{scenario: "eviction-6x150k-replay", profile: "dsv4-offload16", endpoint: *endpoint},
		{scenario: "offload8-control", profile: "dsv4-offload8", endpoint: *endpoint},
	}
	if *controlEndpoint != "" {
		runs[1].endpoint = *controlEndpoint
	}
	for _, r := range runs {
		if r.endpoint != "" {
			continue
		}
		srv, err := sim.Start(sim.Options{Profile: r.profile, Speed: *speed})
		if err != nil {
			return fmt.Errorf("starting the embedded engine: %w", err)
		}
		defer srv.Close()
		r.endpoint = srv.URL() + "/v1"
		fmt.Fprintf(stdout, "embedded engine %s on %s\n", r.profile, srv.URL())
	}
	dir, err := record.NewRunDir(*out, "demo", time.Now())
	if err != nil {
		return err
	}
	for _, r := range runs {
		sc, err := scenarios.Builtin(r.scenario)
		if err != nil {
			return err
		}
		tf := targetFlags{endpoint: r.endpoint}
		if err := tf.apply(sc); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		r.outcome, err = runScenario(ctx, sc, runOptions{out: dir, format: "text"}, stdout, stderr)
		if err != nil {
			return err
		}
		if r.outcome.Interrupted {
			return outcomeError(r.outcome)
		}
	}
	loaded, err := loadRunDirs([]string{runs[0].outcome.Dir, runs[1].outcome.Dir})
	if err != nil {
		return err
	}
	studyRec, err := study.Summarize(loaded, dir, false)
	if err != nil {
		return err
	}
	if _, err := record.WriteJSON(filepath.Join(dir, "study.json"), studyRec); err != nil {
		return err
	}
	acc, err := study.Accounting(loaded, study.PoolSpec{GPUs: 1}, dir)
	if err != nil {
		return err
	}
	if _, err := record.WriteJSON(filepath.Join(dir, "accounting.json"), acc); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	printDemoTable(stdout, runs[0].outcome, runs[1].outcome)
	fmt.Fprintf(stdout, "\nrecords: %s (study.json, accounting.json and one directory per run)\n", dir)
	if err := outcomeError(runs[0].outcome); err != nil {
		return err
	}
	return outcomeError(runs[1].outcome)
}

// printDemoTable is the demo's verdict table: what seed study 001 set out to prove.
func printDemoTable(w io.Writer, eviction, control *runner.Outcome) {
	fmt.Fprintln(w, "seed study 001, reproduced")
	seq, _ := eviction.Record.Get("eviction_sequence")
	rep, _ := eviction.Record.Get("replay")
	s, _ := seq.(record.SequenceSection)
	r, _ := rep.(record.ReplaySection)
	fmt.Fprintf(w, "  %-26s %s\n", "store proven", yesNo(s.StoreProven, fmt.Sprintf("%s bytes GPU->CPU during eviction_sequence", runner.FormatCount(s.GPUToCPUBytesDelta, "absent"))))
	if r.Capacity != nil {
		a := r.Capacity
		fmt.Fprintf(w, "  %-26s %s: %d unique tokens vs a %d-token GPU pool\n", "eviction pressure", a.EvictionPressure, a.UniqueTokens, a.Setup.GPUKVTokens)
	}
	fmt.Fprintf(w, "  %-26s %s, cached fraction %s, %s external hits, %s bytes CPU->GPU\n", "replay verdict", r.Verdict, runner.FormatFraction(r.CachedFraction), runner.FormatCount(r.ExternalPrefixHitsDelta, "absent"), runner.FormatCount(r.CPUToGPUBytesDelta, "absent"))
	fmt.Fprintf(w, "  %-26s %s ms cold vs %s ms replay\n", "time to first output", runner.FormatMS(r.OriginalTimeToFirstOutputMS), runner.FormatMS(r.TimeToFirstOutputMS))
	fmt.Fprintf(w, "  %-26s %s\n", "setup valid", r.SetupValid)
	ctlAny, _ := control.Record.Get("offload8_control")
	c, _ := ctlAny.(record.ControlSection)
	fmt.Fprintf(w, "  %-26s %s, cached fraction %s, %s bytes CPU->GPU\n", "offload8 control verdict", c.ReplayVerdict, runner.FormatFraction(c.ReplayCachedFraction), runner.FormatCount(c.CPUToGPUBytesAfter, "absent"))
	fmt.Fprintf(w, "  %-26s %s: %s\n", "offload8 control valid", c.SetupValid, c.Interpretation)
}

func yesNo(ok bool, detail string) string {
	if ok {
		return "yes: " + detail
	}
	return "no: " + detail
}

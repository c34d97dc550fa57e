package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"time"

	"github.com/anvil-serving/kvbench/harness/runner"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/study"
	"github.com/anvil-serving/kvbench/scenarios"
	"github.com/anvil-serving/kvbench/sim"
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
	studies := []*demoRun{
		{scenario: "eviction-6x150k-replay", profile: "dsv4-offload16", endpoint: *endpoint},
		{scenario: "offload8-control", profile: "dsv4-offload8", endpoint: *endpoint},
	}
	if *controlEndpoint != "" {
		studies[1].endpoint = *controlEndpoint
	}
	for _, r := range studies {
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
	dir, err := runs.NewRunDir(*out, "demo", time.Now())
	if err != nil {
		return err
	}
	for _, r := range studies {
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
	loaded, err := loadRunDirs([]string{studies[0].outcome.Dir, studies[1].outcome.Dir})
	if err != nil {
		return err
	}
	studyRec, err := study.Summarize(loaded, dir, false)
	if err != nil {
		return err
	}
	if _, err := runs.WriteJSON(filepath.Join(dir, "study.json"), studyRec); err != nil {
		return err
	}
	acc, err := study.Accounting(loaded, study.PoolSpec{GPUs: 1}, dir)
	if err != nil {
		return err
	}
	if _, err := runs.WriteJSON(filepath.Join(dir, "accounting.json"), acc); err != nil {
		return err
	}
	fmt.Fprintln(stdout)
	study.WriteSeedTable(stdout, studies[0].outcome.Record, studies[1].outcome.Record)
	fmt.Fprintf(stdout, "\nrecords: %s (study.json, accounting.json and one directory per run)\n", dir)
	if err := outcomeError(studies[0].outcome); err != nil {
		return err
	}
	return outcomeError(studies[1].outcome)
}

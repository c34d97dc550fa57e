package main

import (
	"context"
	"fmt"
	"io"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/study"
	"github.com/anvil-serving/kvbench/scenarios"
	"github.com/anvil-serving/kvbench/sim"
)

func init() {
	register(command{name: "demo", summary: "the whole job on the embedded engine: seed study 001, merged record, accounting", run: runDemo})
}

// demoRun is one of the demo's two runs: a built-in scenario on a server (the embedded
// engine's profile unless an endpoint is given).
type demoRun struct {
	scenario, profile, endpoint string
	metrics                     []string // nil: the endpoint's /metrics
	outcome                     *runner.Outcome
}

func runDemo(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	fs := newFlagSet("demo", "[--engine NAME] [--endpoint URL] [--out DIR]",
		"kvbench demo                                        # embedded engine, no GPU\nkvbench demo --engine sglang                        # the same studies in SGLang HiCache's dialect\nkvbench demo --endpoint http://gpu-host:8000/v1     # the same studies on a real server", stdout)
	endpoint := fs.String("endpoint", "", "run both studies against this server instead of the embedded engine")
	controlEndpoint := fs.String("control-endpoint", "", "server for the offload8 control (default: --endpoint)")
	out := fs.String("out", "results", "directory the demo directory is created in")
	speed := fs.Float64("speed", 0, "embedded engine time scale (default: the profiles' own, 100x)")
	engineName := fs.String("engine", engine.Default, "engine whose dialect the studies run against: "+strings.Join(engine.Names(), ", "))
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	def, err := engine.ByName(*engineName)
	if err != nil {
		return usageErrorf("--engine: %v", err)
	}
	var studies []*demoRun
	for _, s := range study.DemoStudies(def.Name) {
		studies = append(studies, &demoRun{scenario: s.Scenario, profile: s.Profile, endpoint: *endpoint})
	}
	if *controlEndpoint != "" {
		studies[1].endpoint = *controlEndpoint
	}
	for _, r := range studies {
		if r.endpoint != "" {
			continue
		}
		if !slices.Contains(sim.Dialects, def.Name) || def.Topology != capacity.SharedPool {
			// llama.cpp's dialect is served for its metrics and calls; the studies need its single slot.
			return usageErrorf("--engine %s: the embedded engine does not speak it for these studies (it models a shared GPU pool); give --endpoint", def.Name)
		}
		srv, err := sim.Start(sim.Options{Profile: r.profile, Speed: *speed, Override: func(p *sim.Profile) {
			p.SetDialect(def.Name, "")
			if def.Name == sim.DialectLMCache {
				p.TensorParallelSize = 2 // LMCache's counters are per TP rank: two of them
			}
		}})
		if err != nil {
			return fmt.Errorf("starting the embedded engine: %w", err)
		}
		defer srv.Close()
		r.endpoint = srv.URL() + "/v1"
		fmt.Fprintf(stdout, "embedded engine %s on %s\n", r.profile, srv.URL())
		if def.Name != engine.Default {
			r.metrics = srv.MetricsURLs()
			fmt.Fprintf(stdout, "  speaking %s: metrics at %s\n", def.Name, strings.Join(r.metrics, " "))
		}
	}
	if err := runs.CheckOutputDir(*out); err != nil {
		return usageErrorf("demo: --out: %w", err)
	}
	dir, err := runs.NewRunDir(*out, "demo", time.Now())
	if err != nil {
		return err
	}
	var dirs []string
	for _, r := range studies {
		sc, err := scenarios.Builtin(r.scenario)
		if err != nil {
			return err
		}
		o := runOptions{out: dir, format: "text", engineInProcess: true}
		o.target.Endpoint, o.target.metrics = r.endpoint, r.metrics
		if def.Name != engine.Default {
			o.target.Backend = def.Name
		}
		if err := o.target.apply(sc); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		if r.outcome, err = runScenario(ctx, sc, o, stdout, stderr); err != nil {
			return err
		}
		if r.outcome.Interrupted {
			return outcomeError(r.outcome)
		}
		dirs = append(dirs, r.outcome.Dir)
	}
	loaded, err := loadRunDirs(dirs)
	if err != nil {
		return err
	}
	files, err := study.WriteDemo(stdout, dir, loaded[0], loaded[1], def.Name != engine.Default)
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nrecords: %s (%s and one directory per run)\n", dir, strings.Join(files, ", "))
	if err := outcomeError(studies[0].outcome); err != nil {
		return err
	}
	return outcomeError(studies[1].outcome)
}

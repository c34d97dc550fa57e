package main

import (
	"context"
	"fmt"
	"io"
	"path/filepath"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
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
	metrics  []string // nil: the endpoint's /metrics
	outcome  *runner.Outcome
}

// demoScenario is the engine's own built-in for a study where it needs different defaults
// (endpoint port, metrics URLs, gates), else the vLLM one run with the engine's backend.
func demoScenario(engineName, base, suffix string) string {
	if engineName == engine.Default {
		return base
	}
	if slices.Contains(scenarios.BuiltinNames(), engineName+suffix) {
		return engineName + suffix
	}
	return base
}

// speakDialect makes the embedded engine speak engineName's dialect: a connector's tier
// (LMCache, KVBM) has no vLLM offload families, and LMCache runs two TP ranks.
func speakDialect(engineName string) func(*sim.Profile) {
	return func(p *sim.Profile) {
		p.Dialect = engineName
		if engineName != sim.DialectVLLM {
			p.FlatOffloadMetrics, p.LabelledOffloadMetrics = false, false
		}
		if engineName == sim.DialectLMCache {
			p.TensorParallelSize = 2
		}
	}
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
	studies := []*demoRun{
		{scenario: demoScenario(def.Name, "eviction-6x150k-replay", "-eviction-replay"), profile: "dsv4-offload16", endpoint: *endpoint},
		{scenario: demoScenario(def.Name, "offload8-control", "-offload8-control"), profile: "dsv4-offload8", endpoint: *endpoint},
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
		srv, err := sim.Start(sim.Options{Profile: r.profile, Speed: *speed, Override: speakDialect(def.Name)})
		if err != nil {
			return fmt.Errorf("starting the embedded engine: %w", err)
		}
		defer srv.Close()
		r.endpoint = srv.URL() + "/v1"
		if def.Name != engine.Default {
			r.metrics = srv.MetricsURLs()
		}
		fmt.Fprintf(stdout, "embedded engine %s on %s\n", r.profile, srv.URL())
		if def.Name != engine.Default {
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
	for _, r := range studies {
		sc, err := scenarios.Builtin(r.scenario)
		if err != nil {
			return err
		}
		tf := targetFlags{endpoint: r.endpoint, metrics: r.metrics}
		if def.Name != engine.Default {
			tf.backend = def.Name
		}
		if err := tf.apply(sc); err != nil {
			return err
		}
		fmt.Fprintln(stdout)
		r.outcome, err = runScenario(ctx, sc, runOptions{out: dir, format: "text", engineInProcess: true}, stdout, stderr)
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
	files := "study.json, accounting.json"
	acc, err := study.Accounting(loaded, study.PoolSpec{GPUs: 1}, dir)
	switch {
	case err != nil && def.Name != engine.Default:
		// Engines that count stores in tokens or blocks measure no bytes per token, so the
		// pool cannot be sized from the runs alone.
		fmt.Fprintf(stdout, "\naccounting skipped: %v\n", err)
		files = "study.json"
	case err != nil:
		return err
	default:
		if _, err := runs.WriteJSON(filepath.Join(dir, "accounting.json"), acc); err != nil {
			return err
		}
	}
	fmt.Fprintln(stdout)
	if err := study.WriteSeedTable(stdout, studies[0].outcome.Record, studies[1].outcome.Record); err != nil {
		return err
	}
	fmt.Fprintf(stdout, "\nrecords: %s (%s and one directory per run)\n", dir, files)
	if err := outcomeError(studies[0].outcome); err != nil {
		return err
	}
	return outcomeError(studies[1].outcome)
}

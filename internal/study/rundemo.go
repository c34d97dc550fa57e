package study

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
	"github.com/anvil-serving/kvbench/scenarios"
	"github.com/anvil-serving/kvbench/sim"
)

// DemoOptions are the demo's choices: the engine whose dialect the studies run against,
// the servers (empty: the embedded engine), the directory the demo's directory is made in,
// and the embedded engine's time scale (0: its profiles' own).
type DemoOptions struct {
	Engine                    *engine.Definition
	Endpoint, ControlEndpoint string
	Out                       string
	Speed                     float64
}

// DemoTarget is where one of the demo's runs sends its requests: Metrics nil means the
// endpoint's /metrics, Backend "" the default engine.
type DemoTarget struct {
	Endpoint, Backend string
	Metrics           []string
}

// DemoRun runs sc against t with its run directory under dir, as 'kvbench run' does, and
// returns the run directory; an interrupted run is its error.
type DemoRun func(ctx context.Context, sc *scenarios.Scenario, t DemoTarget, dir string) (string, error)

// InputError is a demo the user asked for that cannot run as asked (an engine the embedded
// engine does not speak for these studies, an output directory it may not write, a run
// directory that does not load): bad input, not a failed run.
type InputError struct{ Err error }

func (e *InputError) Error() string { return e.Err.Error() }
func (e *InputError) Unwrap() error { return e.Err }

// RunDemo is the whole job on the embedded engine (or the servers o names): it starts an
// embedded engine per study where no endpoint is given, runs seed study 001's eviction
// replay and its control into one demo directory, then writes the merged study record,
// the accounting and the seed table (WriteDemo). It says on w what it does.
func RunDemo(ctx context.Context, w io.Writer, o DemoOptions, run DemoRun) error {
	def := o.Engine
	type study struct {
		scenario, profile string
		target            DemoTarget
	}
	var studies []*study
	for _, s := range DemoStudies(def.Name) {
		studies = append(studies, &study{scenario: s.Scenario, profile: s.Profile, target: DemoTarget{Endpoint: o.Endpoint}})
	}
	if o.ControlEndpoint != "" {
		studies[1].target.Endpoint = o.ControlEndpoint
	}
	if def.Name != engine.Default {
		for _, s := range studies {
			s.target.Backend = def.Name
		}
	}
	for _, s := range studies {
		if s.target.Endpoint != "" {
			continue
		}
		if !slices.Contains(sim.Dialects, def.Name) || def.Topology != capacity.SharedPool {
			// llama.cpp's dialect is served for its metrics and calls; the studies need its single slot.
			return &InputError{fmt.Errorf("--engine %s: the embedded engine does not speak it for these studies (it models a shared GPU pool); give --endpoint", def.Name)}
		}
		srv, err := sim.Start(sim.Options{Profile: s.profile, Speed: o.Speed, Override: func(p *sim.Profile) {
			p.SetDialect(def.Name, "")
			if def.Name == sim.DialectLMCache {
				p.TensorParallelSize = 2 // LMCache's counters are per TP rank: two of them
			}
		}})
		if err != nil {
			return fmt.Errorf("starting the embedded engine: %w", err)
		}
		defer srv.Close()
		s.target.Endpoint = srv.URL() + "/v1"
		fmt.Fprintf(w, "embedded engine %s on %s\n", s.profile, srv.URL())
		if def.Name != engine.Default {
			s.target.Metrics = srv.MetricsURLs()
			fmt.Fprintf(w, "  speaking %s: metrics at %s\n", def.Name, strings.Join(s.target.Metrics, " "))
		}
	}
	if err := runs.CheckOutputDir(o.Out); err != nil {
		return &InputError{fmt.Errorf("demo: --out: %w", err)}
	}
	dir, err := runs.NewRunDir(o.Out, "demo", time.Now())
	if err != nil {
		return err
	}
	var dirs []string
	for _, s := range studies {
		sc, err := scenarios.Builtin(s.scenario)
		if err != nil {
			return err
		}
		fmt.Fprintln(w)
		d, err := run(ctx, sc, s.target, dir)
		if err != nil {
			return err
		}
		dirs = append(dirs, d)
	}
	loaded, err := runs.LoadAll(dirs)
	if err != nil {
		return &InputError{err}
	}
	files, err := WriteDemo(w, dir, loaded[0], loaded[1], def.Name != engine.Default)
	if err != nil {
		return err
	}
	fmt.Fprintf(w, "\nrecords: %s (%s and one directory per run)\n", dir, strings.Join(files, ", "))
	return nil
}

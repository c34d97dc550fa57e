package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{
		name:    "counters",
		summary: "print the normalized KV counters read from /metrics URLs or saved files",
		run:     runCounters,
	})
}

// runCounters reads every argument as one metrics source of the same target and prints the
// summed readings as JSON, with the metric each came from.
func runCounters(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("counters", "URL|FILE... [--backend NAME] [--metric COUNTER=SELECTOR]...",
		"kvbench counters http://localhost:8000/metrics\n"+
			"kvbench counters saved.prom --metric external_prefix_hits='myfork:ext_hits_total'",
		stdout)
	backend := fs.String("backend", engine.Default, "engine (metric names): "+strings.Join(engine.Names(), ", "))
	var overrides stringList
	fs.Var(&overrides, "metric", "read `COUNTER=SELECTOR` from another metric, e.g. "+
		`load_bytes='vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}'; repeatable`)
	timeout := fs.Duration("timeout", 30*time.Second, "limit for each /metrics request")
	format := fs.String("format", "json", "output: json (the only format: counters always prints JSON)")
	sources, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if *format != "json" {
		return usageErrorf("counters: --format must be json")
	}
	if len(sources) == 0 {
		return usageErrorf("counters: give at least one /metrics URL or saved exposition file")
	}
	profile, err := counterProfile(*backend, overrides)
	if err != nil {
		return usageError(err)
	}
	client := &http.Client{Timeout: *timeout}
	exps := make([]metrics.Exposition, 0, len(sources))
	for _, src := range sources {
		var exp metrics.Exposition
		if scenarios.IsHTTPURL(src) {
			exp, err = metrics.Scrape(ctx, client, src)
		} else {
			exp, err = metrics.ParseFile(src)
		}
		if err != nil {
			return usageError(err)
		}
		exps = append(exps, exp)
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(profile.Snapshot(exps...))
}

// counterProfile resolves --backend and the --metric overrides.
func counterProfile(backend string, overrides []string) (metrics.Profile, error) {
	def, err := engine.ByName(backend)
	if err != nil {
		return metrics.Profile{}, fmt.Errorf("--backend: %w", err)
	}
	profile := def.Profile()
	if len(overrides) == 0 {
		return profile, nil
	}
	byName := map[string]string{}
	for _, o := range overrides {
		name, selector, ok := strings.Cut(o, "=")
		if !ok || strings.TrimSpace(name) == "" {
			return metrics.Profile{}, fmt.Errorf("--metric %q: want COUNTER=SELECTOR", o)
		}
		byName[strings.TrimSpace(name)] = selector
	}
	return profile.WithOverrides(byName)
}

package main

import (
	"context"
	"encoding/json"
	"io"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/internal/cli"
)

func init() {
	cli.Register(cli.Command{Name: "counters", Summary: "print the normalized KV counters read from /metrics URLs or saved files", AlwaysJSON: true, Run: runCounters})
}

// runCounters prints as JSON the summed readings of its sources (one target's), and their metrics.
func runCounters(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("counters", "URL|FILE... [--backend NAME] [--metric COUNTER=SELECTOR]...",
		"kvbench counters http://localhost:8000/metrics\n"+
			"kvbench counters saved.prom --metric external_prefix_hits='myfork:ext_hits_total'", stdout)
	backend := fs.String("backend", engine.Default, "engine (metric names): "+strings.Join(engine.Names(), ", "))
	var overrides cli.StringList
	fs.Var(&overrides, "metric", "read `COUNTER=SELECTOR` from another metric, e.g. "+
		`load_bytes='vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}'; repeatable`)
	timeout := fs.Duration("timeout", 30*time.Second, "limit for each /metrics request")
	var format string
	cli.FormatVar(fs, &format, "output: json (the only format: counters always prints JSON)", "json")
	sources, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(sources) == 0 {
		return cli.Usagef("counters: give at least one /metrics URL or saved exposition file")
	}
	snap, err := engine.ReadCounters(ctx, *backend, overrides, *timeout, sources)
	if err != nil {
		return cli.UsageError(err) // an engine, override or source that is not what it must be
	}
	enc := json.NewEncoder(stdout)
	enc.SetIndent("", "  ")
	enc.SetEscapeHTML(false)
	return enc.Encode(cli.Document{Schema: engine.CountersSchema, Value: snap})
}

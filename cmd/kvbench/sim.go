package main

import (
	"context"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

func init() {
	cli.Register(cli.Command{Name: "sim", Summary: "serve the embedded vLLM-compatible engine (no GPU needed)", Run: runSim})
}

func runSim(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := cli.NewFlagSet("sim", "[--profile NAME | --profile-file FILE] [--addr HOST:PORT] [--speed X] [--api-key-env VAR] [--allow-remote] [--data-parallel N --router POLICY] [fault flags]",
		"kvbench sim --profile dsv4-offload16 --speed 50\n"+
			"curl -s http://127.0.0.1:8000/metrics | grep kv_offload\n"+
			"# rehearse faults: every 5th chat a 500, /tokenize hangs, no GPU prefix-hit counter,\n"+
			"# NaN prompt tokens, /metrics dead after 20 scrapes\n"+
			"kvbench sim --profile tiny --fail-every 5 --hang /tokenize --omit-metric vllm:prefix_cache_hits_total \\\n"+
			"  --metric-value vllm:prompt_tokens_total=NaN --metrics-fault error --metrics-fault-after 20\n"+
			"# two replicas, each with its own caches, requests sent in turn\n"+
			"kvbench sim --profile tiny --data-parallel 2 --router round-robin", stdout)
	options := sim.RegisterFlags(fs)
	positional, err := cli.Parse(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return cli.Usagef("sim: unexpected arguments %q", positional)
	}
	opts, err := options()
	if err != nil {
		return cli.Usagef("sim: %v", err) // flags, the profile, or the two together
	}
	srv, err := sim.Start(opts)
	if err != nil {
		return fmt.Errorf("sim: %w", err) // the address is taken, or not ours to listen on
	}
	fmt.Fprint(stdout, srv.Banner())
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("sim: stop: %w", err)
	}
	return nil
}

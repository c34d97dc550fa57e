package main

import (
	"context"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/termsafe"
)

func init() {
	cli.Register(cli.Command{Name: "trace", Summary: "analyze a Mooncake-format KV-cache trace (ideal LRU hit rates, tier shares) or generate one", Run: runTrace})
}

const traceUsage = `Usage: kvbench trace analyze FILE [flags]
       kvbench trace generate [flags] [-o FILE]

analyze computes, from the trace alone, the prefix-cache hit rate an LRU cache of each
capacity would reach, an unbounded cache's, and with --gpu-tokens and --host-tokens the
GPU / host / recompute shares of a GPU cache plus a write-through host tier.
generate writes a seeded conversation-shaped trace (multi-turn reuse, shared system prompts).
The format and the definitions: docs/traces.md.

Example:
  kvbench trace generate --requests 2000 -o conversation.jsonl
  kvbench trace analyze conversation.jsonl --capacity-tokens 1e6,3e6,1e7 --gpu-tokens 1e6 --host-tokens 1e7

Run 'kvbench trace analyze -h' or 'kvbench trace generate -h' for their flags.
`

func runTrace(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, traceUsage)
		return cli.Usagef("trace: name a subcommand: analyze or generate")
	}
	switch args[0] {
	case "analyze":
		return runTraceAnalyze(ctx, args[1:], stdout)
	case "generate":
		return runTraceGenerate(args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, traceUsage)
		return nil
	}
	return cli.Usagef("trace: unknown subcommand %q (analyze or generate)", args[0])
}

func runTraceAnalyze(ctx context.Context, args []string, stdout io.Writer) error {
	flags := cli.NewFlagSet("trace analyze", "FILE [flags]",
		"kvbench trace analyze conversation_trace.jsonl\n"+
			"kvbench trace analyze conversation_trace.jsonl --capacity-tokens 1e6,3e6,1e7 --gpu-tokens 1e6 --host-tokens 1e7 --format json\n"+
			"kvbench trace analyze conversation_trace.jsonl --start 10m --duration 5m --max-input-tokens 32768", stdout)
	analysis := trace.RegisterAnalyzeFlags(flags)
	var format string
	cli.FormatVar(flags, &format, "output: text or json", "text", "json")
	args, err := cli.Parse(flags, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return cli.Usagef("trace analyze: want one trace file, got %d arguments", len(args))
	}
	cfg, window, err := analysis()
	if err != nil {
		return cli.Usagef("trace analyze: %w", err)
	}
	a, err := trace.AnalyzeFile(ctx, args[0], window, cfg)
	if err != nil {
		return cli.InputError(ctx, err) // a bad file, a bad line or an empty window
	}
	if format == "json" {
		return cli.PrintJSON(stdout, cli.Document{Schema: trace.AnalysisSchema, Value: a})
	}
	return a.WriteText(termsafe.NewWriter(stdout)) // the file's name is the user's bytes
}

func runTraceGenerate(args []string, stdout io.Writer) error {
	flags := cli.NewFlagSet("trace generate", "[flags] [-o FILE]",
		"kvbench trace generate -o conversation.jsonl   # like the public conversation trace: 12,031 requests in an hour\n"+
			"kvbench trace generate --seed 7 --requests 200 --scale 0.03125 --block-tokens 16 -o small.jsonl", stdout)
	config := trace.RegisterGeneratorFlags(flags)
	out := flags.String("o", "", "write the trace to this new file (never overwritten) instead of stdout")
	args, err := cli.Parse(flags, args)
	if err != nil {
		return err
	}
	if len(args) != 0 {
		return cli.Usagef("trace generate: unexpected argument %q (the output file goes after -o)", args[0])
	}
	cfg := config()
	g, err := trace.NewGenerator(cfg)
	if err != nil {
		return cli.Usagef("trace generate: %w", err) // one line: exitCode joins the problems with "; "
	}
	var n int
	write := func(w io.Writer) (err error) { n, err = trace.WriteJSONL(w, g); return err }
	if *out == "" {
		return write(stdout)
	}
	if _, err := runs.WriteOutputFrom(*out, write); err != nil {
		return cli.OutputError("-o", *out, err)
	}
	fmt.Fprintf(stdout, "trace: %s (%d requests, blocks of %d tokens)\n", termsafe.String(*out), n, cfg.BlockTokens)
	return nil
}

package main

import (
	"context"
	"flag"
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/traceimport"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/termsafe"
	"github.com/anvil-serving/kvbench/internal/tierplan"
)

func init() {
	cli.Register(cli.Command{Name: "trace", Summary: "analyze a Mooncake-format KV-cache trace (ideal LRU hit rates, tier shares), generate one, or import one from a request log, its text left out", Run: runTrace})
}

const traceUsage = `Usage: kvbench trace analyze FILE [flags]
       kvbench trace size (FILE --gpu-tokens N | [FILE] --from RUN | --calibrate RUN) [--host 0,8GiB,...] [flags]
       kvbench trace generate [flags] [-o FILE]
       kvbench trace import LOG (--endpoint URL | --tokenizer URL) -o FILE [flags]

analyze computes, from the trace alone, the prefix-cache hit rate an LRU cache of each
capacity would reach, an unbounded cache's, and with --gpu-tokens and --host-tokens the
GPU / host / recompute shares of a GPU cache plus a write-through host tier (size: at many
host-tier sizes in one pass, under an engine's write policy, with the knee).
generate writes a seeded conversation-shaped trace. Formats and definitions: docs/traces.md.

Example:
  kvbench trace generate --requests 2000 -o conversation.jsonl
  kvbench trace analyze conversation.jsonl --capacity-tokens 1e6,3e6,1e7 --gpu-tokens 1e6 --host-tokens 1e7

Run 'kvbench trace analyze -h', 'kvbench trace size -h', 'kvbench trace generate -h' or
'kvbench trace import -h' for their flags.
`

func runTrace(ctx context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, traceUsage)
		return cli.Usagef("trace: name a subcommand: analyze, size, generate or import")
	}
	switch args[0] {
	case "analyze":
		return runTraceFile(ctx, "analyze", trace.AnalyzeExamples, trace.AnalyzeJob, args[1:], stdout)
	case "size":
		return runTraceFile(ctx, "size", trace.SizeExamples, tierplan.SizeJob, args[1:], stdout)
	case "generate":
		return runTraceGenerate(args[1:], stdout)
	case "import":
		return runTraceImport(ctx, args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, traceUsage)
		return nil
	}
	return cli.Usagef("trace: unknown subcommand %q (analyze, size, generate or import)", args[0])
}

// runTraceFile runs a subcommand that reads one trace file and prints a report.
func runTraceFile(ctx context.Context, sub, examples string, register func(*flag.FlagSet) func([]string) (trace.FileJob, error), args []string, stdout io.Writer) error {
	flags := cli.NewFlagSet("trace "+sub, "FILE [flags]", examples, stdout)
	job := register(flags)
	var format string
	cli.FormatVar(flags, &format, "output: text or json", "text", "json")
	args, err := cli.Parse(flags, args)
	if err != nil {
		return err
	}
	j, err := job(args)
	if err != nil {
		return cli.Usagef("trace %s: %w", sub, err)
	}
	r, err := j.Run(ctx)
	if err != nil {
		return cli.InputError(ctx, err) // a bad file, a bad line or an empty window
	}
	return cli.Emit(stdout, format, cli.Document{Schema: j.Schema, Value: r}, r.WriteText) // text escapes the file's name
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

func runTraceImport(ctx context.Context, args []string, stdout io.Writer) error {
	flags := cli.NewFlagSet("trace import", "LOG (--endpoint URL | --tokenizer URL) -o FILE [flags]", "kvbench trace import requests.jsonl --endpoint http://127.0.0.1:8000/v1 --block-tokens 16 -o my-traffic.jsonl", stdout)
	job := traceimport.RegisterFlags(flags)
	cli.FormatVar(flags, &job.Format, "output: text or json", "text", "json")
	args, err := cli.Parse(flags, args)
	if err != nil {
		return err
	}
	if err := job.Check(args); err != nil {
		return cli.Usagef("trace import: %w", err)
	}
	rep, err := job.Run(ctx) // nothing is written unless the whole log imports
	if werr, ok := traceimport.WriteFailed(err); ok {
		return cli.OutputError("-o", job.Out, werr)
	}
	if err != nil {
		return cli.InputError(ctx, err) // a bad line or a failed tokenizer: its file and line
	}
	return cli.Emit(stdout, job.Format, rep, rep.WriteText)
}

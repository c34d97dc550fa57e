package main

import (
	"bufio"
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"io/fs"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/trace"
)

func init() {
	register(command{name: "trace", summary: "analyze a Mooncake-format KV-cache trace (ideal LRU hit rates, tier shares) or generate one", run: runTrace})
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

func runTrace(_ context.Context, args []string, stdout, _ io.Writer) error {
	if len(args) == 0 {
		fmt.Fprint(stdout, traceUsage)
		return usageErrorf("trace: name a subcommand: analyze or generate")
	}
	switch args[0] {
	case "analyze":
		return runTraceAnalyze(args[1:], stdout)
	case "generate":
		return runTraceGenerate(args[1:], stdout)
	case "-h", "--help", "help":
		fmt.Fprint(stdout, traceUsage)
		return nil
	}
	return usageErrorf("trace: unknown subcommand %q (analyze or generate)", args[0])
}

func runTraceAnalyze(args []string, stdout io.Writer) error {
	flags := newFlagSet("trace analyze", "FILE [flags]",
		"kvbench trace analyze conversation_trace.jsonl\n"+
			"kvbench trace analyze conversation_trace.jsonl --capacity-tokens 1e6,3e6,1e7 --gpu-tokens 1e6 --host-tokens 1e7 --format json\n"+
			"kvbench trace analyze conversation_trace.jsonl --start 10m --duration 5m --max-input-tokens 32768", stdout)
	blockTokens := flags.Int("block-tokens", trace.DefaultBlockTokens, "tokens per hash id in the trace (512 in the public Mooncake traces)")
	capacities := tokenList{1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8}
	flags.Var(&capacities, "capacity-tokens", "LRU capacities to evaluate, in tokens, comma-separated (1e6 notation allowed)")
	var gpu, host tokenCount
	flags.Var(&gpu, "gpu-tokens", "GPU prefix-cache size in tokens for the two-tier shares (with --host-tokens)")
	flags.Var(&host, "host-tokens", "host-tier size in tokens for the two-tier shares (with --gpu-tokens; 0: no host tier)")
	poolOutput := flags.Bool("pool-holds-output", false, "two tiers: the GPU pool also holds each request's partial block and output_length tokens while it runs, as an engine's block pool does (the ideal a trace step's record uses)")
	format := flags.String("format", "text", "output: text or json")
	window := windowFlags(flags)
	args, err := parseFlags(flags, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("trace analyze: want one trace file, got %d arguments", len(args))
	}
	if *blockTokens < 1 {
		return usageErrorf("trace analyze: --block-tokens %d must be at least 1", *blockTokens)
	}
	if *format != "text" && *format != "json" {
		return usageErrorf("trace analyze: --format %q: want text or json", *format)
	}
	cfg := trace.Config{BlockTokens: *blockTokens, CapacityTokens: capacities}
	switch {
	case gpu.set && host.set:
		cfg.Tiers = &trace.Tiers{GPUTokens: gpu.n, HostTokens: host.n, PoolHoldsOutput: *poolOutput}
	case gpu.set || host.set:
		return usageErrorf("trace analyze: --gpu-tokens and --host-tokens go together (--host-tokens 0 for a server without a host tier)")
	case *poolOutput:
		return usageErrorf("trace analyze: --pool-holds-output needs --gpu-tokens and --host-tokens")
	}
	w, err := window()
	if err != nil {
		return err
	}
	a, err := trace.AnalyzeFile(args[0], w, cfg)
	if err != nil {
		return usageError(err) // a bad file, a bad line or an empty window
	}
	if *format == "json" {
		return printJSON(stdout, a)
	}
	return a.WriteText(stdout)
}

// windowFlags adds the window flags to fs and returns their reader.
func windowFlags(flags *flag.FlagSet) func() (trace.Window, error) {
	start := flags.Duration("start", 0, "window: skip requests before this trace time, e.g. 10m")
	duration := flags.Duration("duration", 0, "window: keep requests for this long from --start, e.g. 5m (or --requests)")
	requests := flags.Int("requests", 0, "window: keep this many requests from --start (or --duration)")
	maxInput := flags.Int("max-input-tokens", 0, "drop requests longer than this many tokens (and count them)")
	return func() (trace.Window, error) {
		w := trace.Window{Start: *start, Duration: *duration, Requests: *requests, MaxInputTokens: *maxInput}
		if err := w.Validate(); err != nil {
			return w, usageErrorf("%s: %w", flags.Name(), err)
		}
		return w, nil
	}
}

func runTraceGenerate(args []string, stdout io.Writer) error {
	d := trace.DefaultGeneratorConfig()
	flags := newFlagSet("trace generate", "[flags] [-o FILE]",
		"kvbench trace generate -o conversation.jsonl   # like the public conversation trace: 12,031 requests in an hour\n"+
			"kvbench trace generate --seed 7 --requests 200 --scale 0.03125 --block-tokens 16 -o small.jsonl", stdout)
	cfg := d
	flags.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed: the same flags and seed give the same trace")
	flags.IntVar(&cfg.Requests, "requests", d.Requests, "requests to write")
	flags.Float64Var(&cfg.Rate, "rate", d.Rate, "requests per second once conversations are under way")
	flags.IntVar(&cfg.BlockTokens, "block-tokens", d.BlockTokens, "tokens per hash id")
	flags.Float64Var(&cfg.Scale, "scale", d.Scale, "multiply every token length (not the block size) by this")
	flags.Float64Var(&cfg.Turns, "turns", d.Turns, "mean turns per conversation (1: no follow-ups)")
	flags.DurationVar(&cfg.ThinkTime, "think-time", d.ThinkTime, "mean time between a conversation's turns")
	flags.IntVar(&cfg.SystemPrompts, "system-prompts", d.SystemPrompts, "distinct system prompts conversations share (Zipf popularity)")
	flags.IntVar(&cfg.SystemPromptTokens, "system-prompt-tokens", d.SystemPromptTokens, "tokens of each system prompt")
	flags.Float64Var(&cfg.FirstTurn.Mean, "first-turn-tokens", d.FirstTurn.Mean, "mean tokens of a conversation's first user message")
	flags.Float64Var(&cfg.FollowUp.Mean, "follow-up-tokens", d.FollowUp.Mean, "mean tokens a later turn's new message adds")
	inputSigma := flags.Float64("input-sigma", d.FirstTurn.Sigma, "lognormal shape of the two message lengths (0: every length the mean)")
	flags.Float64Var(&cfg.Output.Mean, "output-tokens", d.Output.Mean, "mean output tokens")
	flags.Float64Var(&cfg.Output.Sigma, "output-sigma", d.Output.Sigma, "lognormal shape of the output lengths")
	flags.IntVar(&cfg.MaxInputTokens, "max-input-tokens", d.MaxInputTokens, "prompt cap, before --scale: a conversation ends before a turn over it")
	out := flags.String("o", "", "write the trace to this new file (never overwritten) instead of stdout")
	args, err := parseFlags(flags, args)
	if err != nil {
		return err
	}
	if len(args) != 0 {
		return usageErrorf("trace generate: unexpected argument %q (the output file goes after -o)", args[0])
	}
	cfg.FirstTurn.Sigma, cfg.FollowUp.Sigma = *inputSigma, *inputSigma
	g, err := trace.NewGenerator(cfg)
	if err != nil {
		return usageErrorf("trace generate: %s", strings.ReplaceAll(err.Error(), "\n", "; "))
	}
	if *out == "" {
		w := bufio.NewWriterSize(stdout, 256<<10)
		if _, err := trace.WriteJSONL(w, g); err != nil {
			return err
		}
		return w.Flush()
	}
	n, err := writeNewFile(*out, func(w io.Writer) (int, error) { return trace.WriteJSONL(w, g) })
	if err != nil {
		return err
	}
	fmt.Fprintf(stdout, "trace: %s (%d requests, blocks of %d tokens)\n", *out, n, cfg.BlockTokens)
	return nil
}

// writeNewFile writes path through a temporary file in its directory, synced, then linked
// into place, so path is either absent or complete and an existing file is never replaced.
func writeNewFile(path string, write func(io.Writer) (int, error)) (int, error) {
	if _, err := os.Lstat(path); err == nil {
		return 0, usageErrorf("%s exists: kvbench never overwrites a file; choose another -o or remove it", path)
	}
	tmp, err := os.CreateTemp(filepath.Dir(path), "."+filepath.Base(path)+".*.tmp")
	if err != nil {
		if errors.Is(err, fs.ErrNotExist) {
			return 0, usageErrorf("-o %s: its directory does not exist", path)
		}
		return 0, err
	}
	defer os.Remove(tmp.Name())
	w := bufio.NewWriterSize(tmp, 256<<10)
	n, err := write(w)
	if err == nil {
		err = w.Flush()
	}
	if err == nil {
		err = tmp.Sync()
	}
	if cerr := tmp.Close(); err == nil {
		err = cerr
	}
	if err != nil {
		return n, fmt.Errorf("writing %s: %w", path, err)
	}
	if err := os.Link(tmp.Name(), path); err != nil {
		if errors.Is(err, fs.ErrExist) {
			return n, usageErrorf("%s exists: kvbench never overwrites a file; choose another -o or remove it", path)
		}
		return n, err
	}
	return n, nil
}

// parseTokens reads a token count: a whole number, 1e6 notation allowed.
func parseTokens(s string) (int64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || x < 0 || x != math.Trunc(x) || x > 1e15 {
		return 0, fmt.Errorf("%q is not a token count (a whole number >= 0, such as 1000000 or 1e6)", s)
	}
	return int64(x), nil
}

// tokenCount is a token-count flag that remembers whether it was given.
type tokenCount struct {
	n   int64
	set bool
}

func (c *tokenCount) String() string {
	if c == nil || !c.set {
		return ""
	}
	return strconv.FormatInt(c.n, 10)
}

func (c *tokenCount) Set(s string) error {
	n, err := parseTokens(s)
	if err != nil {
		return err
	}
	c.n, c.set = n, true
	return nil
}

// tokenList is a comma-separated list of token counts.
type tokenList []int64

func (l *tokenList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}

func (l *tokenList) Set(s string) error {
	var out tokenList
	for _, part := range strings.Split(s, ",") {
		n, err := parseTokens(part)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

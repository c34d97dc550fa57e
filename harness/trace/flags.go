package trace

import (
	"errors"
	"flag"
	"fmt"
	"math"
	"strconv"
	"strings"
)

// RegisterAnalyzeFlags adds kvbench trace analyze's flags to fs: the block size, the LRU
// capacities, the two tiers and the window. Once fs is parsed, the returned function gives
// the Config and Window they ask for; its errors are bad input, one line naming the flag.
func RegisterAnalyzeFlags(fs *flag.FlagSet) func() (Config, Window, error) {
	blockTokens := fs.Int("block-tokens", 0, "tokens per hash id in the trace (0: the format's, 512 as in the public Mooncake traces, Bailian's 16)")
	format := fs.String("trace-format", string(FormatAuto), "the trace's format: auto (told from its content), mooncake, bailian, burstgpt or azure (docs/traces.md)")
	capacities := TokenList{1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8}
	fs.Var(&capacities, "capacity-tokens", "LRU capacities to evaluate, in tokens, comma-separated (1e6 notation allowed)")
	var gpu, host TokenCount
	fs.Var(&gpu, "gpu-tokens", "GPU prefix-cache size in tokens for the two-tier shares (with --host-tokens)")
	fs.Var(&host, "host-tokens", "host-tier size in tokens for the two-tier shares (with --gpu-tokens; 0: no host tier)")
	poolOutput := fs.Bool("pool-holds-output", false, "two tiers: the GPU pool also holds each request's partial block and output_length tokens while it runs, as an engine's block pool does (the ideal a trace step's record uses)")
	w := registerWindowFlags(fs)
	return func() (Config, Window, error) {
		if *blockTokens < 0 {
			return Config{}, *w, fmt.Errorf("--block-tokens %d must be at least 1 (or 0 for the format's)", *blockTokens)
		}
		f, err := ParseFormat(*format)
		if err != nil {
			return Config{}, *w, fmt.Errorf("--trace-format: %w", err)
		}
		cfg := Config{BlockTokens: *blockTokens, Format: f, CapacityTokens: capacities}
		switch {
		case gpu.Given && host.Given:
			cfg.Tiers = &Tiers{GPUTokens: gpu.Tokens, HostTokens: host.Tokens, PoolHoldsOutput: *poolOutput}
		case gpu.Given || host.Given:
			return cfg, *w, errors.New("--gpu-tokens and --host-tokens go together (--host-tokens 0 for a server without a host tier)")
		case *poolOutput:
			return cfg, *w, errors.New("--pool-holds-output needs --gpu-tokens and --host-tokens")
		}
		return cfg, *w, w.Validate()
	}
}

// registerWindowFlags adds the window flags trace analyze and trace size share.
func registerWindowFlags(fs *flag.FlagSet) *Window {
	var w Window
	fs.DurationVar(&w.Start, "start", 0, "window: skip requests before this trace time, e.g. 10m")
	fs.DurationVar(&w.Duration, "duration", 0, "window: keep requests for this long from --start, e.g. 5m (or --requests)")
	fs.IntVar(&w.Requests, "requests", 0, "window: keep this many requests from --start (or --duration)")
	fs.IntVar(&w.MaxInputTokens, "max-input-tokens", 0, "drop requests longer than this many tokens (and count them)")
	return &w
}

// RegisterGeneratorFlags adds kvbench trace generate's flags to fs, one per field of
// GeneratorConfig, defaulting to DefaultGeneratorConfig. Once fs is parsed, the returned
// function gives the configuration (NewGenerator validates it).
func RegisterGeneratorFlags(fs *flag.FlagSet) func() GeneratorConfig {
	d := DefaultGeneratorConfig()
	cfg := d
	fs.Uint64Var(&cfg.Seed, "seed", d.Seed, "seed: the same flags and seed give the same trace")
	fs.IntVar(&cfg.Requests, "requests", d.Requests, "requests to write")
	fs.Float64Var(&cfg.Rate, "rate", d.Rate, "requests per second once conversations are under way")
	fs.IntVar(&cfg.BlockTokens, "block-tokens", d.BlockTokens, "tokens per hash id")
	fs.Float64Var(&cfg.Scale, "scale", d.Scale, "multiply every token length (not the block size) by this")
	fs.Float64Var(&cfg.Turns, "turns", d.Turns, "mean turns per conversation (1: no follow-ups)")
	fs.DurationVar(&cfg.ThinkTime, "think-time", d.ThinkTime, "mean time between a conversation's turns")
	fs.IntVar(&cfg.SystemPrompts, "system-prompts", d.SystemPrompts, "distinct system prompts conversations share (Zipf popularity)")
	fs.IntVar(&cfg.SystemPromptTokens, "system-prompt-tokens", d.SystemPromptTokens, "tokens of each system prompt")
	fs.Float64Var(&cfg.FirstTurn.Mean, "first-turn-tokens", d.FirstTurn.Mean, "mean tokens of a conversation's first user message")
	fs.Float64Var(&cfg.FollowUp.Mean, "follow-up-tokens", d.FollowUp.Mean, "mean tokens a later turn's new message adds")
	inputSigma := fs.Float64("input-sigma", d.FirstTurn.Sigma, "lognormal shape of the two message lengths (0: every length the mean)")
	fs.Float64Var(&cfg.Output.Mean, "output-tokens", d.Output.Mean, "mean output tokens")
	fs.Float64Var(&cfg.Output.Sigma, "output-sigma", d.Output.Sigma, "lognormal shape of the output lengths")
	fs.IntVar(&cfg.MaxInputTokens, "max-input-tokens", d.MaxInputTokens, "prompt cap, before --scale: a conversation ends before a turn over it")
	return func() GeneratorConfig {
		c := cfg
		c.FirstTurn.Sigma, c.FollowUp.Sigma = *inputSigma, *inputSigma
		return c
	}
}

// ParseTokens reads a token count: a whole number >= 0, 1e6 notation allowed.
func ParseTokens(s string) (int64, error) {
	x, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || x < 0 || x != math.Trunc(x) || x > 1e15 {
		return 0, fmt.Errorf("%q is not a token count (a whole number >= 0, such as 1000000 or 1e6)", s)
	}
	return int64(x), nil
}

// TokenCount is a token-count flag (ParseTokens) that remembers whether it was given.
type TokenCount struct {
	Tokens int64
	Given  bool
}

func (c *TokenCount) String() string {
	if c == nil || !c.Given {
		return ""
	}
	return strconv.FormatInt(c.Tokens, 10)
}

// Set implements flag.Value.
func (c *TokenCount) Set(s string) error {
	n, err := ParseTokens(s)
	if err != nil {
		return err
	}
	c.Tokens, c.Given = n, true
	return nil
}

// TokenList is a flag of comma-separated token counts (ParseTokens); a value replaces the
// default.
type TokenList []int64

func (l *TokenList) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, n := range *l {
		parts[i] = strconv.FormatInt(n, 10)
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value.
func (l *TokenList) Set(s string) error {
	var out TokenList
	for _, part := range strings.Split(s, ",") {
		n, err := ParseTokens(part)
		if err != nil {
			return err
		}
		out = append(out, n)
	}
	*l = out
	return nil
}

// RegisterSizeFlags adds kvbench trace size's flags to fs. Once fs is parsed, the returned
// function gives the SizeConfig and Window they ask for; its errors are bad input, one line
// naming the flag.
func RegisterSizeFlags(fs *flag.FlagSet) func() (SizeConfig, Window, error) {
	return NewSizeFlags(fs).Config
}

// SizeFlags are kvbench trace size's flags, for a caller that fills what the command line
// leaves out from elsewhere (a run's record: package tierplan).
type SizeFlags struct {
	fs            *flag.FlagSet
	blockTokens   *int
	format        *string
	hosts         HostSizes
	gpu           TokenCount
	bytesPerToken *int64
	poolOutput    *bool
	policy        *string
	window        *Window
}

// NewSizeFlags adds kvbench trace size's flags to fs.
func NewSizeFlags(fs *flag.FlagSet) *SizeFlags {
	f := &SizeFlags{fs: fs, hosts: HostSizes{{Tokens: 0}, {Tokens: 1e6}, {Tokens: 3e6}, {Tokens: 1e7}, {Tokens: 3e7}, {Tokens: 1e8}}}
	f.blockTokens = fs.Int("block-tokens", 0, "tokens per hash id in the trace (0: the format's, 512 as in the public Mooncake traces, Bailian's 16)")
	f.format = fs.String("trace-format", string(FormatAuto), "the trace's format: auto (told from its content), mooncake, bailian, burstgpt or azure (docs/traces.md); only a trace that names blocks gives tier shares")
	fs.Var(&f.hosts, "host", "host-tier sizes, comma-separated: tokens (1e7) or bytes with a unit (8GiB; KiB, MiB, GiB, TiB; needs --bytes-per-token)")
	fs.Var(&f.gpu, "gpu-tokens", "GPU prefix-cache size in tokens (required without --from)")
	f.bytesPerToken = fs.Int64("bytes-per-token", 0, "bytes the host tier stores per token (needed for sizes in bytes; with it every size is given in bytes too)")
	f.poolOutput = fs.Bool("pool-holds-output", false, "the GPU pool also holds each request's partial block and output_length tokens while it runs, as an engine's block pool does")
	f.policy = fs.String("policy", PolicyVLLM, "host-tier write policy NAME[:PARAM=V,...]: vllm[:store_threshold=N,max_tracker_size=N], sglang-write-through, sglang-write-through-selective, sglang-write-back, llamacpp[:slots=N,kv_unified=1] (docs/traces.md)")
	f.window = registerWindowFlags(fs)
	return f
}

// Given reports whether the flag name was set on the command line.
func (f *SizeFlags) Given(name string) bool {
	given := false
	f.fs.Visit(func(fl *flag.Flag) { given = given || fl.Name == name })
	return given
}

// Config gives the SizeConfig and Window the flags ask for, every figure from the command
// line.
func (f *SizeFlags) Config() (SizeConfig, Window, error) {
	cfg, err := f.Base()
	if err != nil {
		return cfg, *f.window, err
	}
	if !f.gpu.Given {
		return cfg, *f.window, errors.New("--gpu-tokens is required (the GPU prefix cache in front of the host tier)")
	}
	cfg.GPUTokens, cfg.BytesPerToken, cfg.PoolHoldsOutput = f.gpu.Tokens, *f.bytesPerToken, *f.poolOutput
	if cfg.Policy, err = f.Policy(); err != nil {
		return cfg, *f.window, err
	}
	if cfg.HostTokens, err = f.HostTokens(cfg.BytesPerToken); err != nil {
		return cfg, *f.window, err
	}
	return cfg, *f.window, f.window.Validate()
}

// Base gives the flags' block size and format, checked; the rest of the SizeConfig is left
// to the caller.
func (f *SizeFlags) Base() (SizeConfig, error) {
	if *f.blockTokens < 0 {
		return SizeConfig{}, fmt.Errorf("--block-tokens %d must be at least 1 (or 0 for the format's)", *f.blockTokens)
	}
	if *f.bytesPerToken < 0 {
		return SizeConfig{}, fmt.Errorf("--bytes-per-token %d must not be negative", *f.bytesPerToken)
	}
	format, err := ParseFormat(*f.format)
	if err != nil {
		return SizeConfig{}, fmt.Errorf("--trace-format: %w", err)
	}
	return SizeConfig{BlockTokens: *f.blockTokens, Format: format}, nil
}

// GPUTokens is --gpu-tokens.
func (f *SizeFlags) GPUTokens() int64 { return f.gpu.Tokens }

// BytesPerToken is --bytes-per-token.
func (f *SizeFlags) BytesPerToken() int64 { return *f.bytesPerToken }

// PoolHoldsOutput is --pool-holds-output.
func (f *SizeFlags) PoolHoldsOutput() bool { return *f.poolOutput }

// Window is the window the flags ask for.
func (f *SizeFlags) Window() Window { return *f.window }

// Policy is --policy, parsed.
func (f *SizeFlags) Policy() (Policy, error) {
	p, err := ParsePolicy(*f.policy)
	if err != nil {
		return p, fmt.Errorf("--policy: %w", err)
	}
	return p, nil
}

// HostTokens is --host in tokens, a size in bytes divided by bytesPerToken (0: unknown, an
// error for a size in bytes).
func (f *SizeFlags) HostTokens(bytesPerToken int64) ([]int64, error) {
	var out []int64
	for _, h := range f.hosts {
		if h.Bytes == 0 { // given in tokens
			out = append(out, h.Tokens)
			continue
		}
		if bytesPerToken <= 0 {
			return nil, fmt.Errorf("--host %s is in bytes: give --bytes-per-token to turn it into tokens", h.Text)
		}
		out = append(out, h.Bytes/bytesPerToken)
	}
	return out, nil
}

// HostSize is one --host size: tokens, or bytes when given with a unit.
type HostSize struct {
	Tokens, Bytes int64
	Text          string
}

// HostSizes is a flag of comma-separated host-tier sizes; a value replaces the default.
type HostSizes []HostSize

func (l *HostSizes) String() string {
	if l == nil {
		return ""
	}
	parts := make([]string, len(*l))
	for i, h := range *l {
		parts[i] = h.Text
		if h.Text == "" {
			parts[i] = strconv.FormatInt(h.Tokens, 10)
		}
	}
	return strings.Join(parts, ",")
}

// Set implements flag.Value.
func (l *HostSizes) Set(s string) error {
	var out HostSizes
	for _, part := range strings.Split(s, ",") {
		part = strings.TrimSpace(part)
		h, err := parseHostSize(part)
		if err != nil {
			return err
		}
		out = append(out, h)
	}
	*l = out
	return nil
}

func parseHostSize(s string) (HostSize, error) {
	for _, u := range []struct {
		suffix string
		factor float64
	}{{"KiB", 1 << 10}, {"MiB", 1 << 20}, {"GiB", 1 << 30}, {"TiB", 1 << 40}} {
		if num, ok := strings.CutSuffix(s, u.suffix); ok {
			x, err := strconv.ParseFloat(strings.TrimSpace(num), 64)
			if err != nil || x <= 0 || x*u.factor > 1e18 {
				return HostSize{}, fmt.Errorf("%q is not a size in bytes (a number > 0 and a unit, such as 8GiB)", s)
			}
			return HostSize{Bytes: int64(x * u.factor), Text: s}, nil
		}
	}
	n, err := ParseTokens(s)
	if err != nil {
		return HostSize{}, fmt.Errorf("%q is neither a token count (1e7) nor a size in bytes (8GiB)", s)
	}
	return HostSize{Tokens: n, Text: s}, nil
}

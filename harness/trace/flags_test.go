package trace

import (
	"flag"
	"io"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"
)

func TestParseTokens(t *testing.T) {
	for _, tt := range []struct {
		in   string
		want int64 // -1: refused
	}{
		{"0", 0}, {"1000000", 1e6}, {"1e6", 1e6}, {" 3e7 ", 3e7}, {"1e15", 1e15}, {"2.5e3", 2500},
		{"1.5", -1}, {"-1", -1}, {"1e16", -1}, {"lots", -1}, {"", -1}, {"NaN", -1}, {"Inf", -1},
	} {
		got, err := ParseTokens(tt.in)
		if tt.want < 0 {
			if err == nil || !strings.Contains(err.Error(), strconv.Quote(tt.in)+" is not a token count") {
				t.Errorf("ParseTokens(%q) = %d, %v; want refused, naming the text", tt.in, got, err)
			}
			continue
		}
		if err != nil || got != tt.want {
			t.Errorf("ParseTokens(%q) = %d, %v; want %d", tt.in, got, err, tt.want)
		}
	}
}

func FuzzParseTokens(f *testing.F) {
	for _, s := range []string{"0", "1e6", "1.5", "-0", "9007199254740993", "0x10", "1_000"} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		n, err := ParseTokens(s)
		if err != nil {
			return
		}
		if n < 0 || n > 1e15 {
			t.Fatalf("ParseTokens(%q) = %d, outside [0, 1e15]", s, n)
		}
		if back, err := ParseTokens(strconv.FormatInt(n, 10)); err != nil || back != n {
			t.Fatalf("ParseTokens(%q) = %d does not read back: %d, %v", s, n, back, err)
		}
	})
}

// parseAnalyze parses args as kvbench trace analyze's flags.
func parseAnalyze(t *testing.T, args ...string) (Config, Window, error) {
	t.Helper()
	fs := flag.NewFlagSet("trace analyze", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	analysis := RegisterAnalyzeFlags(fs)
	if err := fs.Parse(args); err != nil {
		return Config{}, Window{}, err
	}
	return analysis()
}

func TestAnalyzeFlags(t *testing.T) {
	cfg, w, err := parseAnalyze(t)
	if err != nil || cfg.BlockTokens != 0 || cfg.Format != FormatAuto || !slices.Equal(cfg.CapacityTokens, []int64{1e5, 3e5, 1e6, 3e6, 1e7, 3e7, 1e8}) || cfg.Tiers != nil || !w.IsWhole() {
		t.Errorf("defaults: %+v %+v %v", cfg, w, err)
	}
	cfg, w, err = parseAnalyze(t, "--block-tokens", "16", "--capacity-tokens", "256,1e4", "--gpu-tokens", "1e3", "--host-tokens", "0",
		"--pool-holds-output", "--trace-format", "bailian", "--start", "10m", "--requests", "5", "--max-input-tokens", "4096")
	if err != nil {
		t.Fatal(err)
	}
	if cfg.BlockTokens != 16 || cfg.Format != FormatBailian || !slices.Equal(cfg.CapacityTokens, []int64{256, 1e4}) || cfg.Tiers == nil ||
		*cfg.Tiers != (Tiers{GPUTokens: 1000, HostTokens: 0, PoolHoldsOutput: true}) {
		t.Errorf("config %+v tiers %+v", cfg, cfg.Tiers)
	}
	if w != (Window{Start: 10 * time.Minute, Requests: 5, MaxInputTokens: 4096}) {
		t.Errorf("window %+v", w)
	}
	for _, tt := range []struct {
		args []string
		want string
	}{
		{[]string{"--block-tokens", "-1"}, "--block-tokens -1 must be at least 1 (or 0 for the format's)"},
		{[]string{"--trace-format", "sharegpt"}, `--trace-format: "sharegpt" is not a trace format (want auto, mooncake, bailian, burstgpt, azure)`},
		{[]string{"--gpu-tokens", "1e6"}, "--gpu-tokens and --host-tokens go together"},
		{[]string{"--host-tokens", "0"}, "--gpu-tokens and --host-tokens go together"},
		{[]string{"--pool-holds-output"}, "--pool-holds-output needs --gpu-tokens and --host-tokens"},
		{[]string{"--duration", "1m", "--requests", "5"}, "a duration or a request count, not both"},
		{[]string{"--start", "-1s"}, "window start -1s is negative"},
		{[]string{"--capacity-tokens", "1e6,lots"}, `"lots" is not a token count`},
		{[]string{"--gpu-tokens", "-5"}, `"-5" is not a token count`},
	} {
		if _, _, err := parseAnalyze(t, tt.args...); err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: %v, want %q", tt.args, err, tt.want)
		}
	}
}

func TestGeneratorFlags(t *testing.T) {
	parse := func(args ...string) GeneratorConfig {
		t.Helper()
		fs := flag.NewFlagSet("trace generate", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		config := RegisterGeneratorFlags(fs)
		if err := fs.Parse(args); err != nil {
			t.Fatal(err)
		}
		return config()
	}
	if got := parse(); got != DefaultGeneratorConfig() {
		t.Errorf("no flags: %+v, want the defaults %+v", got, DefaultGeneratorConfig())
	}
	got := parse("--seed", "7", "--requests", "200", "--rate", "5", "--block-tokens", "16", "--scale", "0.5", "--turns", "3",
		"--think-time", "5s", "--system-prompts", "2", "--system-prompt-tokens", "64", "--first-turn-tokens", "100",
		"--follow-up-tokens", "50", "--input-sigma", "0", "--output-tokens", "20", "--output-sigma", "0.3", "--max-input-tokens", "4096")
	want := GeneratorConfig{Seed: 7, Requests: 200, Rate: 5, BlockTokens: 16, Scale: 0.5, Turns: 3, ThinkTime: 5 * time.Second,
		SystemPrompts: 2, SystemPromptTokens: 64, FirstTurn: Length{Mean: 100}, FollowUp: Length{Mean: 50},
		Output: Length{Mean: 20, Sigma: 0.3}, MaxInputTokens: 4096}
	if got != want {
		t.Errorf("flags gave %+v\nwant %+v", got, want)
	}
}

package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// smallTraceArgs generate testdata/trace-small.jsonl: the conversation shape at 1/32 scale
// in blocks of 16 tokens, conversations under way within the minute it spans.
var smallTraceArgs = []string{"trace", "generate", "--seed", "7", "--requests", "200", "--scale", "0.03125",
	"--block-tokens", "16", "--think-time", "5s", "--rate", "5"}

// TestTraceGolden: generate writes the same trace for the same flags, and analyze prints the
// same table for it; the JSON has the fields scripts read.
func TestTraceGolden(t *testing.T) {
	out := filepath.Join(t.TempDir(), "small.jsonl")
	stdout, stderr, code := runCLI(t, append(smallTraceArgs, "-o", out)...)
	if code != cli.ExitOK || stdout != "trace: "+out+" (200 requests, blocks of 16 tokens)\n" {
		t.Fatalf("generate: exit %d %q %q", code, stdout, stderr)
	}
	data, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	golden(t, "trace-small.jsonl", string(data))
	piped, _, code := runCLI(t, smallTraceArgs...)
	if code != cli.ExitOK || piped != string(data) {
		t.Errorf("generate to stdout differs from -o (exit %d)", code)
	}

	analyze := []string{"trace", "analyze", "testdata/trace-small.jsonl", "--block-tokens", "16",
		"--capacity-tokens", "256,1024,4096,1e4", "--gpu-tokens", "1024", "--host-tokens", "4096"}
	stdout, stderr, code = runCLI(t, analyze...)
	if code != cli.ExitOK {
		t.Fatalf("analyze: exit %d %s", code, stderr)
	}
	golden(t, "trace-analyze.golden", stdout)

	stdout, stderr, code = runCLI(t, append(analyze, "--format", "json")...)
	if code != cli.ExitOK {
		t.Fatalf("analyze --format json: exit %d %s", code, stderr)
	}
	var got struct {
		MaxHitRate *float64 `json:"max_hit_rate"`
		Capacities []struct {
			CapacityTokens *int64   `json:"capacity_tokens"`
			HitRate        *float64 `json:"hit_rate"`
		} `json:"capacities"`
		Tiers *struct {
			GPUShare       *float64 `json:"gpu_share"`
			HostShare      *float64 `json:"host_share"`
			RecomputeShare *float64 `json:"recompute_share"`
		} `json:"tiers"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.MaxHitRate == nil || *got.MaxHitRate <= 0 || len(got.Capacities) != 4 || *got.Capacities[3].CapacityTokens != 10000 || got.Tiers == nil {
		t.Fatalf("json %s", stdout)
	}
	for i, c := range got.Capacities {
		if *c.HitRate > *got.MaxHitRate || i > 0 && *c.HitRate < *got.Capacities[i-1].HitRate {
			t.Errorf("capacity %d: hit rate %g against max %g", *c.CapacityTokens, *c.HitRate, *got.MaxHitRate)
		}
	}
	if sum := *got.Tiers.GPUShare + *got.Tiers.HostShare + *got.Tiers.RecomputeShare; sum < 0.999999 || sum > 1.000001 || *got.Tiers.HostShare <= 0 {
		t.Errorf("tier shares %s", stdout)
	}
}

func TestTraceErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name, text string) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(text), 0o644); err != nil {
			t.Fatal(err)
		}
		return path
	}
	good := `{"timestamp": 0, "input_length": 1024, "output_length": 5, "hash_ids": [1, 2]}` + "\n"
	badLine := write("bad.jsonl", good+"{oops\n")
	empty := write("empty.jsonl", "")
	back := write("back.jsonl", strings.Replace(good, `"timestamp": 0`, `"timestamp": 9`, 1)+good)
	many := write("many.jsonl", good)
	existing := write("existing.jsonl", "keep me")
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"trace"}, "trace: name a subcommand"},
		{[]string{"trace", "nonsense"}, `unknown subcommand "nonsense"`},
		{[]string{"trace", "analyze"}, "want one trace file, got 0"},
		{[]string{"trace", "analyze", filepath.Join(dir, "missing.jsonl")}, "missing.jsonl: no such file"},
		{[]string{"trace", "analyze", badLine}, badLine + ":2: not a JSON object"},
		{[]string{"trace", "analyze", empty}, empty + ": empty trace: no requests"},
		{[]string{"trace", "analyze", back}, back + ":2: timestamp goes back: 0 ms is before line 1's 9 ms"},
		{[]string{"trace", "analyze", many, "--block-tokens", "1024"}, many + ":1: more hash ids than the input length spans"},
		{[]string{"trace", "analyze", many, "--capacity-tokens", "1e6,lots"}, `"lots" is not a token count`},
		{[]string{"trace", "analyze", many, "--capacity-tokens", "1.5"}, `"1.5" is not a token count`},
		{[]string{"trace", "analyze", many, "--gpu-tokens", "1e6"}, "--gpu-tokens and --host-tokens go together"},
		{[]string{"trace", "analyze", many, "--format", "xml"}, `--format must be text or json`},
		{[]string{"trace", "analyze", many, "--block-tokens", "-1"}, "--block-tokens -1 must be at least 1 (or 0 for the format's)"},
		{[]string{"trace", "analyze", many, "--duration", "1m", "--requests", "5"}, "a duration or a request count, not both"},
		{[]string{"trace", "analyze", many, "--start", "1h"}, many + ": the window keeps no request (from 1h0m0s to the end"},
		{[]string{"trace", "analyze", many, "--bogus"}, "trace analyze: flag provided but not defined: -bogus"},
		{[]string{"trace", "size"}, "trace size: want one trace file, got 0"},
		{[]string{"trace", "size", many}, "--gpu-tokens is required"},
		{[]string{"trace", "size", many, "--gpu-tokens", "1e3", "--host", "0,8GiB"}, "--host 8GiB is in bytes: give --bytes-per-token"},
		{[]string{"trace", "size", many, "--gpu-tokens", "1e3", "--host", "8GB"}, `"8GB" is neither a token count (1e7) nor a size in bytes (8GiB)`},
		{[]string{"trace", "size", many, "--gpu-tokens", "1e3", "--policy", "lmcache"}, `--policy: unknown policy "lmcache"`},
		{[]string{"trace", "size", many, "--gpu-tokens", "1e3", "--policy", "vllm:store_threshold=x"}, `"store_threshold=x" is not PARAM=N`},
		{[]string{"trace", "size", "../../harness/trace/testdata/burstgpt.csv", "--gpu-tokens", "1e3"}, "the trace names no blocks (format burstgpt)"},
		{[]string{"trace", "generate", "-o", existing}, existing + " exists: kvbench never overwrites a file"},
		{[]string{"trace", "generate", "-o", filepath.Join(dir, "no", "such", "dir.jsonl")}, "its directory does not exist"},
		{[]string{"trace", "generate", "--turns", "0.5"}, "turns 0.5 must be at least 1"},
		{[]string{"trace", "generate", "out.jsonl"}, `unexpected argument "out.jsonl"`},
	}
	for _, c := range cases {
		_, errOut, code := runCLI(t, c.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.msg) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("kvbench %s: exit %d %q, want exit 2 and one line with %q", strings.Join(c.args, " "), code, errOut, c.msg)
		}
	}
	if data, _ := os.ReadFile(existing); string(data) != "keep me" {
		t.Errorf("generate overwrote %s", existing)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 5 {
		t.Errorf("generate left files behind: %v", entries)
	}
}

// TestTraceSize: trace size's table on the small trace, and its JSON's sizes, bytes and knee.
func TestTraceSize(t *testing.T) {
	args := []string{"trace", "size", "testdata/trace-small.jsonl", "--block-tokens", "16", "--gpu-tokens", "1024",
		"--host", "0,1024,4MiB,16384", "--bytes-per-token", "1024", "--policy", "vllm:store_threshold=2"}
	stdout, stderr, code := runCLI(t, args...)
	if code != cli.ExitOK {
		t.Fatalf("size: exit %d %s", code, stderr)
	}
	golden(t, "trace-size.golden", stdout)
	stdout, stderr, code = runCLI(t, append(args, "--format", "json")...)
	if code != cli.ExitOK {
		t.Fatalf("size --format json: exit %d %s", code, stderr)
	}
	var got struct {
		Policy        string `json:"policy"`
		BytesPerToken *int64 `json:"bytes_per_token"`
		Sizes         []struct {
			HostTokens int64   `json:"host_tokens"`
			HostBytes  *int64  `json:"host_bytes"`
			HostShare  float64 `json:"host_share"`
		} `json:"sizes"`
		Knee *struct {
			HostTokens int64  `json:"host_tokens"`
			Rule       string `json:"rule"`
		} `json:"knee"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	if got.Policy != "vllm:store_threshold=2" || got.BytesPerToken == nil || *got.BytesPerToken != 1024 || len(got.Sizes) != 4 {
		t.Fatalf("%s", stdout)
	}
	if s := got.Sizes[2]; s.HostTokens != 4096 || s.HostBytes == nil || *s.HostBytes != 4<<20 {
		t.Errorf("4MiB at 1024 bytes a token: %+v", s)
	}
	if got.Sizes[0].HostShare != 0 || got.Sizes[3].HostShare <= got.Sizes[1].HostShare {
		t.Errorf("host shares %+v", got.Sizes)
	}
	if got.Knee == nil || got.Knee.Rule == "" {
		t.Errorf("knee %+v", got.Knee)
	}
	// Without --bytes-per-token the sizes are tokens only: host_bytes is null, not 0.
	stdout, _, _ = runCLI(t, "trace", "size", "testdata/trace-small.jsonl", "--block-tokens", "16", "--gpu-tokens", "1024", "--host", "0,1024", "--format", "json")
	if !strings.Contains(stdout, `"host_bytes": null`) || !strings.Contains(stdout, `"bytes_per_token": null`) {
		t.Errorf("no bytes per token:\n%s", stdout)
	}
}

func TestTraceHelp(t *testing.T) {
	for _, args := range [][]string{{"trace", "-h"}, {"trace", "analyze", "-h"}, {"trace", "generate", "-h"}} {
		out, _, code := runCLI(t, args...)
		if code != cli.ExitOK || !strings.Contains(out, "Example:") || !strings.Contains(out, "kvbench trace ") {
			t.Errorf("kvbench %s: exit %d\n%s", strings.Join(args, " "), code, out)
		}
	}
	out, _, _ := runCLI(t, "help")
	if !strings.Contains(out, "  trace ") {
		t.Errorf("help lacks trace:\n%s", out)
	}
}

// TestTraceNamesAreInert: a file name carrying terminal escapes prints as visible escapes,
// as run, plan and validate print theirs.
func TestTraceNamesAreInert(t *testing.T) {
	name := filepath.Join(t.TempDir(), "t\x1b[2J\x07.jsonl")
	out, errOut, code := runCLI(t, "trace", "generate", "--requests", "20", "--scale", "0.01", "-o", name)
	if code != cli.ExitOK || strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `t\x1b[2J\a.jsonl`) && !strings.Contains(out, `t\x1b[2J\x07.jsonl`) {
		t.Fatalf("generate: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
	out, errOut, code = runCLI(t, "trace", "analyze", name)
	if code != cli.ExitOK || strings.ContainsAny(out, "\x1b\x07") || !strings.Contains(out, `\x1b[2J`) {
		t.Errorf("analyze: exit %d, stdout %q, stderr %q", code, out, errOut)
	}
}

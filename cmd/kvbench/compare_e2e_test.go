package main

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// regressionScenario is small enough for a few seconds per repetition on the tiny profile
// shrunk by slowTiny: three 1,800-token prompts (about 5,200 unique tokens) overflow the
// 2,048-token GPU pool, so request 0 is evicted from GPU memory and its replay reloads from
// the 8,192-token CPU tier. One output token each: the decode rate, a second timed metric,
// is then not measured.
const regressionScenario = `name = "nightly-tiny"
[server]
gpu_kv_tokens = "server"
block_size = "server"
[prompt]
seed = 3
shared_prefix_tokens = 128
token_counting = "server"
[request]
max_tokens = 1
timeout = "1m"
[[step]]
id = "sequence"
requests = 3
planned_context_tokens = [1800]
[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
`

// slowTiny shrinks the tiny profile's GPU pool to 2,048 tokens and stretches its timings so
// that every time compare judges is about a second: a cold 1,800-token prompt, the replay's
// reload of about 1,650 tokens. On a loaded machine a request is late by tens of
// milliseconds, now and then by over a hundred: a tenth of these at most.
func slowTiny(p *sim.Profile) {
	p.NumGPUBlocks = 128
	p.Speed = 1
	p.PrefillTokensPerSecond = 1800
	p.CPUToGPUBytesPerSecond = 3.4e6 // 1,650 tokens x 2,048 B in about a second
	p.RequestOverhead = 20 * time.Millisecond
}

// runTiny runs the regression scenario on a fresh tiny engine and returns the run directory.
func runTiny(t *testing.T, scenario string, repeat int, override func(*sim.Profile)) string {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) {
		slowTiny(p)
		if override != nil {
			override(p)
		}
	}})
	out := t.TempDir()
	args := []string{"run", scenario, "--endpoint", srv.URL() + "/v1", "--out", out, "--force"}
	if repeat > 0 {
		args = append(args, "--repeat", itoa(repeat))
	}
	_, stderr, code := runJSON(t, context.Background(), args...)
	if code != cli.ExitOK {
		t.Fatalf("run: exit %d: %s", code, stderr)
	}
	return filepath.Join(out, onlyEntry(t, out))
}

func itoa(n int) string { b, _ := json.Marshal(n); return string(b) }

func writeScenario(t *testing.T, body string) string {
	t.Helper()
	file := filepath.Join(t.TempDir(), "nightly-tiny.toml")
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// compareJSON runs kvbench compare --format json and decodes its output.
func compareJSON(t *testing.T, base, cand string, extra ...string) (map[string]any, int, string) {
	t.Helper()
	out, stderr, code := runCLI(t, append([]string{"compare", base, cand, "--format", "json"}, extra...)...)
	if code != cli.ExitOK && code != cli.ExitRegression {
		return nil, code, stderr
	}
	var res map[string]any
	if err := json.Unmarshal([]byte(out), &res); err != nil {
		t.Fatalf("compare output is not JSON: %v\n%s", err, out)
	}
	return res, code, stderr
}

// closestCall names the timed metric whose change came nearest its threshold, for the log:
// when a run on a loaded machine fails, it shows how much lateness it took.
func closestCall(res map[string]any) string {
	best, margin := "", math.Inf(1)
	for _, st := range res["steps"].([]any) {
		st := st.(map[string]any)
		for _, rq := range st["requests"].([]any) {
			rq := rq.(map[string]any)
			for _, m := range rq["metrics"].([]any) {
				m := m.(map[string]any)
				worse, ok := m["worse_by"].(float64)
				if !ok || m["metric"] == "cached_fraction" {
					continue
				}
				if d := m["threshold"].(float64) - worse; d < margin {
					best, margin = fmt.Sprintf("%s[%v] %s: %+.1f%% worse, threshold %.1f%%", st["step"], rq["index_in_step"], m["metric"], worse*100, m["threshold"].(float64)*100), d
				}
			}
		}
	}
	return best
}

func findings(res map[string]any) []string {
	var out []string
	list, _ := res["regressions"].([]any) // none when compare refused the runs
	for _, f := range list {
		out = append(out, f.(string))
	}
	return out
}

// TestRepeatCompareOnEmbeddedEngine is issue 7's "done means" on the embedded engine: runs
// whose speed varies from request to request (deterministic jitter, a different seed per
// server) are not flagged; a prefill three times slower is, on every cold request; a CPU
// tier too small to keep the replayed prompt turns the verdict from cpu_reload to recompute,
// always a regression. Every timed effect is hundreds of milliseconds, far beyond the
// lateness of a loaded machine.
func TestRepeatCompareOnEmbeddedEngine(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	file := writeScenario(t, regressionScenario)
	// 25% jitter: repetitions of a one-second request spread by hundreds of milliseconds.
	jitter := func(seed uint64) func(*sim.Profile) {
		return func(p *sim.Profile) { p.JitterFraction, p.JitterSeed = 0.25, seed }
	}
	base := runTiny(t, file, 3, jitter(11))

	// The repeats section: three repetitions with seeds 3, 4, 5, agreeing verdicts, and
	// per-metric spreads computed from the repetitions' own artifacts.
	rec := readArtifact(t, base, "run.json")
	reps := section(t, rec, "repeats")
	if num(t, reps, "count") != 3 || reps["verdicts_agree"] != true {
		t.Fatalf("repeats %v", reps)
	}
	for i, r := range reps["repetitions"].([]any) {
		if seed := num(t, r.(map[string]any), "seed"); seed != float64(3+i) {
			t.Fatalf("repetition %d seed %v, want %d", i, seed, 3+i)
		}
	}
	replay := reps["steps"].(map[string]any)["replay"].(map[string]any)
	if v := replay["verdicts"].([]any); len(v) != 3 || v[0] != "cpu_reload" || v[1] != "cpu_reload" || v[2] != "cpu_reload" {
		t.Fatalf("replay verdicts %v", v)
	}
	ttft := replay["requests"].([]any)[0].(map[string]any)["metrics"].(map[string]any)["time_to_first_output_ms"].(map[string]any)
	if num(t, ttft, "n") != 3 || num(t, ttft, "min") > num(t, ttft, "median") || num(t, ttft, "median") > num(t, ttft, "max") ||
		num(t, ttft, "spread") != num(t, ttft, "max")-num(t, ttft, "min") {
		t.Fatalf("replay ttft summary %v", ttft)
	}
	// Repetitions 1 and 2 have their own artifacts, listed in sources with their sha256, and
	// fresh prompts: a cold sequence each time.
	var repeatFiles int
	for _, s := range rec["sources"].([]any) {
		if p, _ := s.(map[string]any)["path"].(string); strings.HasPrefix(p, "repeat-") {
			repeatFiles++
		}
	}
	if repeatFiles != 4 {
		t.Fatalf("%d repeat-* artifacts in sources, want 4", repeatFiles)
	}
	r0 := readArtifact(t, base, "step-01-sequence.json")["requests"].([]any)[0].(map[string]any)
	r1 := readArtifact(t, base, "repeat-01-step-01-sequence.json")["requests"].([]any)[0].(map[string]any)
	if r0["prompt"].(map[string]any)["identity"] == r1["prompt"].(map[string]any)["identity"] {
		t.Fatal("repetition 1 resent repetition 0's prompt")
	}
	// Only the fixed system text (a few blocks) may be cached: the 128-token shared prefix is
	// rebuilt from the new seed.
	if c := r1["result"].(map[string]any)["cached_prompt_tokens"]; c != nil && c.(float64) >= 128 {
		t.Fatalf("repetition 1's first request found %v cached tokens: not cold", c)
	}

	t.Run("noise is not a regression", func(t *testing.T) {
		noisy := runTiny(t, file, 3, jitter(29))
		res, code, stderr := compareJSON(t, base, noisy)
		if code != cli.ExitOK {
			t.Fatalf("exit %d (%s): %v", code, stderr, findings(res))
		}
		if !strings.HasPrefix(res["noise"].(string), "measured from repetitions") {
			t.Fatalf("noise %v", res["noise"])
		}
		t.Logf("closest call: %s", closestCall(res))
	})
	t.Run("3x slower prefill is a regression", func(t *testing.T) {
		// A cold TTFT of 3 s against a baseline median of at most 1.25 s (+140%), when the
		// baseline's three repetitions spread by at most 0.5/0.75 (67%): the gap is over
		// 800 ms beyond the threshold, whatever the jitter draws.
		slow := runTiny(t, file, 0, func(p *sim.Profile) { p.PrefillTokensPerSecond /= 3 })
		res, code, stderr := compareJSON(t, base, slow)
		if code != cli.ExitRegression {
			t.Fatalf("exit %d (%s), want 4", code, stderr)
		}
		got := strings.Join(findings(res), "\n")
		t.Logf("findings:\n%s", got)
		for i := range 3 {
			want := "sequence[" + itoa(i) + "] time_to_first_output_ms"
			if !strings.Contains(got, want) {
				t.Errorf("findings lack %q:\n%s", want, got)
			}
		}
		if strings.Contains(got, "verdict") {
			t.Errorf("a slower prefill changed a verdict:\n%s", got)
		}
	})
	t.Run("smaller CPU tier changes the verdict", func(t *testing.T) {
		// 1,024 tokens of CPU tier: smaller than the GPU pool, so request 0's blocks are gone
		// from both tiers by the replay. Only the verdict matters here: time runs 10x fast.
		small := runTiny(t, file, 0, func(p *sim.Profile) { p.CPUOffloadGiB, p.Speed = 0.001953125, 10 })
		res, code, stderr := compareJSON(t, base, small)
		if code != cli.ExitRegression {
			t.Fatalf("exit %d (%s), want 4", code, stderr)
		}
		got := strings.Join(findings(res), "\n")
		if !strings.Contains(got, "replay: verdict cpu_reload -> recompute") {
			t.Fatalf("findings:\n%s", got)
		}
	})
}

// TestCompareRefusesMismatch: different scenarios are refused with the field named (exit 2)
// unless --allow-mismatch.
func TestCompareRefusesMismatch(t *testing.T) {
	base := filepath.Join("testdata", "compare", "baseline")
	other := filepath.Join("testdata", "compare", "other-scenario")
	_, stderr, code := runCLI(t, "compare", base, other)
	if code != cli.ExitUsage || !strings.Contains(stderr, "scenario differs") || !strings.Contains(stderr, "prompt identity of sequence[0] differs") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	res, code, stderr := compareJSON(t, base, other, "--allow-mismatch")
	if code != cli.ExitOK && code != cli.ExitRegression {
		t.Fatalf("--allow-mismatch: exit %d: %s", code, stderr)
	}
	if len(res["mismatches"].([]any)) == 0 {
		t.Fatal("allowed mismatches are not reported")
	}
}

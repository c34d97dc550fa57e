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
	"github.com/anvil-serving/kvbench/internal/llamacpptest"
)

// requireLlama finds the llama-server binary and test model that .ci/install-llamacpp.sh
// builds. CI sets KVBENCH_REQUIRE_LLAMA so that a missing install fails instead of skipping.
func requireLlama(t *testing.T) (server, model string) {
	t.Helper()
	server, model, err := llamacpptest.Locate()
	if err != nil {
		if os.Getenv("KVBENCH_REQUIRE_LLAMA") != "" {
			t.Fatalf("KVBENCH_REQUIRE_LLAMA is set but %v", err)
		}
		t.Skipf("llama.cpp not installed (%v); bash .ci/install-llamacpp.sh builds it", err)
	}
	return server, model
}

// TestLlamaCppPromptCacheTiers runs the seed study's shape on a real engine: with a host-RAM
// prompt cache the replay is restored from it, without one only the shared prefix is reused.
func TestLlamaCppPromptCacheTiers(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	server, model := requireLlama(t)
	cases := []struct {
		scenario string
		cacheRAM int
		verdict  string
	}{
		{"llamacpp-ram-replay", 512, "cpu_reload"},
		{"llamacpp-ram-control", 0, "recompute"},
	}
	for _, c := range cases {
		t.Run(c.scenario, func(t *testing.T) {
			ctx, cancel := context.WithCancel(context.Background())
			defer cancel()
			srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, CacheRAMMiB: c.cacheRAM})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			out := t.TempDir()
			rec, stderr, code := runJSON(t, ctx, "run", c.scenario, "--endpoint", srv.URL()+"/v1", "--out", out)
			if code != cli.ExitOK {
				t.Fatalf("exit %d: %s\nserver log:\n%s", code, stderr, srv.Log())
			}
			r := section(t, rec, "replay")
			prompt, cached := num(t, r, "prompt_tokens"), num(t, r, "cached_prompt_tokens")
			slot := r["evidence"].(map[string]any)["slot_attribution"].(map[string]any)
			common := num(t, slot, "common_prefix_with_previous_prompt")
			cold, replay := num(t, r, "original_time_to_first_output_ms"), num(t, r, "time_to_first_output_ms")
			t.Logf("%s: prompt %v, cached %v, common prefix %v, TTFT cold %.1f ms, replay %.1f ms", c.scenario, prompt, cached, common, cold, replay)
			if r["verdict"] != c.verdict {
				t.Fatalf("verdict %v (%v), want %s", r["verdict"], r["verdict_reason"], c.verdict)
			}
			// The cold twin (cache_prompt: false, right after the replay on the one slot)
			// recomputed the whole prompt: usage and the cached-token counter say 0.
			gain, fid := r["offload_gain"].(map[string]any), r["reload_fidelity"].(map[string]any)
			t.Logf("%s: offload gain %v; fidelity %v", c.scenario, gain, fid)
			if gain["cold_twin"] != "cache_prompt=false" || gain["cold_twin_missed"] != "yes" || gain["ttft_ratio"] == nil {
				t.Errorf("cold twin: %v", gain)
			}
			if fid["compared"] != true || fid["basis"] != "text" {
				t.Errorf("fidelity %v: llama.cpp's chat stream has no token ids, so the kept text is compared", fid)
			}
			// Greedy (temperature 0 sent as 0: llama.cpp samples at any positive value), the
			// prompt state restored from the RAM cache answers exactly as the original did.
			if fid["identical"] != true || fid["cold_twin_identical"] != true {
				t.Errorf("fidelity %v: a greedy replay restored from host RAM must repeat its original", fid)
			}
			switch c.verdict {
			case "cpu_reload":
				if cached < 0.99*prompt || replay > cold/3 {
					t.Fatalf("RAM tier: cached %v of %v, TTFT %.1f ms vs cold %.1f ms", cached, prompt, replay, cold)
				}
			case "recompute":
				if math.Abs(cached-common) > 64 || common < 700 || common > 1000 {
					t.Fatalf("no RAM tier: cached %v, shared prefix %v", cached, common)
				}
			}

			// Every prompt lands within 16 tokens of its plan, and the counters kvbench read
			// agree with usage request by request.
			dir := filepath.Join(out, onlyEntry(t, out))
			for _, name := range []string{"step-01-eviction_sequence.json", "step-02-replay.json"} {
				for _, q := range readArtifact(t, dir, name)["requests"].([]any) {
					req := q.(map[string]any)
					res := req["result"].(map[string]any)
					p, planned := res["prompt_tokens"].(float64), req["planned_tokens"].(float64)
					if math.Abs(p-planned) > 16 {
						t.Errorf("%s: planned %v, server counted %v", name, planned, p)
					}
					cachedTok, _ := res["cached_prompt_tokens"].(float64) // null (absent) reads as 0 only for this sum
					counters := req["counters"].(map[string]any)["counters"].(map[string]any)
					cachedDelta := counters["prompt_tokens_cached"].(map[string]any)["delta"].(float64)
					computedDelta := counters["prompt_tokens_local_compute"].(map[string]any)["delta"].(float64)
					if cachedDelta != cachedTok || computedDelta != p-cachedTok {
						t.Errorf("%s: usage %v prompt / %v cached, counters %v computed / %v cached", name, p, cachedTok, computedDelta, cachedDelta)
					}
				}
			}
		})
	}
}

// ramReplayScenario is the run as a new user would write it: five ~2,500-token
// prompts sharing 400 tokens on llama.cpp -np 1 --cache-ram 512, then prompt 0 again, with a
// gate that requires a valid setup. Sizes differ from the built-ins on purpose.
func ramReplayScenario(seed int) string {
	return fmt.Sprintf(`name = "llamacpp-five-by-2500"
[target]
endpoint = "http://127.0.0.1:8080/v1"
backend = "llamacpp"
[server]
gpu_kv_tokens = 16384
max_model_len = 16384
cpu_offload_gib = 0.5
store_bytes_per_token = 523
[prompt]
seed = %d
shared_prefix_tokens = 400
token_counting = "server"
[request]
max_tokens = 8
timeout = "5m"
[[step]]
id = "eviction_sequence"
requests = 5
planned_context_tokens = [2500]
[[step]]
id = "replay"
replay = { step = "eviction_sequence", request = 0 }
[[gate]]
step = "replay"
verdict = "cpu_reload"
require_valid_setup = true
`, seed)
}

// TestLlamaCppEngineModel holds the engine model to a real single-slot server: plan counts
// with llama.cpp's /tokenize dialect, a RAM-tier reload passes a require_valid_setup gate
// with an interpretation that agrees with the verdict, and --repeat 2 records both
// repetitions.
func TestLlamaCppEngineModel(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	server, model := requireLlama(t)
	ctx, cancel := context.WithTimeout(context.Background(), 8*time.Minute)
	defer cancel()
	srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, CacheRAMMiB: 512})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	endpoint := srv.URL() + "/v1"

	t.Run("plan counts on the server", func(t *testing.T) {
		stdout, stderr, code := runCLI(t, "plan", writeScenario(t, ramReplayScenario(0)), "--endpoint", endpoint, "--format", "json")
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		var p struct {
			TokenCounting string `json:"token_counting"`
			Replays       []struct {
				Capacity struct {
					CanProveReload string `json:"can_prove_reload"`
				} `json:"capacity"`
			} `json:"replays"`
		}
		if err := json.Unmarshal([]byte(stdout), &p); err != nil {
			t.Fatal(err)
		}
		if p.TokenCounting != "server" || len(p.Replays) != 1 || p.Replays[0].Capacity.CanProveReload != "yes" {
			t.Fatalf("plan: counting %q, replays %+v", p.TokenCounting, p.Replays)
		}
	})

	t.Run("valid setup gate on a RAM-tier reload", func(t *testing.T) {
		rec, stderr, code := runJSON(t, ctx, "run", writeScenario(t, ramReplayScenario(0)), "--endpoint", endpoint, "--out", t.TempDir())
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s\nserver log:\n%s", code, stderr, srv.LogTail(40))
		}
		r := section(t, rec, "replay")
		interp, _ := r["interpretation"].(string)
		if r["verdict"] != "cpu_reload" || r["setup_valid"] != "yes" || !strings.Contains(interp, "valid host-tier reload setup") || strings.Contains(interp, "GPU KV pool") {
			t.Fatalf("verdict %v (%v), setup_valid %v: %s", r["verdict"], r["verdict_reason"], r["setup_valid"], interp)
		}
	})

	// The run exactly: no bytes per token of prompt state in the scenario, so the
	// capacity math cannot tell; the replay's own slot attribution shows the host-RAM
	// restore, and evidence beats computation.
	t.Run("valid setup shown by the replay", func(t *testing.T) {
		sc := strings.Replace(ramReplayScenario(200), "store_bytes_per_token = 523\n", "", 1)
		rec, stderr, code := runJSON(t, ctx, "run", writeScenario(t, sc), "--endpoint", endpoint, "--out", t.TempDir())
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s\nserver log:\n%s", code, stderr, srv.LogTail(40))
		}
		r := section(t, rec, "replay")
		reason, _ := r["setup_reason"].(string)
		if r["verdict"] != "cpu_reload" || r["setup_valid"] != "yes" || !strings.HasPrefix(reason, "shown by the replay: ") || !strings.Contains(reason, "host-RAM prompt cache") {
			t.Fatalf("verdict %v, setup_valid %v: %s", r["verdict"], r["setup_valid"], reason)
		}
	})

	t.Run("repeat 2 records both", func(t *testing.T) {
		// Another seed: the first subtest's prompts are in the RAM cache already.
		rec, stderr, code := runJSON(t, ctx, "run", writeScenario(t, ramReplayScenario(100)), "--endpoint", endpoint, "--out", t.TempDir(), "--repeat", "2")
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		reps := section(t, rec, "repeats")
		if rec["status"] != "completed" || num(t, reps, "count") != 2 {
			t.Fatalf("status %v, repeats %v (stop_reason %v)", rec["status"], reps["count"], rec["stop_reason"])
		}
		for _, rp := range reps["repetitions"].([]any) {
			if st := rp.(map[string]any)["status"]; st != "completed" {
				t.Fatalf("repetition %v", rp)
			}
		}
	})
}

// TestLlamaCppTwoSlotsTierUnknown: with -np 2 the prompt the replay's slot held is unknown,
// so the verdict stays cache_hit_tier_unknown and the setup is not claimed valid.
func TestLlamaCppTwoSlotsTierUnknown(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	server, model := requireLlama(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, CacheRAMMiB: 512, Slots: 2})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	text := strings.Replace(ramReplayScenario(0), "[[gate]]\nstep = \"replay\"\nverdict = \"cpu_reload\"\nrequire_valid_setup = true\n", "", 1)
	file := writeScenario(t, text)
	// plan reads the slot count too, so its prediction agrees with the verdict below.
	stdout, stderr, code := runCLI(t, "plan", file, "--endpoint", srv.URL()+"/v1", "--format", "json")
	if code != cli.ExitOK || !strings.Contains(stdout, `"can_prove_reload": "unknown"`) || !strings.Contains(stdout, `"slots": 2`) {
		t.Fatalf("plan exit %d: %s\n%s", code, stderr, stdout)
	}
	rec, stderr, code := runJSON(t, ctx, "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := section(t, rec, "replay")
	if r["verdict"] != "cache_hit_tier_unknown" || r["setup_valid"] == "yes" {
		t.Fatalf("verdict %v (%v), setup_valid %v", r["verdict"], r["verdict_reason"], r["setup_valid"])
	}
}

package main

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"testing"

	"github.com/anvil-serving/kvbench/harness/llamacpp/llamacpptest"
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
			if code != exitOK {
				t.Fatalf("exit %d: %s\nserver log:\n%s", code, stderr, srv.Log())
			}
			r := section(t, rec, "replay")
			prompt, cached := num(t, r, "prompt_tokens"), num(t, r, "cached_prompt_tokens")
			slot := r["evidence"].(map[string]any)["slot_attribution"].(map[string]any)
			common := num(t, slot["evidence"].(map[string]any), "common_prefix_with_previous_prompt")
			cold, replay := num(t, r, "original_time_to_first_output_ms"), num(t, r, "time_to_first_output_ms")
			t.Logf("%s: prompt %v, cached %v, common prefix %v, TTFT cold %.1f ms, replay %.1f ms", c.scenario, prompt, cached, common, cold, replay)
			if r["verdict"] != c.verdict {
				t.Fatalf("verdict %v (%v), want %s", r["verdict"], r["verdict_reason"], c.verdict)
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
					counters := req["counters"].(map[string]any)["delta"].(map[string]any)["counters"].(map[string]any)
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

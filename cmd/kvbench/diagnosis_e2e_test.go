package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// evictionOnTiny is an eviction replay sized for the tiny profile: five 1,500-token prompts
// (about 6,200 unique tokens) overflow its 4,096-token GPU pool and fit its 8,192-token CPU
// tier, so on the default profile the replay is a reload. The scenario states the tier, as a
// user would who expects one.
const evictionOnTiny = `name = "tiny-eviction"
[target]
endpoint = "http://127.0.0.1:8000/v1"
[server]
gpu_kv_tokens = "server"
block_size = "server"
cpu_offload_gib = 0.015625
store_bytes_per_token = 2048
[prompt]
seed = 3
shared_prefix_tokens = 256
token_counting = "server"
[request]
max_tokens = 8
timeout = "1m"
[[step]]
id = "sequence"
requests = 5
planned_context_tokens = [1500]
[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
`

// replayOnTiny runs evictionOnTiny against a tiny engine changed by override and returns
// the replay section and its verdict evidence.
func replayOnTiny(t *testing.T, override func(*sim.Profile)) (map[string]any, map[string]any) {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: override})
	file := filepath.Join(t.TempDir(), "tiny-eviction.toml")
	if err := os.WriteFile(file, []byte(evictionOnTiny), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := section(t, rec, "replay")
	ev, _ := r["evidence"].(map[string]any)
	return r, ev
}

// TestReplayDiagnoses: each way an offload tier fails to serve a replay, produced on the
// embedded engine, is named by the verdict's diagnosis from the counters that show it.
func TestReplayDiagnoses(t *testing.T) {
	t.Run("baseline reloads", func(t *testing.T) {
		r, ev := replayOnTiny(t, nil)
		if r["verdict"] != "cpu_reload" || ev["diagnosis"] != nil {
			t.Fatalf("verdict %v (%v), diagnosis %v", r["verdict"], r["verdict_reason"], ev["diagnosis"])
		}
	})
	cases := []struct {
		name     string
		override func(*sim.Profile)
		cause    string
		detail   string
	}{
		{"store threshold", func(p *sim.Profile) { p.StoreThreshold = 2 }, "stores_skipped_by_threshold", "store_threshold"},
		{"allocation failures", func(p *sim.Profile) { p.AllocationFailEveryNthStore = 1 }, "cpu_tier_allocation_failures", "no room"},
		{"connector not active", func(p *sim.Profile) { p.CPUOffloadGiB = 0 }, "no_store_bytes", "not active"},
		// 2 MiB at 2,048 bytes a token: 1,024 tokens, far below the sequence.
		{"tier too small", func(p *sim.Profile) { p.CPUOffloadGiB = 2.0 / 1024 }, "cpu_tier_too_small", "overflowed the CPU tier"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r, ev := replayOnTiny(t, c.override)
			if r["verdict"] != "recompute" && r["verdict"] != "partial" {
				t.Fatalf("verdict %v (%v), want recompute or partial", r["verdict"], r["verdict_reason"])
			}
			diags, _ := ev["diagnosis"].([]any)
			var causes []string
			found := false
			for _, d := range diags {
				m := d.(map[string]any)
				causes = append(causes, m["cause"].(string))
				if m["cause"] == c.cause && strings.Contains(m["detail"].(string), c.detail) {
					found = true
				}
			}
			if !found {
				t.Fatalf("diagnosis %v (offload evidence %v), want %s", diags, ev["offload_evidence"], c.cause)
			}
			t.Logf("%s: %s, diagnosis %v", c.name, r["verdict"], causes)
		})
	}
}

// TestCachedBySourceProvesReload: on a server that serves the proposed cached-by-source
// counter but no external prefix-cache hit counter, the host tier's tokens still prove the
// reload; without either, the same replay cannot be called one.
func TestCachedBySourceProvesReload(t *testing.T) {
	omitExternal := func(p *sim.Profile) {
		p.OmitMetrics = []string{"vllm:external_prefix_cache_hits_total", "vllm:external_prefix_cache_queries_total"}
	}
	r, ev := replayOnTiny(t, func(p *sim.Profile) { omitExternal(p); p.CachedBySourceMetrics = true })
	if r["verdict"] != "cpu_reload" {
		t.Fatalf("verdict %v (%v), notes %v", r["verdict"], r["verdict_reason"], ev["notes"])
	}
	r, _ = replayOnTiny(t, omitExternal)
	if r["verdict"] == "cpu_reload" {
		t.Fatalf("without external hits or cached-by-source the verdict was %v", r["verdict"])
	}
}

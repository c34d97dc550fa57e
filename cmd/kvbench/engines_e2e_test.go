package main

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// engineScenario is an eviction replay sized for the tiny profile: four 1500-token prompts
// (6000 tokens) push request 0 out of the 4096-token GPU pool, and the 8192-token host tier
// holds them all, so the replay is served from the host tier. The sizes are stated because
// only vLLM-family engines report a cache config.
func engineScenario(t *testing.T, backend string) string {
	t.Helper()
	src := fmt.Sprintf(`name = "engine-replay"
description = "tiny eviction replay for %[1]s"
[target]
endpoint = "http://127.0.0.1:8000/v1"
backend = "%[1]s"
[server]
gpu_kv_tokens = 4096
block_size = 16
cpu_offload_gib = 0.015625
store_bytes_per_token = 2048
[prompt]
seed = 3
shared_prefix_tokens = 256
token_counting = "server"
[request]
max_tokens = 16
timeout = "2m"
[[step]]
id = "sequence"
requests = 4
planned_context_tokens = [1500]
[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
`, backend)
	file := filepath.Join(t.TempDir(), backend+".toml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// engineRun runs the scenario for backend against a tiny server speaking dialect; extra
// adjusts the profile. It returns the record, the replay request's artifact entry and the
// preflight's warnings joined.
func engineRun(t *testing.T, backend string, extra func(*sim.Profile), metricsURLs func(*sim.Server) []string) (map[string]any, map[string]any, string) {
	t.Helper()
	rec, req, warnings, _ := engineRunDir(t, backend, extra, metricsURLs)
	return rec, req, warnings
}

// engineRunDir is engineRun that also returns the run's directory.
func engineRunDir(t *testing.T, backend string, extra func(*sim.Profile), metricsURLs func(*sim.Server) []string) (map[string]any, map[string]any, string, string) {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: extra})
	args := []string{"run", engineScenario(t, backend), "--endpoint", srv.URL() + "/v1", "--out", t.TempDir()}
	urls := srv.MetricsURLs()
	if metricsURLs != nil {
		urls = metricsURLs(srv)
	}
	for _, u := range urls {
		args = append(args, "--metrics", u)
	}
	out := args[len(args)-1]
	for i, a := range args {
		if a == "--out" {
			out = args[i+1]
		}
	}
	rec, stderr, code := runJSON(t, context.Background(), args...)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	art := readArtifact(t, dir, "step-02-replay.json")
	req := art["requests"].([]any)[0].(map[string]any)
	var warnings []string
	for _, w := range section(t, rec, "preflight")["warnings"].([]any) {
		warnings = append(warnings, w.(string))
	}
	return rec, req, strings.Join(warnings, " | "), dir
}

func dialect(name string, more func(*sim.Profile)) func(*sim.Profile) {
	return func(p *sim.Profile) {
		p.SetDialect(name, p.DialectVersion)
		if more != nil {
			more(p)
		}
	}
}

func verdictOf(t *testing.T, req map[string]any) (string, string) {
	t.Helper()
	v := req["verdict"].(map[string]any)
	var notes []string
	if n, ok := v["notes"].([]any); ok {
		for _, s := range n {
			notes = append(notes, s.(string))
		}
	}
	return v["verdict"].(string), v["reason"].(string) + " || " + strings.Join(notes, " | ")
}

// evidence is what a replay's verdict weighed, read from its request: each counter's delta
// under "<normalized name>_delta" (missing where the engine serves no such counter), and
// usage's prompt tokens.
func evidence(req map[string]any) map[string]any {
	ev := map[string]any{"prompt_tokens": req["result"].(map[string]any)["prompt_tokens"]}
	counters, _ := req["counters"].(map[string]any)["counters"].(map[string]any)
	for name, c := range counters {
		if d := c.(map[string]any)["delta"]; d != nil {
			ev[name+"_delta"] = d
		}
	}
	return ev
}

// TestEngineVLLMReload: the default dialect, for the table's completeness.
func TestEngineVLLMReload(t *testing.T) {
	_, req, _ := engineRun(t, "vllm", dialect(sim.DialectVLLM, nil), nil)
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// TestEngineLMCacheReloadTP2: two ranks count the same hit tokens; kvbench counts them once.
func TestEngineLMCacheReloadTP2(t *testing.T) {
	_, req, warnings := engineRun(t, "lmcache", dialect(sim.DialectLMCache, func(p *sim.Profile) { p.TensorParallelSize = 2 }), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	ev := evidence(req)
	ext, prompt := ev["external_prefix_hits_delta"].(float64), ev["prompt_tokens"].(float64)
	cached := req["result"].(map[string]any)["cached_prompt_tokens"].(float64)
	if ext > prompt || ext+ev["gpu_prefix_hits_delta"].(float64) != cached {
		t.Fatalf("external hits %v over 2 ranks, prompt %v, usage cached %v: ranks were summed", ext, prompt, cached)
	}
	if strings.Contains(warnings, "PROMETHEUS_MULTIPROC_DIR") {
		t.Fatalf("lmcache families are served, yet: %s", warnings)
	}
}

// TestEngineLMCacheFamiliesAbsent: vLLM launched without PROMETHEUS_MULTIPROC_DIR serves no
// lmcache family: preflight says exactly that, and the LMCache-only counters are absent.
func TestEngineLMCacheFamiliesAbsent(t *testing.T) {
	omit := dialect(sim.DialectLMCache, func(p *sim.Profile) {
		p.OmitMetrics = []string{"lmcache:num_requested_tokens_total", "lmcache:num_hit_tokens_total", "lmcache:num_stored_tokens_total",
			"lmcache:num_vllm_hit_tokens_total", "lmcache:local_cpu_evict_count_total", "lmcache:local_cache_usage"}
	})
	rec, req, warnings := engineRun(t, "lmcache", omit, nil)
	if !strings.Contains(warnings, "PROMETHEUS_MULTIPROC_DIR must be set") {
		t.Fatalf("warnings: %s", warnings)
	}
	counters := section(t, rec, "preflight")["counters"].(map[string]any)
	if counters["store_tokens"] != "absent" || counters["host_tier_evictions"] != "absent" {
		t.Fatalf("lmcache counters %v, want absent", counters)
	}
	// External hits fall back to vLLM's own connector counter.
	if v, why := verdictOf(t, req); v != "cpu_reload" || !strings.Contains(fmt.Sprint(counters["external_prefix_hits"]), "vllm:external_prefix_cache_hits_total") {
		t.Fatalf("verdict %s (%s), external hits from %v", v, why, counters["external_prefix_hits"])
	}
}

// TestEngineSGLangReloadByRequest: SGLang names the tier in the response; the verdict rests
// on it and the load-back counter agrees.
func TestEngineSGLangReloadByRequest(t *testing.T) {
	rec, req, warnings := engineRun(t, "sglang", dialect(sim.DialectSGLang, nil), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "tiers from the response's cached_tokens_details") || strings.Contains(why, "disagree") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	d, ok := req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)
	if !ok || d["host"].(float64) <= 0 {
		t.Fatalf("cached_tokens_details %v", req["result"].(map[string]any)["cached_tokens_details"])
	}
	ev := evidence(req)
	if ev["reload_tokens_delta"] != d["host"] {
		t.Fatalf("load-back delta %v, request host tokens %v", ev["reload_tokens_delta"], d["host"])
	}
	counters := section(t, rec, "preflight")["counters"].(map[string]any)
	if !strings.Contains(counters["load_bytes"].(string), "sglang:load_back_bytes_total") || !strings.Contains(counters["reload_tokens"].(string), `sglang:load_back_tokens_total{pool="kv"}`) {
		t.Fatalf("counters %v", counters)
	}
	if strings.Contains(warnings, "no external prefix-cache hit counter") {
		t.Fatalf("per-request evidence needs no hit counters: %s", warnings)
	}
}

// TestEngineSGLangDisagreementReported: a load-back counter pinned at 0 disagrees with the
// response; the verdict still follows the response and the notes say both numbers.
func TestEngineSGLangDisagreementReported(t *testing.T) {
	pin := dialect(sim.DialectSGLang, func(p *sim.Profile) {
		p.MetricValues = map[string]float64{"sglang:load_back_tokens_total": 0}
	})
	_, req, _ := engineRun(t, "sglang", pin, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "load-back (host->GPU) counter moved by 0 but the response reports") {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// TestEngineKVBMReloadBlocks: KVBM's block counters on its own URL, converted with the
// engine's block size (32 here: converting with 16 would halve them).
func TestEngineKVBMReloadBlocks(t *testing.T) {
	blocks32 := dialect(sim.DialectKVBM, func(p *sim.Profile) { p.BlockSize, p.NumGPUBlocks = 32, 128 })
	rec, req, warnings := engineRun(t, "kvbm", blocks32, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "tokens moved host->GPU") || strings.Contains(why, "disagree") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	ev := evidence(req)
	if ev["reload_tokens_delta"] != ev["external_prefix_hits_delta"] {
		t.Fatalf("onboarded tokens %v, external hits %v", ev["reload_tokens_delta"], ev["external_prefix_hits_delta"])
	}
	counters := section(t, rec, "preflight")["counters"].(map[string]any)
	if !strings.Contains(counters["reload_tokens"].(string), "x 32 tokens/block") || strings.Contains(warnings, "6880") {
		t.Fatalf("reload source %v, warnings %s", counters["reload_tokens"], warnings)
	}
}

// TestEngineKVBMFamiliesAbsent: without KVBM's own URL every kvbm family is absent: preflight
// says where they are, the block counters read null, and vLLM's hits still decide.
func TestEngineKVBMFamiliesAbsent(t *testing.T) {
	onlyVLLM := func(s *sim.Server) []string { return []string{s.URL() + "/metrics"} }
	rec, req, warnings := engineRun(t, "kvbm", dialect(sim.DialectKVBM, nil), onlyVLLM)
	if !strings.Contains(warnings, "port 6880") {
		t.Fatalf("warnings: %s", warnings)
	}
	if c := section(t, rec, "preflight")["counters"].(map[string]any); c["reload_tokens"] != "absent" || c["matched_tokens"] != "absent" {
		t.Fatalf("counters %v", c)
	}
	if _, ok := evidence(req)["reload_tokens_delta"]; ok {
		t.Fatalf("absent reload counter recorded as %v", evidence(req)["reload_tokens_delta"])
	}
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// TestEngineTRTLLMTierUnknown: TensorRT-LLM proves the replay hit the cache, never which tier.
func TestEngineTRTLLMTierUnknown(t *testing.T) {
	_, req, warnings := engineRun(t, "trtllm", dialect(sim.DialectTRTLLM, nil), nil)
	v, why := verdictOf(t, req)
	if v != "cache_hit_tier_unknown" || !strings.Contains(why, "nothing separates host-tier hits from GPU hits") || !strings.Contains(why, "cached prompt token counter moved by") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if !strings.Contains(warnings, "cannot tell") && !strings.Contains(warnings, "nothing separates") {
		t.Fatalf("preflight does not say the tier is unknown: %s", warnings)
	}
	ev := evidence(req)
	if ev["gpu_prefix_hits_delta"] != nil || ev["external_prefix_hits_delta"] != nil {
		t.Fatalf("hit counters the engine does not serve: %v %v", ev["gpu_prefix_hits_delta"], ev["external_prefix_hits_delta"])
	}
}

// TestEngineKVBMStuckOnboardCounter: KVBM's known bug (onboard counters stay 0 while
// matched tokens move) keeps the reload verdict from vLLM's hits, with the disagreement and
// the upstream bug named in the notes.
func TestEngineKVBMStuckOnboardCounter(t *testing.T) {
	stuck := dialect(sim.DialectKVBM, func(p *sim.Profile) {
		p.MetricValues = map[string]float64{"kvbm_onboard_blocks_h2d": 0}
	})
	_, req, _ := engineRun(t, "kvbm", stuck, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "reload counter did not move") || !strings.Contains(why, "known upstream bug") {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

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

// The tests below are issue 30's SGLang misreads, each through a run against the embedded
// engine speaking the upstream version and through `kvbench counters` on a fixture written
// from that version's code (harness/engine/testdata/dialects).

// sglangRanksRun runs engineScenario for sglang against a server at tensor parallelism 2
// speaking version, the scenario stating the TP size when tp > 0. It returns the replay
// request, the preflight's warnings joined and the console.
func sglangRanksRun(t *testing.T, version string, tp int, more func(*sim.Profile)) (req map[string]any, warnings, console string) {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: versioned(sim.DialectSGLang, version, func(p *sim.Profile) {
		p.TensorParallelSize = 2
		if more != nil {
			more(p)
		}
	})})
	file := engineScenario(t, "sglang")
	if tp > 0 {
		src, err := os.ReadFile(file)
		if err != nil {
			t.Fatal(err)
		}
		src = append(src, []byte("[topology]\ntensor_parallel_size = "+string(rune('0'+tp))+"\n")...)
		if err := os.WriteFile(file, src, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--metrics", srv.MetricsURLs()[0], "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-02-replay.json")
	var ws []string
	for _, w := range section(t, rec, "preflight")["warnings"].([]any) {
		ws = append(ws, w.(string))
	}
	return art["requests"].([]any)[0].(map[string]any), strings.Join(ws, " | "), stderr
}

// noteOf is the replay's note on counter name ("" for none).
func noteOf(t *testing.T, req map[string]any, name string) string {
	t.Helper()
	c, ok := req["counters"].(map[string]any)["counters"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("the replay's counters have no %s", name)
	}
	n, _ := c["note"].(string)
	return n
}

// Issue 30, items 1 to 3, on the newest collector (sgl-project/sglang 01068614): at TP 2 the
// radix families carry one series per rank of the same tokens, so the load-back reads the
// request's host + storage tokens once, not twice; storage hits come as the literal
// cache_source="storage" and count as external; the unified tree runs HiCache, and no "HiCache
// is off" is said while host hits move.
func TestEngineSGLangRankLabels(t *testing.T) {
	req, warnings, console := sglangRanksRun(t, sim.SGLangRankLabels, 0, func(p *sim.Profile) { p.StorageBackend = "HiCacheFile" })
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || strings.Contains(why, "disagree") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	d := req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)
	storage := d["storage"].(float64)
	if reload, src, _ := counterOf(t, req, "reload_tokens"); reload != d["host"].(float64)+storage || storage <= 0 || !strings.Contains(src, `pool="kv"`) {
		t.Fatalf("load-back %v from %q, the request's details %v", reload, src, d)
	}
	if n := noteOf(t, req, "reload_tokens"); n != "" {
		t.Fatalf("per-rank series carry a note: %s", n)
	}
	if disk, src, _ := counterOf(t, req, "prompt_tokens_cached_disk"); disk != storage || !strings.Contains(src, "storage|storage_.+") {
		t.Fatalf("storage hits %v from %q, want %v", disk, src, storage)
	}
	if ext, _, _ := counterOf(t, req, "external_prefix_hits"); ext != storage {
		t.Fatalf("external hits %v, want the storage tier's %v", ext, storage)
	}
	if strings.Contains(warnings+console, "HiCache is off") || strings.Contains(warnings+console, "no host tier") {
		t.Fatalf("told there is no host tier while host hits move: %s\n%s", warnings, console)
	}
	for name, c := range crossChecks(req) {
		if c["agrees"] != true {
			t.Errorf("cross-check %s disagrees: %v", name, c)
		}
	}
}

// Issue 30, item 1, on the older collector (016d8605): at TP 2 the unlabelled load-back is
// both ranks' equal counts summed. Without the TP size the reading is marked uncertain, in
// the record and in preflight's warnings; with topology.tensor_parallel_size = 2 it is divided
// and agrees with the request's host tokens.
func TestEngineSGLangUnlabelledRanks(t *testing.T) {
	req, warnings, console := sglangRanksRun(t, sim.SGLangPoolSplit, 0, nil)
	host := req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)["host"].(float64)
	if reload, _, _ := counterOf(t, req, "reload_tokens"); reload != 2*host {
		t.Fatalf("load-back %v, want the registry's sum over 2 ranks of %v", reload, host)
	}
	if n := noteOf(t, req, "reload_tokens"); !strings.Contains(n, "uncertain") || !strings.Contains(n, "tensor_parallel_size") {
		t.Fatalf("note %q", n)
	}
	// Preflight's scrape comes before any load-back: the verdict and the console say it.
	if _, why := verdictOf(t, req); !strings.Contains(why, "reload_tokens: uncertain") {
		t.Fatalf("the verdict does not say the load-back is uncertain: %s (preflight: %s)", why, warnings)
	}
	if !strings.Contains(console, "counter reload_tokens: uncertain") {
		t.Fatalf("the console does not say the load-back is uncertain:\n%s", console)
	}

	req, _, _ = sglangRanksRun(t, sim.SGLangPoolSplit, 2, nil)
	host = req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)["host"].(float64)
	if reload, _, _ := counterOf(t, req, "reload_tokens"); reload != host {
		t.Fatalf("load-back %v at a stated TP 2, want %v", reload, host)
	}
	if n := noteOf(t, req, "reload_tokens"); !strings.Contains(n, "divided by 2") {
		t.Fatalf("note %q", n)
	}
	if v, why := verdictOf(t, req); v != "cpu_reload" || strings.Contains(why, "disagree") {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// Issue 30 through `kvbench counters`: the fixtures written from the newest and the older
// collector at TP 2.
func TestCountersSGLangRanks(t *testing.T) {
	dir := filepath.Join("..", "..", "harness", "engine", "testdata", "dialects")
	got, out, err := runCountersCLI(t, filepath.Join(dir, "sglang-sg4-ranks.prom"), "--backend", "sglang")
	if err != nil {
		t.Fatal(err)
	}
	for name, want := range map[string]float64{"reload_tokens": 11264, "store_tokens": 52000, "load_bytes": 1.7e9, "prompt_tokens_cached_disk": 5264, "external_prefix_hits": 11264} {
		if c := got.Counters[name]; c.Value == nil || *c.Value != want || c.Note != "" {
			t.Errorf("%s: %+v, want %v and no note\n%s", name, c, want, out)
		}
	}
	got, out, err = runCountersCLI(t, filepath.Join(dir, "sglang-sg3-tp2.prom"), "--backend", "sglang")
	if err != nil {
		t.Fatal(err)
	}
	if c := got.Counters["reload_tokens"]; c.Value == nil || *c.Value != 22528 || !strings.Contains(c.Note, "uncertain") {
		t.Errorf("reload_tokens: %+v, want 22528 marked uncertain\n%s", c, out)
	}
}

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

// smokeWith writes the smoke scenario with extra TOML under [target] and returns its path.
func smokeWith(t *testing.T, target string) string {
	t.Helper()
	base, err := os.ReadFile("../../scenarios/smoke.toml")
	if err != nil {
		t.Fatal(err)
	}
	src := strings.Replace(string(base), "[target]\n", "[target]\n"+target+"\n", 1)
	file := filepath.Join(t.TempDir(), "smoke.toml")
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestMissingGPUHitCounterIsInvalidNotZero: a server whose GPU prefix-hit counter kvbench
// cannot find (here a metric_names override to a name the engine does not serve) gets a
// preflight warning, and the replay, which the engine served from GPU memory, is invalid
// naming the counter instead of a recompute on "0 GPU hits".
func TestMissingGPUHitCounterIsInvalidNotZero(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	file := smokeWith(t, `metric_names = { gpu_prefix_hits = "vllm:not_served_total" }`)
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitGateFailed || !strings.Contains(stderr, "the replay's measurement is invalid") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	pre := section(t, rec, "preflight")
	var warned bool
	for _, w := range pre["warnings"].([]any) {
		warned = warned || strings.Contains(w.(string), "no GPU prefix-cache hit counter")
	}
	if !warned || pre["counters"].(map[string]any)["gpu_prefix_hits"] != "absent" {
		t.Errorf("preflight warnings %v, gpu_prefix_hits %v: want a warning and absent", pre["warnings"], pre["counters"].(map[string]any)["gpu_prefix_hits"])
	}
	r := section(t, rec, "replay")
	if r["verdict"] != "invalid" || !strings.Contains(r["verdict_reason"].(string), "gpu_prefix_hits") {
		t.Fatalf("replay %v: %v, want invalid naming gpu_prefix_hits", r["verdict"], r["verdict_reason"])
	}
	if r["gpu_prefix_hits_delta"] != nil {
		t.Errorf("gpu_prefix_hits_delta %v, want null", r["gpu_prefix_hits_delta"])
	}
	if cached, ok := r["cached_prompt_tokens"].(float64); !ok || cached == 0 {
		t.Errorf("cached_prompt_tokens %v: the engine should have served the replay from cache", r["cached_prompt_tokens"])
	}
}

// TestIsolationCleanOnQuietServer: on a server with no other client, every isolated request's
// token counters move by exactly its usage, and its window says so; nothing is contaminated.
func TestIsolationCleanOnQuietServer(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if s := section(t, rec, "sequence"); s["counters_valid"] != true {
		t.Fatalf("sequence counters_valid %v: %v", s["counters_valid"], s["invalid_reasons"])
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	for _, name := range []string{"step-01-sequence.json", "step-02-replay.json"} {
		for i, q := range readArtifact(t, dir, name)["requests"].([]any) {
			d := q.(map[string]any)["counters"].(map[string]any)
			iso, _ := d["isolation"].(string)
			if d["contaminated"] == true || !strings.HasPrefix(iso, "clean: prompt_tokens moved by ") || !strings.Contains(iso, "generation_tokens moved by ") {
				t.Errorf("%s request %d: isolation %q contaminated %v", name, i, iso, d["contaminated"])
			}
		}
	}
	if r := section(t, rec, "replay"); r["verdict"] == "invalid" {
		t.Errorf("replay invalid on a quiet server: %v", r["verdict_reason"])
	}
}

// TestRestartInsideSequenceInvalidatesStep: the engine restarts at the sequence's request 1
// (preflight sends 2 chat requests, so it is the 4th). The sequence section says its counters
// are invalid, naming the request, instead of diffing its first and last scrapes.
func TestRestartInsideSequenceInvalidatesStep(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.RestartAtRequest = 4 }})
	rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	s := section(t, rec, "sequence")
	reasons, _ := s["invalid_reasons"].([]any)
	if s["counters_valid"] != false || len(reasons) == 0 || !strings.HasPrefix(reasons[0].(string), "request 1: ") {
		t.Fatalf("sequence counters_valid %v reasons %v, want false naming request 1", s["counters_valid"], reasons)
	}
	if s["gpu_to_cpu_bytes_delta"] != nil || s["store_proven"] != false {
		t.Errorf("store delta %v proven %v across a restart", s["gpu_to_cpu_bytes_delta"], s["store_proven"])
	}
}

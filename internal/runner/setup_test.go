package runner

import (
	"context"
	"encoding/json"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/scenarios"
	"github.com/anvil-serving/kvbench/sim"
)

// TestPlanOnServerUsesServerCapacity: kvbench plan against a server assesses its replays
// with the cache config the server exports, as preflight does; smoke leaves the GPU pool to
// the server, so on the scenario alone the replay's eviction would be unknown.
func TestPlanOnServerUsesServerCapacity(t *testing.T) {
	srv, err := sim.Start(sim.Options{}) // tiny: 256 blocks of 16 tokens, a 0.015625 GiB tier
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	sc, err := scenarios.Resolve("smoke")
	if err != nil {
		t.Fatal(err)
	}
	sc.Target.Endpoint = srv.URL() + "/v1"
	sc.Target.Metrics = []string{srv.URL() + "/metrics"}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := PlanOnServer(ctx, sc, "")
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Replays) != 1 {
		t.Fatalf("%d replays assessed, want 1", len(p.Replays))
	}
	s := p.Replays[0].Assessment.Setup
	if s.GPUKVTokens != 4096 || s.GPUKVTokensSource != "server (vllm:cache_config_info)" {
		t.Errorf("GPU pool %d (%s), want the server's 4096 from vllm:cache_config_info", s.GPUKVTokens, s.GPUKVTokensSource)
	}
	if s.CPUOffloadGiB != 0.015625 || s.CPUOffloadGiBSource != "server (vllm:cache_config_info)" {
		t.Errorf("CPU tier %g GiB (%s), want the server's 0.015625", s.CPUOffloadGiB, s.CPUOffloadGiBSource)
	}
	if a := p.Replays[0].Assessment; a.EvictionPressure == "unknown" {
		t.Errorf("eviction pressure unknown with the server's pool known: %v", a.Findings)
	}
}

// TestPlanningLeavesTheScenario: planning a reload curve on a server (kvbench plan
// --endpoint, and preflight with the run's flags) expands it into the plan's own scenario,
// its points named by size class; the scenario loaded stays what the file says.
func TestPlanningLeavesTheScenario(t *testing.T) {
	srv, err := sim.Start(sim.Options{})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	sc, err := scenarios.Resolve("reload-curve")
	if err != nil {
		t.Fatal(err)
	}
	sc.Target.Endpoint = srv.URL() + "/v1"
	sc.Target.Metrics = []string{srv.URL() + "/metrics"}
	before, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
	defer cancel()
	p, err := PlanOnServer(ctx, sc, "")
	if err != nil {
		t.Fatal(err)
	}
	if p.Scenario.HasCurves() || len(p.Scenario.Curves) != 1 || p.Scenario.Target.Model == "" {
		t.Fatalf("planned scenario: curves %+v, model %q", p.Scenario.Curves, p.Scenario.Target.Model)
	}
	if got := p.Scenario.Steps[0].ID; got != "curve_1k" {
		t.Errorf("first point %q, want curve_1k", got)
	}
	tgt, err := Connect(sc, "")
	if err != nil {
		t.Fatal(err)
	}
	_, pp, err := Preflight(ctx, sc, tgt, plan.Choices{Repeat: 3, Salt: scenarios.RandomSalt})
	if err != nil {
		t.Fatal(err)
	}
	if pp.Scenario.Repeat != 3 || pp.Scenario.Prompt.Salt == "" || pp.Scenario.Prompt.Salt == scenarios.RandomSalt {
		t.Errorf("preflight's plan: repeat %d, salt %q: the run's flags were not applied", pp.Scenario.Repeat, pp.Scenario.Prompt.Salt)
	}
	after, err := json.Marshal(sc)
	if err != nil {
		t.Fatal(err)
	}
	if string(after) != string(before) {
		t.Errorf("planning changed the scenario:\nbefore %s\nafter  %s", before, after)
	}
}

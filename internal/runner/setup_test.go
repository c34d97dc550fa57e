package runner

import (
	"context"
	"testing"
	"time"

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

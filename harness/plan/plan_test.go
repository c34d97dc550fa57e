package plan

import (
	"context"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/scenarios"
)

func TestMakeBuiltins(t *testing.T) {
	ctx := context.Background()
	sc, err := scenarios.Builtin("eviction-6x150k-replay")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(ctx, sc, Facts{})
	if err != nil {
		t.Fatal(err)
	}
	if len(p.Steps) != 2 || len(p.Steps[0].Requests) != 6 || len(p.Steps[1].Requests) != 1 {
		t.Fatalf("steps %+v", p.Steps)
	}
	if p.Steps[1].Requests[0].Prompt.Identity != p.Steps[0].Requests[0].Prompt.Identity {
		t.Fatal("the replay's identity differs from request 0's")
	}
	if len(p.Replays) != 1 {
		t.Fatalf("replays %+v", p.Replays)
	}
	a := p.Replays[0].Assessment
	// Estimated plans overflow the 16 GiB tier, which the server's count decides; the
	// pressure on the GPU is certain.
	if a.EvictionPressure != capacity.Yes || a.TierLargerThanGPU != capacity.Yes || a.TierHoldsSequence != capacity.Unknown || a.UniqueTokens < 850000 {
		t.Fatalf("assessment %+v", a)
	}

	ctl, err := scenarios.Builtin("offload8-control")
	if err != nil {
		t.Fatal(err)
	}
	p, err = Make(ctx, ctl, Facts{})
	if err != nil {
		t.Fatal(err)
	}
	a = p.Replays[0].Assessment
	if a.CanProveReload != capacity.No || a.TierLargerThanGPU != capacity.No || a.EvictionPressure != capacity.No {
		t.Fatalf("control assessment %+v", a)
	}
}

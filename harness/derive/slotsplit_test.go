package derive

import (
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

// TestSlotSplitTiers: a step without tier counters whose every request has a slot split gets
// tiers summed from them, marked as inferred; one request without a split leaves them absent.
func TestSlotSplitTiers(t *testing.T) {
	step := func(splits ...*record.SlotSplit) Step {
		st := Step{StepArtifact: record.StepArtifact{Step: "load", Kind: record.KindTrace, Trace: &record.TraceReplay{Mode: record.TraceClosedLoop}}}
		for i, sp := range splits {
			prompt, cached := 100, 0
			if sp != nil {
				cached = sp.LiveTokens + sp.HostTokens
			}
			st.Requests = append(st.Requests, record.Request{Step: "load", IndexInStep: i, Trace: &record.TraceRequest{Line: i + 1, Slot: sp},
				Result: record.Result{PromptTokens: &prompt, CachedPromptTokens: &cached}})
		}
		return st
	}
	m := record.TierBySlotHistory
	s := TraceOf(step(&record.SlotSplit{Method: m}, &record.SlotSplit{LiveTokens: 30, HostTokens: 10, Method: m}, &record.SlotSplit{HostTokens: 50, Method: m}), "")
	tr := s.Tiers
	if tr.Source != m || *tr.PromptTokens != 300 || *tr.GPUHitTokens != 30 || *tr.HostHitTokens != 60 || *tr.RecomputeTokens != 210 || *tr.Host != 0.2 {
		t.Errorf("tiers %+v", tr)
	}
	if s := TraceOf(step(&record.SlotSplit{LiveTokens: 30, Method: m}, nil), ""); s.Tiers.Source != "" || s.Tiers.Host != nil {
		t.Errorf("a request without a split: tiers %+v", s.Tiers)
	}
}

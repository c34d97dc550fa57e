package derive

import (
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

func replayStep(ttft float64, v verdict.Verdict) Step {
	prompt, cached := 1000, 990
	return Assemble(record.StepArtifact{Step: "replay", Kind: record.KindReplay, DeltaScope: record.ScopeRequest, Requests: []record.Request{{
		Step:    "replay",
		Result:  record.Result{TimeToFirstOutputMS: &ttft, PromptTokens: &prompt, CachedPromptTokens: &cached},
		Verdict: &record.Decision{Verdict: v},
	}}})
}

// TestBuildRepeats: medians and spreads per metric, and a verdict disagreement reported as
// such rather than averaged away.
func TestBuildRepeats(t *testing.T) {
	reps := []Repetition{
		{Repetition: record.Repetition{Index: 0, Seed: 5}, Steps: []Step{replayStep(100, verdict.CPUReload)}},
		{Repetition: record.Repetition{Index: 1, Seed: 6}, Steps: []Step{replayStep(120, verdict.CPUReload)}},
		{Repetition: record.Repetition{Index: 2, Seed: 7}, Steps: []Step{replayStep(90, verdict.Recompute)}},
	}
	for i := range reps {
		reps[i].Sections = BuildSections(reps[i].Steps, nil)
	}
	rs := BuildRepeats(reps)
	if rs.Count != 3 || rs.VerdictsAgree || len(rs.Disagreements) != 1 || rs.Disagreements[0] != "replay: [cpu_reload cpu_reload recompute]" {
		t.Fatalf("%+v", rs)
	}
	if len(rs.Steps) != 1 || rs.Steps[0].Step != "replay" {
		t.Fatalf("steps %+v", rs.Steps)
	}
	st := rs.Steps[0]
	ttft := st.Requests[0].Metrics.TimeToFirstOutputMS
	if ttft.N != 3 || *ttft.Median != 100 || *ttft.Min != 90 || *ttft.Max != 120 || *ttft.Spread != 30 || *ttft.RelativeSpread != 0.3 {
		t.Fatalf("ttft %+v", ttft)
	}
	if cf := st.Requests[0].Metrics.CachedFraction; *cf.Median != 0.99 || *cf.Spread != 0 {
		t.Fatalf("cached fraction %+v", cf)
	}
	// No counters: load bytes per token is absent in every repetition, never 0.
	if lb := st.Requests[0].Metrics.LoadBytesPerToken; lb.N != 0 || lb.Absent != 3 || lb.Median != nil {
		t.Fatalf("load bytes per token %+v", lb)
	}
	if *st.VerdictsAgree {
		t.Fatal("verdicts_agree with a recompute among cpu_reloads")
	}
	// A repetition that stopped before the replay says so.
	short := Repetition{Repetition: record.Repetition{Index: 3}, Steps: []Step{Assemble(record.StepArtifact{Step: "replay", Kind: record.KindReplay})}}
	short.Sections = BuildSections(short.Steps, nil)
	if v := short.Verdict("replay"); v != Missing {
		t.Fatalf("unsent replay: %s", v)
	}
	if v := reps[0].Verdict("nope"); v != Missing {
		t.Fatalf("no such step: %s", v)
	}
}

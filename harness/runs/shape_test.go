package runs

import (
	"context"
	"testing"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// TestShapeOfARecordBeforeShapes: a prompt recorded without its shape (a baseline written
// before salts) gets the shape the builder gives it, so a salted candidate compares with it.
func TestShapeOfARecordBeforeShapes(t *testing.T) {
	for _, name := range []string{"eviction-6x150k-replay", "offload8-control"} {
		sc, err := scenarios.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		p, err := plan.Make(context.Background(), sc, plan.Facts{})
		if err != nil {
			t.Fatal(err)
		}
		run := func(keepShapes bool) Identity {
			var steps []derive.Step
			for _, st := range p.Steps {
				a := record.StepArtifact{Step: st.ID, Kind: record.KindSequence}
				for _, q := range st.Requests {
					rq := record.Request{Step: st.ID, IndexInStep: q.IndexInStep, Ordinal: q.Ordinal, PlannedTokens: q.PlannedTokens, Prompt: q.Prompt.Prompt}
					if !keepShapes {
						rq.Prompt.Shape = ""
					}
					a.Requests = append(a.Requests, rq)
				}
				steps = append(steps, derive.Assemble(a))
			}
			r := &Run{Run: &derive.Run{Run: &record.Run{}, Scenario: sc, Repetitions: []derive.Repetition{{Repetition: record.Repetition{Seed: sc.RepetitionSeed(0)}, Steps: steps}}}}
			return r.Identify()
		}
		recorded, derived := run(true), run(false)
		for _, k := range recorded.Order {
			if recorded.Shapes[k] == "" || recorded.Shapes[k] != derived.Shapes[k] {
				t.Errorf("%s %s: recorded shape %q, derived %q", name, k, recorded.Shapes[k], derived.Shapes[k])
			}
		}
		salted := recorded
		salted.Salt = "n1"
		if mm := Mismatches(derived, salted); len(mm) != 0 {
			t.Errorf("%s: %v", name, mm)
		}
	}
}

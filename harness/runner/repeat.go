package runner

import (
	"context"
	"fmt"
	"path/filepath"
	"strings"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/scenarios"
)

// ArtifactName is the file of repetition k's step i (0-based). Repetition 0 keeps the plain
// step-NN-<id>.json names, so readers of single runs see no difference.
func ArtifactName(k, i int, id string) string {
	if k == 0 {
		return fmt.Sprintf("step-%02d-%s.json", i+1, id)
	}
	return fmt.Sprintf("repeat-%02d-step-%02d-%s.json", k, i+1, id)
}

// RepetitionPlanner returns the planner of repetition k: the scenario's prompts rebuilt with
// seed = prompt.seed + k, counted on the server like the first plan. A server's caches cannot
// be reset, so the same bytes again would turn the cold sequence into cache hits.
func RepetitionPlanner(sc *scenarios.Scenario, t Target) func(ctx context.Context, k int) (*plan.Plan, error) {
	return func(ctx context.Context, k int) (*plan.Plan, error) {
		c := *sc
		c.Prompt.Seed = sc.RepetitionSeed(k)
		p, err := plan.Make(ctx, &c, t.TokenCounter(sc))
		if err != nil {
			return nil, fmt.Errorf("planning repetition %d (seed %d): %w", k, c.Prompt.Seed, err)
		}
		return p, nil
	}
}

// runRepetitions runs the plan Repeat times; r.artifacts ends as repetition 0's steps, and
// info gets every repetition. A repetition that cannot be planned fails the run: status
// failed, the stop reason says why, and the finished repetitions are kept.
func (r *runner) runRepetitions(ctx context.Context, info *record.RunInfo) error {
	n := max(r.cfg.Repeat, 1)
	var reps []record.Repetition
	for k := 0; k < n && ctx.Err() == nil; k++ {
		p := r.cfg.Plan
		if k > 0 {
			if r.cfg.Replan == nil {
				info.Status, info.StopReason = record.StatusFailed, fmt.Sprintf("repetition %d of %d could not run: no planner for repetitions", k+1, n)
				break
			}
			var err error
			if p, err = r.cfg.Replan(ctx, k); err != nil {
				info.Status, info.StopReason = record.StatusFailed, fmt.Sprintf("repetition %d of %d could not run: %v", k+1, n, err)
				r.cfg.Console.Printf("FAILED: %s", info.StopReason)
				break
			}
		}
		seed := r.cfg.Scenario.RepetitionSeed(k)
		if n > 1 {
			r.cfg.Console.Printf("repetition %d of %d (prompt seed %d)", k+1, n, seed)
		}
		rep, err := r.runRepetition(ctx, k, seed, p)
		reps = append(reps, rep)
		if err != nil {
			r.artifacts = reps[0].Steps
			return err
		}
	}
	if len(reps) > 0 {
		r.artifacts = reps[0].Steps
	}
	if n > 1 {
		info.Repetitions = reps
	}
	return nil
}

// runRepetition runs every step of p once, writing each step's artifact as it ends.
func (r *runner) runRepetition(ctx context.Context, k int, seed int64, p *plan.Plan) (record.Repetition, error) {
	rep := record.Repetition{Index: k, Seed: seed, Status: record.StatusCompleted, Artifacts: []string{}}
	r.artifacts = nil // decideReplay reads this repetition's steps only
	for i, st := range p.Steps {
		if ctx.Err() != nil {
			break
		}
		art := r.runStep(ctx, st)
		r.artifacts = append(r.artifacts, art)
		name := ArtifactName(k, i, st.ID)
		sum, err := runs.WriteJSON(filepath.Join(r.dir, name), art)
		rep.Steps = r.artifacts
		if err != nil {
			return rep, err
		}
		r.refs = append(r.refs, record.ArtifactRef{Step: st.ID, Path: name, SHA256: sum, Repetition: k})
		rep.Artifacts = append(rep.Artifacts, name)
		r.cfg.Console.StepDone(art)
	}
	if ctx.Err() != nil {
		rep.Status = record.StatusInterrupted
	}
	return rep, nil
}

// evaluateRepeatedGates checks the gates against every repetition: a gate passes only when it
// passes in all of them, and a failure names the repetition.
func evaluateRepeatedGates(gates []scenarios.Gate, reps []record.Repetition, first []record.Section) []record.GateResult {
	out := EvaluateGates(gates, first)
	for _, rep := range reps {
		if rep.Index == 0 {
			continue
		}
		for i, g := range EvaluateGates(gates, record.BuildSections(rep.Steps, nil)) {
			if g.Passed {
				continue
			}
			reason := fmt.Sprintf("repetition %d: %s", rep.Index, g.Reason)
			if out[i].Passed {
				out[i].Passed, out[i].Reason = false, reason
			} else if !strings.Contains(out[i].Reason, reason) {
				out[i].Reason += "; " + reason
			}
		}
	}
	return out
}

package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"strings"

	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/scenarios"
)

// ArtifactName is the file of repetition k's step i (0-based); see runs.ArtifactName.
func ArtifactName(k, i int, id string) string { return runs.ArtifactName(k, i, id) }

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
// r.info gets every repetition. A repetition that cannot be planned ends the run with what
// was measured and says why in the stop reason; a write failure ends it through r.fail.
func (r *runner) runRepetitions(ctx context.Context) {
	info := r.info
	n := max(r.cfg.Repeat, 1)
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
		rep := r.runRepetition(ctx, k, seed, p)
		r.reps = append(r.reps, rep)
	}
	if len(r.reps) > 0 {
		r.artifacts = r.reps[0].Steps
	}
	if n > 1 {
		info.Repetitions = r.reps
	}
}

// runRepetition runs every step of p once. Each step journals its requests as they end;
// at its end the step's file is written, run.json is replaced to list it, and the journal,
// now redundant, is removed. A file that cannot be written stops the run with the journal
// kept, so a reader still finds the step's requests.
func (r *runner) runRepetition(ctx context.Context, k int, seed int64, p *plan.Plan) record.Repetition {
	rep := record.Repetition{Index: k, Seed: seed, Status: record.StatusCompleted, Artifacts: []string{}}
	r.artifacts = nil // decideReplay reads this repetition's steps only
	for i, st := range p.Steps {
		if ctx.Err() != nil {
			break
		}
		name := ArtifactName(k, i, st.ID)
		j, err := runs.OpenJournal(filepath.Join(r.dir, runs.JournalName(name)))
		if err != nil {
			r.fail(fmt.Errorf("step %s: %w", st.ID, err))
			break
		}
		r.journal = j
		art := r.runStep(ctx, st)
		r.journal = nil
		jerr := j.Close()
		r.artifacts = append(r.artifacts, art)
		rep.Steps = r.artifacts
		r.cfg.Console.StepDone(art)
		sum, err := runs.WriteJSON(filepath.Join(r.dir, name), art)
		if err != nil {
			r.fail(fmt.Errorf("step %s: its requests are kept in %s: %w", st.ID, runs.JournalName(name), err))
			break
		}
		r.refs = append(r.refs, record.ArtifactRef{Step: st.ID, Path: name, SHA256: sum, Repetition: k})
		rep.Artifacts = append(rep.Artifacts, name)
		if err := r.checkpoint(rep); err != nil {
			r.fail(fmt.Errorf("after step %s: %w", st.ID, err))
			break
		}
		if jerr == nil {
			os.Remove(j.Path()) // the step file holds it all; a leftover is ignored by readers
		}
	}
	if ctx.Err() != nil {
		rep.Status = record.StatusInterrupted
	}
	return rep
}

// checkpoint replaces run.json with the record of what the run measured so far, status
// running, cur being the repetition in progress.
func (r *runner) checkpoint(cur record.Repetition) error {
	info := *r.info
	info.Artifacts = r.refs
	steps := cur.Steps
	if len(r.reps) > 0 {
		steps = r.reps[0].Steps
	}
	if max(r.cfg.Repeat, 1) > 1 {
		info.Repetitions = append(append([]record.Repetition(nil), r.reps...), cur)
	}
	_, err := runs.ReplaceJSON(filepath.Join(r.dir, "run.json"), record.Build(info, steps))
	return err
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

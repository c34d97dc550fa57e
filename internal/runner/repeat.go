package runner

import (
	"context"
	"fmt"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/internal/events"
)

// RepetitionPlanner returns the planner of repetition k of first: its planned scenario's
// prompts rebuilt with seed = prompt.seed + k, counted on the server like first. A server's
// caches cannot be reset, so the same bytes again would turn the cold sequence into cache hits.
func RepetitionPlanner(first *plan.Plan, t Target) func(ctx context.Context, k int) (*plan.Plan, error) {
	return func(ctx context.Context, k int) (*plan.Plan, error) {
		p, err := first.Repetition(ctx, k, t.TokenCounter(first.Scenario, first.Scenario.Target.Model))
		if err != nil {
			return nil, fmt.Errorf("planning repetition %d (seed %d): %w", k, first.Scenario.RepetitionSeed(k), err)
		}
		return p, nil
	}
}

// runRepetitions runs the plan Repeat times. A repetition that cannot be planned ends the
// run with what was measured and says why in the stop reason; a write failure ends it
// through r.fail.
func (r *runner) runRepetitions(ctx context.Context) {
	info := r.info
	n := max(r.cfg.Repeat, 1)
	for k := 0; k < n && ctx.Err() == nil && r.failure() == nil; k++ {
		p := r.cfg.Plan
		if k > 0 {
			if r.cfg.Replan == nil {
				info.Status, info.StopReason = record.StatusFailed, fmt.Sprintf("repetition %d of %d could not run: no planner for repetitions", k+1, n)
				break
			}
			var err error
			if p, err = r.cfg.Replan(ctx, k); err != nil {
				info.Status, info.StopReason = record.StatusFailed, fmt.Sprintf("repetition %d of %d could not run: %v", k+1, n, err)
				r.emit(events.Note{Text: "FAILED: " + info.StopReason})
				break
			}
		}
		seed := r.cfg.Scenario.RepetitionSeed(k)
		if n > 1 {
			r.emit(events.Note{Text: fmt.Sprintf("repetition %d of %d (prompt seed %d)", k+1, n, seed)})
		}
		r.runRepetition(ctx, k, seed, p)
	}
}

// runRepetition runs every step of p once, emitting each step's start and end: the run
// directory's recorder journals its requests and writes its file and run.json.
func (r *runner) runRepetition(ctx context.Context, k int, seed int64, p *plan.Plan) {
	r.cur = &derive.Repetition{Repetition: record.Repetition{Index: k, Seed: seed, Status: record.StatusCompleted, Artifacts: []string{}}}
	r.curPlan = p
	for i, st := range p.Steps {
		if ctx.Err() != nil {
			break
		}
		name := runs.ArtifactName(k, i, st.ID)
		r.emit(events.StepStarted{Repetition: k, Index: i, Step: st.ID, Artifact: name, Describes: describe(st), Steps: len(p.Steps), Repetitions: max(r.cfg.Repeat, 1)})
		if r.failure() != nil {
			break
		}
		step := r.runStep(ctx, k, st)
		r.cur.Steps = append(r.cur.Steps, step)
		r.cur.Artifacts = append(r.cur.Artifacts, name)
		if ctx.Err() != nil {
			r.cur.Status = record.StatusInterrupted
		}
		r.emit(events.StepDone{Repetition: k, Index: i, Artifact: name, Step: step, Record: r.record()})
		if r.failure() != nil {
			break
		}
	}
	if ctx.Err() != nil {
		r.cur.Status = record.StatusInterrupted
	}
	r.reps = append(r.reps, *r.cur)
	r.cur = nil
}

// describe says what a step sends, in words.
func describe(st plan.Step) string {
	switch {
	case st.Step.IsConversation():
		return fmt.Sprintf("conversation, %d users x %d turns", st.Step.Users, st.Step.Turns)
	case st.Step.Replay != nil:
		return fmt.Sprintf("replay of %s[%d]", st.Step.Replay.Step, st.Step.Replay.Request)
	case st.Trace != nil:
		t := st.Trace
		how := "open loop at the trace's timestamps x " + units.Exact(st.Step.TimeScale)
		if st.Step.ClosedLoop() {
			how = fmt.Sprintf("closed loop, %d in flight", st.Step.Concurrency)
		}
		return fmt.Sprintf("trace %s, %d requests (%d dropped over max_input_tokens), %s, prompts as %s", t.File, t.Requests, t.Dropped, how, t.PromptForm)
	}
	return fmt.Sprintf("%d requests, concurrency %d", len(st.Requests), st.Step.Concurrency)
}

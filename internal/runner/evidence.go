package runner

import (
	"context"
	"fmt"
	"maps"
	"slices"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// The runner gathers a replay's evidence; verdict.Decide judges it.

// decide sets the replay request's verdict from everything known about it: its counters and
// usage, its own tier details, the slot evidence, the replica that served it, the run's
// offload evidence so far and the capacity math with the tokens the server counted.
func (r *runner) decide(q *record.Request, st plan.Step, slot *verdict.SlotEvidence) {
	res := q.Result
	e := verdict.Evidence{
		Failed:             res.Failed(),
		Failure:            res.Error,
		PromptTokens:       res.PromptTokens,
		CachedPromptTokens: res.CachedPromptTokens,
		SharedPrefixTokens: q.Prompt.SharedPrefixTokens,
		BlockSize:          r.cfg.BlockSize,
		LoadBytesPerToken:  r.cfg.Scenario.Server.LoadBytesPerToken,
		Counters:           counterEvidence(q.Counters),
		NoCounters:         q.CountersError,
		Slot:               slot,
		Routing:            r.routing(q),
		Engine:             r.traits,
	}
	if t := res.CachedTokensDetails; t != nil && !res.Failed() {
		tiers := *t
		e.RequestTier = &tiers
	}
	// The run so far, this request included: its steps' spans joined, so a counter reset
	// anywhere in it leaves the offload evidence unknown rather than wrong.
	steps := r.stepsWith(st, *q)
	span := derive.SpanOf(steps)
	e.Offload = verdict.OffloadEvidence{StoreBytes: span.Delta(metrics.StoreBytes), StoreTokens: span.Delta(metrics.StoreTokens),
		StoresSkipped: span.Delta(metrics.StoresSkipped), AllocationFailures: span.Delta(metrics.AllocationFailures)}
	a := r.assess(st, steps)
	e.Setup = a
	e.WarmCaches = r.warmCaches(steps)
	d := verdict.Decide(e)
	if a != nil {
		c := a.Capacity
		d.Capacity = &c
	}
	q.Verdict = &d.Decision
}

// warmCaches are the findings of the cold steps among steps that came back cached beyond
// what the run could have cached, in step order (derive.WarmSteps, as the record derives
// them).
func (r *runner) warmCaches(steps []derive.Step) []verdict.WarmCaches {
	found := derive.WarmSteps(steps, derive.PromptsOf(r.cfg.Scenario, r.cfg.BlockSize))
	var out []verdict.WarmCaches
	for _, k := range slices.Sorted(maps.Keys(found)) {
		out = append(out, *found[k])
	}
	return out
}

// stepsWith is the running repetition's steps so far, and the current step holding q.
func (r *runner) stepsWith(st plan.Step, q record.Request) []derive.Step {
	var steps []derive.Step
	if r.cur != nil {
		steps = slices.Clone(r.cur.Steps)
	}
	return append(steps, derive.Assemble(record.StepArtifact{Step: st.ID, Kind: record.KindReplay, DeltaScope: record.ScopeRequest, Requests: []record.Request{q}}))
}

// assess does the capacity math of the replay step st with the tokens the server counted,
// and the bytes per stored token the run measured, on top of what preflight found.
func (r *runner) assess(st plan.Step, steps []derive.Step) *capacity.Assessment {
	store, _ := derive.MeasuredBytesPerToken(steps[:len(steps)-1])
	setup := r.cfg.Engine.Resolve(plan.Measured(r.cfg.Capacity, store)...)
	tokens := map[int]int{}
	counting := "measured"
	for _, s := range steps {
		for _, q := range s.Requests {
			if q.Result.PromptTokens != nil {
				tokens[q.Ordinal] = *q.Result.PromptTokens
			} else if _, ok := tokens[q.Ordinal]; !ok {
				tokens[q.Ordinal] = q.Prompt.Tokens
				counting = r.cfg.Plan.TokenCounting
			}
		}
	}
	for _, rp := range plan.AssessReplays(r.cfg.Scenario, setup, tokens, counting) {
		if rp.Step == st.ID {
			a := rp.Assessment
			return &a
		}
	}
	return nil
}

// counterEvidence is a span's usable deltas and validity, as a verdict weighs them.
func counterEvidence(c *record.Counters) *verdict.Counters {
	if c == nil {
		return nil
	}
	out := &verdict.Counters{Deltas: map[metrics.Counter]float64{}, Unreadable: map[metrics.Counter]string{}, Resolution: map[metrics.Counter]float64{},
		Valid: c.Valid, Contaminated: c.Contaminated, Isolation: c.Isolation}
	out.Invalidity, out.InvalidReason = c.FirstInvalid()
	for k := range c.Values {
		if v, ok := c.Value(k); ok {
			out.Deltas[k] = v
		}
		if why := c.Unreadable(k); why != "" {
			out.Unreadable[k] = why
		}
		if r := c.Values[k].Resolution; r > 0 {
			out.Resolution[k] = r
		}
		if n := c.Values[k].Note; n != "" {
			if out.Notes == nil {
				out.Notes = map[metrics.Counter]string{}
			}
			out.Notes[k] = n
		}
	}
	return out
}

// routing names the replica that served the replay and the one that served its original
// request, each read from which replica's counters moved around it; empty when either is
// unknown.
func (r *runner) routing(replay *record.Request) verdict.Routing {
	if replay.ReplayOf == nil || !replay.Replica.Known() || r.cur == nil {
		return verdict.Routing{}
	}
	for _, s := range r.cur.Steps {
		if s.Step != replay.ReplayOf.Step {
			continue
		}
		for _, q := range s.Requests {
			if q.IndexInStep == replay.ReplayOf.Request && q.Replica.Known() {
				return verdict.Routing{OriginalReplica: q.Replica.Replica, ReplayReplica: replay.Replica.Replica}
			}
		}
	}
	return verdict.Routing{}
}

// slotEvidence reads what slot attribution needs before the replay is sent: its common token
// prefix with the request sent just before it, which is what the server's single slot
// holds. Token ids are read off the replay's timed path.
func (r *runner) slotEvidence(replay plan.Request) *verdict.SlotEvidence {
	e := &verdict.SlotEvidence{Slots: r.cfg.Slots, Tolerance: max(r.cfg.BlockSize, 16)}
	prev := r.previousRequest(replay.Step)
	switch {
	case prev == nil:
		e.NoCommonPrefix = "no single request was sent just before the replay (the step before it overlapped its requests), so the prompt the slot held is unknown"
	case r.cfg.TokenIDs == nil:
		e.NoCommonPrefix = "the server's token ids cannot be read"
	default:
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, errA := r.cfg.TokenIDs(ctx, replay.Prompt.Messages)
		b, errB := r.cfg.TokenIDs(ctx, prev.Prompt.Messages)
		if errA != nil || errB != nil {
			e.NoCommonPrefix = fmt.Sprintf("reading token ids failed (%v %v)", errA, errB)
			break
		}
		n := commonPrefix(a, b)
		e.CommonPrefix = &n
	}
	return e
}

// previousRequest is the request sent just before the replay step id, when one request was
// alone on the server then (the last of an isolated step, the replay's step isolated too).
func (r *runner) previousRequest(id string) *plan.Request {
	if r.cur == nil || len(r.cur.Steps) == 0 {
		return nil
	}
	prev := r.cur.Steps[len(r.cur.Steps)-1]
	if prev.Concurrency > 1 || len(prev.Requests) == 0 {
		return nil
	}
	if st := r.cfg.Scenario.StepByID(id); st == nil || st.Concurrency > 1 {
		return nil
	}
	last := prev.Requests[len(prev.Requests)-1]
	if last.ColdTwin != nil {
		last = prev.Requests[0] // a replay's twin resent the replay's prompt
	}
	for _, ps := range r.curPlan.Steps {
		if ps.ID != prev.Step {
			continue
		}
		for i := range ps.Requests {
			if ps.Requests[i].IndexInStep == last.IndexInStep {
				return &ps.Requests[i]
			}
		}
	}
	return nil
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

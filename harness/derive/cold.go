package derive

import (
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Prompts says how a repetition's prompts relate, which bounds what a cold request may find
// cached: Nested prompts extend each other (prompt.mode = "nested"); BlockSize is the
// server's KV block, the rounding of every hit.
type Prompts struct {
	Nested    bool
	BlockSize int
}

// PromptsOf is how sc's prompts relate on a server with blockSize-token KV blocks.
func PromptsOf(sc *scenarios.Scenario, blockSize int) Prompts {
	return Prompts{Nested: sc != nil && sc.Prompt.Mode == "nested", BlockSize: blockSize}
}

// WarmSteps judges the cold (sequence) steps and the trace steps of one repetition's steps, in order: the
// finding of each step whose requests came back cached beyond what the run could have
// cached, keyed by the step's index. The runner asks it before deciding a replay, Derive
// when it builds the sections: one rule, verdict.ColdCaches.
func WarmSteps(steps []Step, p Prompts) map[int]*record.WarmCaches {
	out := map[int]*record.WarmCaches{}
	var earlier []int // prompt tokens of the requests sent before the current step
	for i, st := range steps {
		tokens := make([]int, len(st.Requests))
		for j, q := range st.Requests {
			tokens[j] = promptTokens(q)
		}
		var w *record.WarmCaches
		switch st.Kind {
		case record.KindSequence:
			w = verdict.ColdCaches(coldStep(st, tokens, earlier, p))
		case record.KindTrace:
			if ts, ok := traceStep(st, p); ok {
				w = verdict.TraceCaches(ts)
			}
		}
		if w != nil {
			out[i] = w
		}
		earlier = append(earlier, tokens...)
	}
	return out
}

// traceStep is trace step st's evidence against its trace's most any cache could serve: the
// step's prefix-cache hits over its prompt tokens where its counters are valid, else its
// requests' usage; false when there is no ideal or no evidence.
func traceStep(st Step, p Prompts) (verdict.TraceStep, bool) {
	if st.Trace == nil || st.Trace.Ideal == nil {
		return verdict.TraceStep{}, false
	}
	ideal := st.Trace.Ideal
	s := verdict.TraceStep{Step: st.Step, BlockSize: max(p.BlockSize, ideal.BlockTokens), MaxHitRate: ideal.MaxHitRate}
	for _, q := range st.Requests {
		if !q.Result.Failed() {
			s.Requests++
		}
	}
	if st.Span != nil && st.Span.Valid {
		t := SplitTiers(st.Span)
		if t.PromptTokens != nil && (t.GPUHitTokens != nil || t.HostHitTokens != nil) {
			s.PromptTokens, s.By = *t.PromptTokens, verdict.ByStepHits
			for _, v := range []*float64{t.GPUHitTokens, t.HostHitTokens} {
				if v != nil {
					s.CachedTokens += *v
				}
			}
			return s, true
		}
	}
	var known bool
	for _, q := range st.Requests {
		if r := q.Result; !r.Failed() && r.PromptTokens != nil && r.CachedPromptTokens != nil {
			s.PromptTokens += float64(*r.PromptTokens)
			s.CachedTokens += float64(*r.CachedPromptTokens)
			known = true
		}
	}
	s.By = verdict.ByUsage
	return s, known
}

// coldStep is step st's evidence as a cold step; tokens are its requests' prompt sizes and
// earlier those of every request sent before it.
func coldStep(st Step, tokens, earlier []int, p Prompts) verdict.ColdStep {
	s := verdict.ColdStep{Step: st.Step, BlockSize: p.BlockSize}
	usage, hits := 0, 0
	for j, q := range st.Requests {
		if q.Result.Failed() {
			continue
		}
		c := verdict.ColdRequest{Index: q.IndexInStep, PromptTokens: tokens[j], Reusable: q.Prompt.SharedPrefixTokens}
		if p.Nested {
			// A nested prompt shares all but its question with every other prompt of the run:
			// those sent before it, and in an overlapping step all the step's others.
			others := earlier
			if st.DeltaScope == record.ScopeStep {
				others = append(append(others[:len(others):len(others)], tokens[:j]...), tokens[j+1:]...)
			} else {
				others = append(others[:len(others):len(others)], tokens[:j]...)
			}
			for _, o := range others {
				c.Reusable = max(c.Reusable, min(o, tokens[j]))
			}
		}
		switch {
		case q.Result.CachedPromptTokens != nil:
			v := float64(*q.Result.CachedPromptTokens)
			c.Cached, usage = &v, usage+1
		case q.Counters != nil && q.Counters.Valid:
			if v := prefixHits(q.Counters); v != nil {
				c.Cached, hits = v, hits+1
			}
		}
		s.Requests = append(s.Requests, c)
	}
	switch {
	case usage > 0 && hits == 0:
		s.By = verdict.ByUsage
	case hits > 0 && usage == 0:
		s.By = verdict.ByHits
	case hits > 0:
		s.By = verdict.ByUsage + ", else " + verdict.ByHits
	}
	if st.DeltaScope == record.ScopeStep && st.Span != nil && st.Span.Valid {
		s.StepHits = prefixHits(st.Span)
	}
	return s
}

// prefixHits are c's GPU and external prefix-cache hits together; nil when neither is read.
func prefixHits(c *record.Counters) *float64 {
	g, okG := c.Value(metrics.GPUPrefixHits)
	x, okX := c.Value(metrics.ExternalPrefixHits)
	if !okG && !okX {
		return nil
	}
	v := g + x
	return &v
}

// promptTokens is q's prompt size: as the server counted it, else as planned.
func promptTokens(q record.Request) int {
	if q.Result.PromptTokens != nil {
		return *q.Result.PromptTokens
	}
	return q.Prompt.Tokens
}

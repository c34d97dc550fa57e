package plan

import (
	"fmt"
	"math"

	"github.com/anvil-serving/kvbench/scenarios"
)

// CurveBounds is what a curve's expansion needs to know of the server, each with its source.
type CurveBounds struct {
	MaxModelLen       int
	MaxModelLenSource string
	GPUKVTokens       int
	GPUKVTokensSource string
	BlockSize         int
}

// statesCurveBounds reports whether sc's [server] table states what its curves need of
// the server: max_model_len and gpu_kv_tokens.
func statesCurveBounds(sc *scenarios.Scenario) bool {
	return sc.Server.MaxModelLen.Known() && sc.Server.GPUKVTokens.Known()
}

// CurveSizes are the prompt sizes of s's curve step st under b: from_tokens, each next one
// factor times the last, up to the largest prompt that fits max_model_len with max_tokens
// and the server's counting tolerance.
func CurveSizes(s *scenarios.Scenario, st *scenarios.Step, b CurveBounds) ([]int, error) {
	top := b.MaxModelLen - s.MaxTokensFor(st) - max(64, b.MaxModelLen/500)
	if !st.ToTokens.MaxModelLen {
		if st.ToTokens.Tokens > top {
			return nil, fmt.Errorf("to_tokens %d does not fit max_model_len %d (%s) with max_tokens %d: at most %d", st.ToTokens.Tokens, b.MaxModelLen, b.MaxModelLenSource, s.MaxTokensFor(st), top)
		}
		top = st.ToTokens.Tokens
	}
	if top < st.FromTokens {
		return nil, fmt.Errorf("from_tokens %d is above the largest prompt max_model_len %d (%s) allows with max_tokens %d (%d)", st.FromTokens, b.MaxModelLen, b.MaxModelLenSource, s.MaxTokensFor(st), top)
	}
	var sizes []int
	for v := float64(st.FromTokens); int(math.Round(v)) < top && len(sizes) < scenarios.MaxCurvePoints; v *= st.Factor {
		sizes = append(sizes, int(math.Round(v)))
	}
	if len(sizes) == 0 || top-sizes[len(sizes)-1] > sizes[len(sizes)-1]/10 {
		sizes = append(sizes, top) // the top, unless the last step nearly reached it
	} else {
		sizes[len(sizes)-1] = top
	}
	return sizes, nil
}

// expandCurves replaces every reload-curve step of s, a scenario being planned, by its points: for each size, a sequence
// step (the point's prompt, then prompts of unique tokens enough to push it out of the GPU
// pool) and a replay of its first request, which gets its cold twin like every replay. A
// gate naming the curve applies to each point: its replay checks to the replay step, its
// store and failure checks to the sequence step. The curves as expanded are kept in Curves.
// Make calls it on its copy of the scenario, never on the scenario it was given.
func expandCurves(s *scenarios.Scenario, b CurveBounds) error {
	if !s.HasCurves() {
		return nil
	}
	if b.MaxModelLen <= 0 {
		return fmt.Errorf("%s: a reload curve runs to the server's max_model_len, which is unknown: set server.max_model_len", s.Position("server.max_model_len"))
	}
	if b.GPUKVTokens <= 0 {
		return fmt.Errorf("%s: a reload curve evicts each prompt by sending more unique tokens than the GPU KV pool holds, which is unknown: set server.gpu_kv_tokens", s.Position("server.gpu_kv_tokens"))
	}
	ids := map[string]bool{}
	for _, st := range s.Steps {
		ids[st.ID] = true
	}
	var steps []scenarios.Step
	points := map[string][]scenarios.CurveSteps{}
	planned := 0
	for i := range s.Steps {
		st := s.Steps[i]
		if !st.IsCurve() {
			steps = append(steps, st)
			for r := range st.Requests {
				planned += st.Planned(r)
			}
			continue
		}
		where := s.Position(fmt.Sprintf("step[%d].kind", i))
		sizes, err := CurveSizes(s, &st, b)
		if err != nil {
			return fmt.Errorf("%s: step %s: %w", where, st.ID, err)
		}
		top := sizes[len(sizes)-1]
		prefix := s.Prompt.SharedPrefixTokens
		// Every block of the point's prompt must leave the GPU: in LRU order that takes
		// allocations of the whole pool, less the shared prefix the fillers keep hot, so
		// the fillers bring the pool plus a margin of unique tokens.
		evict := b.GPUKVTokens + b.GPUKVTokens/50 + 2*b.BlockSize
		room := top - prefix
		n := (evict + room - 1) / room
		each := prefix + (evict+n-1)/n
		c := scenarios.Curve{ID: st.ID, FromTokens: st.FromTokens, ToTokens: top, Factor: st.Factor,
			MaxModelLen: b.MaxModelLen, MaxModelLenSource: b.MaxModelLenSource,
			GPUKVTokens: b.GPUKVTokens, GPUKVTokensSource: b.GPUKVTokensSource,
			EvictionTokens: n * (each - prefix), EvictionRequests: n}
		names := scenarios.CurvePointNames(st.ID, sizes)
		for pi, size := range sizes {
			seq, rep := names[pi], names[pi]+"_replay"
			for _, id := range []string{seq, rep} {
				if ids[id] {
					return fmt.Errorf("%s: step %s: its point %d makes step %q, which the scenario already has", where, st.ID, size, id)
				}
				ids[id] = true
			}
			point := &scenarios.CurvePoint{Curve: st.ID, Tokens: size}
			seqStep := scenarios.Step{ID: seq, Requests: 1 + n, PlannedContextTokens: []int{size}, Concurrency: 1,
				MaxTokens: st.MaxTokens, IgnoreEOS: st.IgnoreEOS, MinTokens: st.MinTokens, ExtraBody: st.ExtraBody, CurvePoint: point}
			for range n {
				seqStep.PlannedContextTokens = append(seqStep.PlannedContextTokens, each)
			}
			repStep := scenarios.Step{ID: rep, Replay: &scenarios.ReplayRef{Step: seq, Request: 0}, Concurrency: 1,
				MaxTokens: st.MaxTokens, IgnoreEOS: st.IgnoreEOS, MinTokens: st.MinTokens, ExtraBody: st.ExtraBody, CurvePoint: point}
			steps = append(steps, seqStep, repStep)
			c.Points = append(c.Points, scenarios.CurveSteps{Tokens: size, Sequence: seq, Replay: rep})
			planned += size + n*each
		}
		points[st.ID] = c.Points
		s.Curves = append(s.Curves, c)
	}
	if planned > scenarios.MaxPlannedTokens {
		return fmt.Errorf("%s: the reload curve plans %d tokens in all (each point's prompt and the pool's worth of tokens that evicts it), above the ceiling of %d per pass: raise from_tokens or factor, or lower to_tokens",
			s.Position("step"), planned, scenarios.MaxPlannedTokens)
	}
	s.Steps = steps
	s.Gates = expandCurveGates(s.Gates, points)
	ordinal := 0
	for i := range s.Steps {
		st := &s.Steps[i]
		if st.Replay != nil || st.IsConversation() {
			continue
		}
		st.FirstOrdinal = ordinal
		ordinal += st.Requests
	}
	return nil
}

// expandCurveGates applies each gate naming a curve to the curve's points.
func expandCurveGates(gates []scenarios.Gate, points map[string][]scenarios.CurveSteps) []scenarios.Gate {
	var out []scenarios.Gate
	for _, g := range gates {
		ps, ok := points[g.Step]
		if !ok {
			out = append(out, g)
			continue
		}
		replayChecks := g.Verdict != "" || g.MinCachedFraction > 0 || g.MaxTimeToFirstOutputMS > 0 || g.MinDecodeTokensPerSec > 0 ||
			g.RequireValidSetup || g.RequireIdenticalOutput || g.MaxFailedRequests != nil
		for _, p := range ps {
			if replayChecks {
				rg := g
				rg.Step, rg.RequireStore = p.Replay, false
				out = append(out, rg)
			}
			if g.RequireStore || g.MaxFailedRequests != nil {
				out = append(out, scenarios.Gate{Step: p.Sequence, RequireStore: g.RequireStore, MaxFailedRequests: g.MaxFailedRequests})
			}
		}
	}
	return out
}

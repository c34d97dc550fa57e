package scenarios

import (
	"encoding/json"
	"fmt"
	"math"
	"strconv"

	"github.com/anvil-serving/kvbench/harness/record"
)

// KindReloadCurve is the step kind of a reload curve: for prompt sizes from from_tokens up
// to to_tokens in log steps, store a prompt, evict it from GPU memory, replay it (a reload)
// and recompute it (the replay's cold twin), so the record holds reload time against
// recompute time by size. Its sizes and the eviction it needs depend on the server (its
// max_model_len and GPU KV pool), so the step is expanded into ordinary steps once those are
// known: at preflight, or at plan time when the scenario states both (ExpandCurves).
const KindReloadCurve = "reload-curve"

// Defaults of a reload-curve step.
const (
	DefaultCurveFromTokens = 1024
	DefaultCurveFactor     = 2.0
	// MaxCurvePoints bounds a curve's sizes.
	MaxCurvePoints = 64
)

// CurveStep holds the fields of a [[step]] with kind = "reload-curve"; they sit directly in
// the [[step]] table.
type CurveStep struct {
	// FromTokens is the smallest prompt (default 1024).
	FromTokens int `toml:"from_tokens" json:"from_tokens,omitempty"`
	// ToTokens is the largest prompt: a number, or "max_model_len" (the default) for the
	// server's, less max_tokens and a counting margin.
	ToTokens CurveTop `toml:"to_tokens" json:"to_tokens,omitzero"`
	// Factor is the ratio of one size to the one before it (default 2).
	Factor float64 `toml:"factor" json:"factor,omitempty"`
}

// CurveTop is a curve's largest size: a number of tokens, or the server's max_model_len.
type CurveTop struct {
	Tokens      int
	MaxModelLen bool
}

// UnmarshalTOML implements toml.Unmarshaler.
func (c *CurveTop) UnmarshalTOML(v any) error {
	switch v := v.(type) {
	case int64:
		*c = CurveTop{Tokens: int(v)}
	case string:
		if v != "max_model_len" {
			return fmt.Errorf("want a number of tokens or \"max_model_len\", got %q", v)
		}
		*c = CurveTop{MaxModelLen: true}
	default:
		return fmt.Errorf("want a number of tokens or \"max_model_len\", got %T", v)
	}
	return nil
}

func (c CurveTop) MarshalJSON() ([]byte, error) {
	if c.MaxModelLen {
		return []byte(`"max_model_len"`), nil
	}
	return []byte(strconv.Itoa(c.Tokens)), nil
}

func (c *CurveTop) UnmarshalJSON(b []byte) error {
	if string(b) == `"max_model_len"` {
		*c = CurveTop{MaxModelLen: true}
		return nil
	}
	return json.Unmarshal(b, &c.Tokens)
}

// IsZero reports an unset top (omitzero).
func (c CurveTop) IsZero() bool { return c == CurveTop{} }

// IsCurve reports whether st is a reload-curve step not yet expanded.
func (st *Step) IsCurve() bool { return st.Kind == KindReloadCurve }

// CurvePoint marks a step made by expanding a reload curve: the curve's id and the size of
// the point's prompt.
type CurvePoint struct {
	Curve  string `json:"curve"`
	Tokens int    `json:"tokens"`
}

// Curve is the record's type (see there).
type Curve = record.Curve

// CurveSteps is the record's type (see there).
type CurveSteps = record.CurveSteps

// curveDefaults fills a reload-curve step's unset fields.
func (s *Scenario) curveDefaults(st *Step) {
	if st.FromTokens == 0 {
		st.FromTokens = DefaultCurveFromTokens
	}
	if st.ToTokens.IsZero() {
		st.ToTokens.MaxModelLen = true
	}
	if st.Factor == 0 {
		st.Factor = DefaultCurveFactor
	}
	if st.Concurrency == 0 {
		st.Concurrency = 1
	}
}

// HasCurves reports whether s has reload-curve steps not yet expanded.
func (s *Scenario) HasCurves() bool {
	for i := range s.Steps {
		if s.Steps[i].IsCurve() {
			return true
		}
	}
	return false
}

// CurveBounds is what a curve's expansion needs to know of the server, each with its source.
type CurveBounds struct {
	MaxModelLen       int
	MaxModelLenSource string
	GPUKVTokens       int
	GPUKVTokensSource string
	BlockSize         int
}

// ScenarioCurveBounds is what the scenario's [server] table states for curves: ok is false
// when it leaves max_model_len or gpu_kv_tokens to the server.
func (s *Scenario) ScenarioCurveBounds() (CurveBounds, bool) {
	b := CurveBounds{MaxModelLen: s.Server.MaxModelLen.Value, MaxModelLenSource: "scenario",
		GPUKVTokens: s.Server.GPUKVTokens.Value, GPUKVTokensSource: "scenario", BlockSize: max(s.Server.BlockSize.Value, 1)}
	return b, s.Server.MaxModelLen.Known() && s.Server.GPUKVTokens.Known()
}

// CurveSizes are the prompt sizes of curve step st under b: from_tokens, each next one
// factor times the last, up to the largest prompt that fits max_model_len with max_tokens
// and the server's counting tolerance.
func (s *Scenario) CurveSizes(st *Step, b CurveBounds) ([]int, error) {
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
	for v := float64(st.FromTokens); int(math.Round(v)) < top && len(sizes) < MaxCurvePoints; v *= st.Factor {
		sizes = append(sizes, int(math.Round(v)))
	}
	if len(sizes) == 0 || top-sizes[len(sizes)-1] > sizes[len(sizes)-1]/10 {
		sizes = append(sizes, top) // the top, unless the last step nearly reached it
	} else {
		sizes[len(sizes)-1] = top
	}
	return sizes, nil
}

// ExpandCurves replaces every reload-curve step by its points: for each size, a sequence
// step (the point's prompt, then prompts of unique tokens enough to push it out of the GPU
// pool) and a replay of its first request, which gets its cold twin like every replay. A
// gate naming the curve applies to each point: its replay checks to the replay step, its
// store and failure checks to the sequence step. The curves as expanded are kept in Curves.
func (s *Scenario) ExpandCurves(b CurveBounds) error {
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
	var steps []Step
	points := map[string][]CurveSteps{}
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
		sizes, err := s.CurveSizes(&st, b)
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
		c := Curve{ID: st.ID, FromTokens: st.FromTokens, ToTokens: top, Factor: st.Factor,
			MaxModelLen: b.MaxModelLen, MaxModelLenSource: b.MaxModelLenSource,
			GPUKVTokens: b.GPUKVTokens, GPUKVTokensSource: b.GPUKVTokensSource,
			EvictionTokens: n * (each - prefix), EvictionRequests: n}
		for _, size := range sizes {
			seq, rep := fmt.Sprintf("%s_%d", st.ID, size), fmt.Sprintf("%s_%d_replay", st.ID, size)
			for _, id := range []string{seq, rep} {
				if ids[id] {
					return fmt.Errorf("%s: step %s: its point %d makes step %q, which the scenario already has", where, st.ID, size, id)
				}
				ids[id] = true
			}
			point := &CurvePoint{Curve: st.ID, Tokens: size}
			seqStep := Step{ID: seq, Requests: 1 + n, PlannedContextTokens: []int{size}, Concurrency: 1,
				MaxTokens: st.MaxTokens, IgnoreEOS: st.IgnoreEOS, MinTokens: st.MinTokens, ExtraBody: st.ExtraBody, CurvePoint: point}
			for range n {
				seqStep.PlannedContextTokens = append(seqStep.PlannedContextTokens, each)
			}
			repStep := Step{ID: rep, Replay: &ReplayRef{Step: seq, Request: 0}, Concurrency: 1,
				MaxTokens: st.MaxTokens, IgnoreEOS: st.IgnoreEOS, MinTokens: st.MinTokens, ExtraBody: st.ExtraBody, CurvePoint: point}
			steps = append(steps, seqStep, repStep)
			c.Points = append(c.Points, CurveSteps{Tokens: size, Sequence: seq, Replay: rep})
			planned += size + n*each
		}
		points[st.ID] = c.Points
		s.Curves = append(s.Curves, c)
	}
	if planned > MaxPlannedTokens {
		return fmt.Errorf("%s: the reload curve plans %d tokens in all (each point's prompt and the pool's worth of tokens that evicts it), above the ceiling of %d per pass: raise from_tokens or factor, or lower to_tokens",
			s.Position("step"), planned, MaxPlannedTokens)
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
func expandCurveGates(gates []Gate, points map[string][]CurveSteps) []Gate {
	var out []Gate
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
				out = append(out, Gate{Step: p.Sequence, RequireStore: g.RequireStore, MaxFailedRequests: g.MaxFailedRequests})
			}
		}
	}
	return out
}

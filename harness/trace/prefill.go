package trace

import (
	"fmt"
	"slices"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
)

// PrefillOutsideRule says how a request whose prompt lies outside a curve's measured sizes is
// priced.
const PrefillOutsideRule = "clamped: a prompt shorter than the smallest measured size, or longer than the largest, is priced per token as that end point is (no extrapolation); clamped_requests counts them"

// PrefillGPUHitRule says how a GPU hit is priced: a reload curve times no GPU hit.
const PrefillGPUHitRule = "a reload curve times no GPU hit: a GPU hit is taken to cost nothing, so the GPU share's saving is its whole recompute time, an upper bound"

// PrefillCurve prices prefill by prompt size, from a reload curve's points: per size, the
// time to first output of recomputing the prompt (the cold twin) and of reloading it from
// the host tier (the replay). Between two measured sizes each time is linear in the size.
type PrefillCurve struct {
	Run string `json:"run"` // the run directory it was read from
	// Model and Engine are the curve run's, to tell whether it measured the server sized.
	Model  string         `json:"model,omitempty"`
	Engine string         `json:"engine,omitempty"`
	ID     string         `json:"curve"`
	Points []PrefillPoint `json:"points"` // by prompt size, at least two
}

// PrefillPoint is one measured size of a PrefillCurve.
type PrefillPoint struct {
	PromptTokens int     `json:"prompt_tokens"`
	RecomputeMS  float64 `json:"recompute_ms"`
	ReloadMS     float64 `json:"reload_ms"`
}

// NewPrefillCurve takes a reload curve's counted points (a reload timed against its cold
// twin: record.CurvePoint.Counted), each at its measured prompt size; it needs two sizes.
func NewPrefillCurve(run string, c record.ReloadCurve) (*PrefillCurve, error) {
	pc := &PrefillCurve{Run: run, ID: c.ID}
	for _, p := range c.Points {
		if !p.Counted || p.ReplayTTFTMS == nil || p.TwinTTFTMS == nil {
			continue
		}
		size := p.Tokens
		if p.PromptTokens != nil {
			size = *p.PromptTokens
		}
		if size > 0 {
			pc.Points = append(pc.Points, PrefillPoint{PromptTokens: size, RecomputeMS: *p.TwinTTFTMS, ReloadMS: *p.ReplayTTFTMS})
		}
	}
	slices.SortStableFunc(pc.Points, func(a, b PrefillPoint) int { return a.PromptTokens - b.PromptTokens })
	pc.Points = slices.CompactFunc(pc.Points, func(a, b PrefillPoint) bool { return a.PromptTokens == b.PromptTokens })
	if len(pc.Points) < 2 {
		return nil, fmt.Errorf("reload curve %q has %d usable point(s) (a reload timed against its cold twin) of %d: pricing by prompt size needs at least 2", c.ID, len(pc.Points), len(c.Points))
	}
	return pc, nil
}

// rates are the milliseconds per token that a host-tier hit (recompute less reload) and a
// GPU hit (recompute) save in a prompt of tokens, and whether tokens was outside the measured
// sizes (PrefillOutsideRule).
func (c *PrefillCurve) rates(tokens int) (host, gpu float64, clamped bool) {
	ps := c.Points
	i, _ := slices.BinarySearchFunc(ps, tokens, func(p PrefillPoint, t int) int { return p.PromptTokens - t })
	var recompute, reload, x float64
	switch {
	case i == 0 || i == len(ps):
		p := ps[min(i, len(ps)-1)]
		recompute, reload, x = p.RecomputeMS, p.ReloadMS, float64(p.PromptTokens)
		clamped = tokens != p.PromptTokens
	default:
		a, b := ps[i-1], ps[i]
		f := float64(tokens-a.PromptTokens) / float64(b.PromptTokens-a.PromptTokens)
		recompute, reload, x = a.RecomputeMS+f*(b.RecomputeMS-a.RecomputeMS), a.ReloadMS+f*(b.ReloadMS-a.ReloadMS), float64(tokens)
	}
	return (recompute - reload) / x, recompute / x, clamped
}

// PrefillSaving is what a trace's GPU hits save under a PrefillCurve, and how the sizes of
// SizeReport were priced.
type PrefillSaving struct {
	Curve PrefillCurve `json:"curve"`
	// TraceSeconds is the evaluated requests' span, first arrival to last; per-hour figures
	// are null when it is 0 (a window of one instant).
	TraceSeconds float64  `json:"trace_seconds"`
	GPUHourCost  *float64 `json:"gpu_hour_cost"` // null without --gpu-hour-cost
	OutsideRule  string   `json:"outside_curve"`
	GPUHitRule   string   `json:"gpu_hit"`
	// ClampedRequests are the requests whose prompt lay outside the measured sizes.
	ClampedRequests int `json:"clamped_requests"`
	// GPUPrefillSecondsSaved is the GPU hits' recompute time over the window (GPUHitRule);
	// the same at every host-tier size.
	GPUPrefillSecondsSaved        float64  `json:"gpu_prefill_seconds_saved"`
	GPUPrefillSecondsSavedPerHour *float64 `json:"gpu_prefill_seconds_saved_per_hour"`
	GPUCostSavedPerHour           *float64 `json:"gpu_cost_saved_per_hour"`
}

// TierSaving is what one host-tier size's hits save under the curve: each request's host
// tokens priced at its prompt size.
type TierSaving struct {
	PrefillSecondsSaved        float64  `json:"prefill_seconds_saved"`
	PrefillSecondsSavedPerHour *float64 `json:"prefill_seconds_saved_per_hour"`
	CostSavedPerHour           *float64 `json:"cost_saved_per_hour"`
	// ClampedRequests are the requests served from this host tier whose prompt lay outside
	// the measured sizes.
	ClampedRequests int `json:"clamped_requests"`
}

// prefillPass accumulates a PrefillCurve's pricing over the requests of a Size pass.
type prefillPass struct {
	curve       *PrefillCurve
	cost        *float64
	hostMS      []float64 // per host tier of the pass
	clamped     []int
	gpuMS       float64
	clampedAll  int
	first, last time.Duration
	blockMS     float64 // the current request's host-hit saving per block
	outside     bool    // the current request lies outside the curve
}

func newPrefillPass(c *PrefillCurve, cost *float64, tiers int) *prefillPass {
	if c == nil {
		return nil
	}
	return &prefillPass{curve: c, cost: cost, hostMS: make([]float64, tiers), clamped: make([]int, tiers), first: -1}
}

// request prices the request's GPU hits and readies the rate of its host hits.
func (p *prefillPass) request(req *Request, gpuTokens int64, bt int) {
	if p.first < 0 || req.Timestamp < p.first {
		p.first = req.Timestamp
	}
	p.last = max(p.last, req.Timestamp)
	host, gpu, outside := p.curve.rates(req.InputLength)
	p.gpuMS += float64(gpuTokens) * gpu
	p.blockMS, p.outside = host*float64(bt), outside
	if outside {
		p.clampedAll++
	}
}

// hits prices the current request's blocks served by host tier i.
func (p *prefillPass) hits(i, blocks int) {
	if blocks == 0 {
		return
	}
	p.hostMS[i] += float64(blocks) * p.blockMS
	if p.outside {
		p.clamped[i]++
	}
}

// perHour turns seconds over the window into seconds and cost per hour of trace time.
func (p *prefillPass) perHour(seconds float64) (perHour, cost *float64) {
	span := (p.last - p.first).Seconds()
	if span <= 0 {
		return nil, nil
	}
	h := seconds * 3600 / span
	if p.cost != nil {
		c := h / 3600 * *p.cost
		cost = &c
	}
	return &h, cost
}

func (p *prefillPass) saving() *PrefillSaving {
	s := &PrefillSaving{Curve: *p.curve, TraceSeconds: (p.last - p.first).Seconds(), GPUHourCost: p.cost, OutsideRule: PrefillOutsideRule,
		GPUHitRule: PrefillGPUHitRule, ClampedRequests: p.clampedAll}
	s.GPUPrefillSecondsSaved = p.gpuMS / 1000
	s.GPUPrefillSecondsSavedPerHour, s.GPUCostSavedPerHour = p.perHour(s.GPUPrefillSecondsSaved)
	return s
}

func (p *prefillPass) tier(i int) *TierSaving {
	t := &TierSaving{PrefillSecondsSaved: p.hostMS[i] / 1000, ClampedRequests: p.clamped[i]}
	t.PrefillSecondsSavedPerHour, t.CostSavedPerHour = p.perHour(t.PrefillSecondsSaved)
	return t
}

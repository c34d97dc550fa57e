package trace

import (
	"context"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// SizeSchema is the schema of kvbench trace size --format json.
const SizeSchema = "anvil-serving.kvbench-trace-size/v1"

// KneeRule says how SizeReport.Knee is chosen.
const KneeRule = "the smallest host tier > 0 from which on, at every listed size, doubling the tier adds less than one point of host share"

// SizeConfig says what Size evaluates: one GPU tier and many host-tier sizes under one
// policy.
type SizeConfig struct {
	BlockTokens int    // DefaultBlockTokens when 0; SizeFile: the format's
	Format      Format // SizeFile: the trace file's format
	GPUTokens   int64
	HostTokens  []int64 // the host-tier sizes, in tokens
	// BytesPerToken, when > 0, gives each size in bytes too.
	BytesPerToken   int64
	PoolHoldsOutput bool // as Tiers.PoolHoldsOutput
	Policy          Policy
	// Curve, when set, prices each size's host hits and the GPU hits (PrefillSaving);
	// GPUHourCost, when set, turns its seconds into cost.
	Curve       *PrefillCurve
	GPUHourCost *float64
	// walkAll makes SGLang's writes walk the host tier when every block is on the GPU (a
	// test holds sglangHost.onGPU to it).
	walkAll bool
}

// SizeReport is what each host-tier size would have served of a trace under a policy.
type SizeReport struct {
	File            string  `json:"file,omitempty"`
	Window          *Window `json:"window,omitempty"`
	DroppedRequests int     `json:"dropped_requests"`
	Format          *Info   `json:"trace_format,omitempty"`
	BlockTokens     int     `json:"block_tokens"`
	Requests        int     `json:"requests"`
	PromptTokens    int64   `json:"prompt_tokens"`

	GPUTokens       int64  `json:"gpu_tokens"`
	BytesPerToken   *int64 `json:"bytes_per_token"` // null when not given
	PoolHoldsOutput bool   `json:"pool_holds_output"`
	Policy          string `json:"policy"`
	// Sizes are the host tiers in the order asked.
	Sizes []TierSize `json:"sizes"`
	// Knee is the size KneeRule picks, null when none of the listed sizes qualifies.
	Knee *Knee `json:"knee"`
	// Prefill is the curve's pricing, with Curve only.
	Prefill *PrefillSaving `json:"prefill,omitempty"`
	// HTML is the page written of the report (--html), when one was.
	HTML string `json:"html,omitempty"`
	// From is where --from found each figure; Calibration is --calibrate's fit.
	From        *SizeFrom    `json:"from,omitempty"`
	Calibration *Calibration `json:"calibration,omitempty"`
}

// TierSize is one host-tier size's shares (GPU + host + recompute = prompt tokens).
type TierSize struct {
	HostTokens int64  `json:"host_tokens"`
	HostBytes  *int64 `json:"host_bytes"` // null without bytes_per_token
	HostBlocks int64  `json:"host_blocks"`
	record.IdealShares
	// Deployed marks the run's own size (--from), MeasuredHostShare what the run measured
	// there, and PredictedHostShare the calibrated policy's host share (--calibrate; the
	// shares above are the unfitted policy's).
	Deployed           bool     `json:"deployed,omitempty"`
	MeasuredHostShare  *float64 `json:"measured_host_share,omitempty"`
	PredictedHostShare *float64 `json:"predicted_host_share,omitempty"`
	// TierSaving is the prefill time the size's host hits save, with a curve only.
	*TierSaving
}

// Knee is the size past which a larger host tier buys little (KneeRule).
type Knee struct {
	HostTokens int64   `json:"host_tokens"`
	HostBytes  *int64  `json:"host_bytes"`
	HostShare  float64 `json:"host_share"`
	// DoubledHostShare is the host share of a tier twice its size.
	DoubledHostShare float64 `json:"doubled_host_share"`
	Rule             string  `json:"rule"`
}

// gpuTier is the GPU prefix cache shared by every host tier of one pass: what it holds does
// not depend on the host tier (every whole block of a request enters it, loaded or not).
type gpuTier struct {
	lru     *lruSet
	scratch keyTable // live blocks that hold no prompt block
	n       uint64
	gpuMoves
	before []bool              // whether each of the request's blocks was on the GPU
	mine   map[uint64]struct{} // the request's blocks, when some were evicted
}

// gpuMoves is what one request changed in the GPU tier.
type gpuMoves struct {
	evicted []uint64 // prompt blocks evicted, least recent first
	changed []gpuChange
}

// gpuChange is a prompt block that entered (+1) or left (-1) the GPU tier.
type gpuChange struct {
	key   uint64
	delta int
}

// update enters the request's blocks, extra blocks that hold no prompt block first, and
// records what moved.
func (g *gpuTier) update(keys []uint64, extra int) {
	g.evicted, g.changed, g.before = g.evicted[:0], g.changed[:0], g.before[:0]
	for _, k := range keys {
		g.before = append(g.before, g.lru.contains(k))
	}
	for range extra {
		g.n++
		k := scratchKey(g.n)
		g.scratch.set(k, 0)
		g.lru.add(k)
	}
	for i := len(keys) - 1; i >= 0; i-- {
		g.lru.add(keys[i])
	}
	for i, k := range keys {
		switch now := g.lru.contains(k); {
		case now && !g.before[i]:
			g.changed = append(g.changed, gpuChange{k, 1})
		case !now && g.before[i]:
			g.changed = append(g.changed, gpuChange{k, -1})
		}
	}
	if len(g.evicted) == 0 {
		return
	}
	clear(g.mine)
	for _, k := range keys {
		g.mine[k] = struct{}{}
	}
	for _, k := range g.evicted {
		if _, ok := g.mine[k]; !ok { // on the GPU before, and not entered again
			g.changed = append(g.changed, gpuChange{k, -1})
		}
	}
}

func newGPUTier(blocks int64) *gpuTier {
	g := &gpuTier{lru: newLRUSet(int(blocks)), scratch: newKeyTable(), mine: map[uint64]struct{}{}}
	g.lru.onEvict = func(k uint64) {
		if _, ok := g.scratch.find(k); ok {
			g.scratch.remove(k)
			return
		}
		g.evicted = append(g.evicted, k)
	}
	return g
}

// Size reads src to its end once and evaluates every host-tier size of cfg. The GPU tier
// and the trace are shared; each size keeps its own host tier, since no modelled policy has
// LRU's inclusion property across sizes (docs/traces.md, "trace size").
func Size(src Source, cfg SizeConfig) (*SizeReport, error) {
	bt := cfg.BlockTokens
	if bt <= 0 {
		bt = DefaultBlockTokens
	}
	if cfg.GPUTokens < 0 || cfg.BytesPerToken < 0 {
		return nil, fmt.Errorf("gpu tokens %d and bytes per token %d must not be negative", cfg.GPUTokens, cfg.BytesPerToken)
	}
	if len(cfg.HostTokens) == 0 {
		return nil, errors.New("no host-tier size to evaluate")
	}
	if cfg.Policy.Name == "" {
		cfg.Policy, _ = ParsePolicy(PolicyVLLM)
	}
	r := &SizeReport{BlockTokens: bt, GPUTokens: cfg.GPUTokens, PoolHoldsOutput: cfg.PoolHoldsOutput, Policy: cfg.Policy.String()}
	if cfg.BytesPerToken > 0 {
		r.BytesPerToken = &cfg.BytesPerToken
	}
	for _, h := range cfg.HostTokens {
		if h < 0 {
			return nil, fmt.Errorf("host tier %d tokens is negative", h)
		}
	}
	if cfg.Policy.Name == PolicyLlamaCpp {
		if cfg.Curve != nil {
			return nil, errors.New("--curve prices the GPU hits once for every size, but under policy llamacpp the live slot's share changes with the host size: pricing it is not modelled")
		}
		return sizeLlamaCpp(src, cfg, r)
	}
	// The listed sizes and their doubles (for the knee), in blocks, each modelled once.
	var blocks []int64
	for _, h := range cfg.HostTokens {
		blocks = append(blocks, h/int64(bt), 2*(h/int64(bt)))
	}
	blocks = slices.Compact(slices.Sorted(slices.Values(blocks)))
	hosts := make([]hostTier, len(blocks))
	hostHits := make([]int64, len(blocks))
	prefill := newPrefillPass(cfg.Curve, cfg.GPUHourCost, len(blocks))
	counter := newLookupCounter(cfg.Policy)
	for i, b := range blocks {
		hosts[i] = newHostTier(cfg.Policy, b, counter)
		if sg, ok := hosts[i].(*sglangHost); ok {
			sg.walkAll = cfg.walkAll
		}
	}
	gpu := newGPUTier(cfg.GPUTokens / int64(bt))
	var req Request
	var keys []uint64
	var gpuHits int64
	for {
		err := src.Next(&req)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		r.Requests++
		r.PromptTokens += int64(req.InputLength)
		keys = blockKeys(keys[:0], &req, bt, uint64(r.Requests))
		hittable := (req.InputLength - 1) / bt
		g := 0
		for g < hittable && gpu.lru.contains(keys[g]) {
			g++
		}
		gpuHits += int64(g)
		if counter != nil {
			counter.lookup(keys, g)
		}
		if prefill != nil {
			prefill.request(&req, int64(g*bt), bt)
		}
		for i, h := range hosts {
			n := h.lookup(keys, hittable, g)
			hostHits[i] += int64(n)
			if prefill != nil {
				prefill.hits(i, n)
			}
		}
		extra := 0
		if cfg.PoolHoldsOutput {
			extra = (req.InputLength+max(req.OutputLength, 1)+bt-1)/bt - len(keys)
		}
		gpu.update(keys, extra)
		// SGLang inserts a request that outlives its prefill twice: after it
		// (cache_unfinished_req) and at its finish (cache_finished_req).
		inserts := int32(1)
		if req.OutputLength > 1 {
			inserts = 2
		}
		for _, h := range hosts {
			h.settle(keys, inserts, &gpu.gpuMoves, gpu.lru)
		}
	}
	if r.Requests == 0 {
		return nil, ErrEmpty
	}
	share := func(tokens int64) float64 { return float64(tokens) / float64(r.PromptTokens) }
	byBlocks := map[int64]record.IdealShares{}
	saved := map[int64]*TierSaving{}
	for i, b := range blocks {
		if prefill != nil {
			saved[b] = prefill.tier(i)
		}
		s := record.IdealShares{GPUHitTokens: gpuHits * int64(bt), HostHitTokens: hostHits[i] * int64(bt), StoredTokens: hosts[i].storedBlocks() * int64(bt)}
		s.RecomputeTokens = r.PromptTokens - s.GPUHitTokens - s.HostHitTokens
		s.GPUShare, s.HostShare, s.RecomputeShare = share(s.GPUHitTokens), share(s.HostHitTokens), share(s.RecomputeTokens)
		byBlocks[b] = s
	}
	for _, h := range cfg.HostTokens {
		r.Sizes = append(r.Sizes, TierSize{HostTokens: h, HostBytes: r.bytes(h), HostBlocks: h / int64(bt), IdealShares: byBlocks[h/int64(bt)], TierSaving: saved[h/int64(bt)]})
	}
	if prefill != nil {
		r.Prefill = prefill.saving()
	}
	r.Knee = r.knee(func(t TierSize) float64 { return byBlocks[2*t.HostBlocks].HostShare })
	return r, nil
}

func (r *SizeReport) bytes(tokens int64) *int64 {
	if r.BytesPerToken == nil {
		return nil
	}
	b := tokens * *r.BytesPerToken
	return &b
}

// knee applies KneeRule; doubled gives a size's host share at twice its blocks.
func (r *SizeReport) knee(doubled func(TierSize) float64) *Knee {
	sorted := slices.SortedFunc(slices.Values(r.Sizes), func(a, b TierSize) int { return int(a.HostBlocks - b.HostBlocks) })
	var knee *Knee
	for i := len(sorted) - 1; i >= 0; i-- {
		s := sorted[i]
		if s.HostBlocks == 0 || doubled(s)-s.HostShare >= 0.01 {
			break
		}
		knee = &Knee{HostTokens: s.HostTokens, HostBytes: s.HostBytes, HostShare: s.HostShare, DoubledHostShare: doubled(s), Rule: KneeRule}
	}
	return knee
}

// SizeFile evaluates the window w of the trace file at path; once ctx is done it stops with
// an error wrapping ctx's cause.
func SizeFile(ctx context.Context, path string, w Window, cfg SizeConfig) (*SizeReport, error) {
	if err := w.Validate(); err != nil {
		return nil, err
	}
	f, err := OpenFormat(ctx, path, cfg.Format, cfg.BlockTokens)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	cfg.BlockTokens = f.BlockTokens()
	sel := Select(f, w)
	r, err := Size(sel, cfg)
	if ctx.Err() != nil {
		return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx))
	}
	if err != nil {
		if errors.Is(err, ErrEmptyWindow) {
			return nil, fmt.Errorf("%s: %w", path, err)
		}
		return nil, err
	}
	r.File = path
	if !w.IsWhole() {
		r.Window = &w
	}
	info := f.Info() // known once read
	if !info.PrefixInformation {
		return nil, fmt.Errorf("%s: the trace names no blocks (format %s), so what any host tier would serve is unknown", path, info.Format)
	}
	r.DroppedRequests = sel.Dropped()
	r.Format = &info
	return r, nil
}

// WriteText writes the report as the table `kvbench trace size` prints.
func (r *SizeReport) WriteText(w io.Writer) error {
	var b strings.Builder
	if r.File != "" {
		fmt.Fprintf(&b, "trace %s\n", r.File)
	}
	window := "whole trace"
	if r.Window != nil {
		window = r.Window.String()
	}
	fmt.Fprintf(&b, "  %s requests (%s), %s dropped over max_input_tokens, %s prompt tokens, blocks of %d tokens\n",
		thousands(int64(r.Requests)), window, thousands(int64(r.DroppedRequests)), thousands(r.PromptTokens), r.BlockTokens)
	if r.From != nil {
		r.From.writeText(&b)
	}
	if r.Calibration != nil {
		r.Calibration.writeText(&b)
	}
	if c := PolicyCaveat(r.Policy); c != "" {
		fmt.Fprintf(&b, "\nhost-tier sizes: policy %s, slots of %s tokens (token prefixes; the GPU share is the live slot's; see docs/traces.md)\n", r.Policy, thousands(r.GPUTokens))
		fmt.Fprintf(&b, "  note: %s\n", c)
	} else {
		fmt.Fprintf(&b, "\nhost-tier sizes: GPU %s tokens, policy %s (ideal: whole blocks, prefix hits; see docs/traces.md)\n", thousands(r.GPUTokens), r.Policy)
	}
	if r.PoolHoldsOutput {
		b.WriteString("  the GPU pool also holds each request's partial block and output while it runs\n")
	}
	head := []string{"host tokens"}
	if r.BytesPerToken != nil {
		head = append(head, "host bytes")
	}
	var byteValues []float64
	for _, s := range r.Sizes {
		if s.HostBytes != nil {
			byteValues = append(byteValues, float64(*s.HostBytes))
		}
	}
	bytes := units.Scale(units.ByteSize, byteValues...) // one prefix for the column
	head = append(head, "GPU share", "host share", "recompute", "stored tokens")
	cols := r.extraColumns()
	for _, c := range cols {
		head = append(head, c.head)
	}
	rows := [][]string{head}
	for _, s := range r.Sizes {
		row := []string{thousands(s.HostTokens)}
		if s.Deployed {
			row[0] += " (deployed)"
		}
		if s.HostBytes != nil {
			row = append(row, bytes.Format(float64(*s.HostBytes)))
		}
		row = append(row, percent(s.GPUShare), percent(s.HostShare), percent(s.RecomputeShare), thousands(s.StoredTokens))
		for _, c := range cols {
			row = append(row, c.cell(s))
		}
		rows = append(rows, row)
	}
	writeTable(&b, rows)
	if k := r.Knee; k != nil {
		fmt.Fprintf(&b, "  knee: %s host tokens (host share %s; twice the size: %s)\n", thousands(k.HostTokens), percent(k.HostShare), percent(k.DoubledHostShare))
	} else {
		b.WriteString("  knee: none among these sizes (doubling the largest still adds a point of host share or more)\n")
	}
	r.writePrefill(&b)
	_, err := io.WriteString(w, b.String())
	return err
}

// sizeColumn is a column of the size table that only some reports have.
type sizeColumn struct {
	head string
	cell func(TierSize) string
}

// extraColumns are the calibration's and the curve's columns, where the report has them.
func (r *SizeReport) extraColumns() []sizeColumn {
	var predicted, measured bool
	for _, s := range r.Sizes {
		predicted, measured = predicted || s.PredictedHostShare != nil, measured || s.MeasuredHostShare != nil
	}
	share := func(p *float64) string {
		if p == nil {
			return units.NotApplicable
		}
		return percent(*p)
	}
	var cols []sizeColumn
	if predicted {
		cols = append(cols, sizeColumn{"predicted host", func(s TierSize) string { return share(s.PredictedHostShare) }})
	}
	if measured {
		cols = append(cols, sizeColumn{"measured host", func(s TierSize) string { return share(s.MeasuredHostShare) }})
	}
	if r.Prefill == nil {
		return cols
	}
	perHour := func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return units.Sec(*p)
	}
	cols = append(cols, sizeColumn{"prefill s saved/h", func(s TierSize) string { return perHour(s.PrefillSecondsSavedPerHour) }})
	if r.Prefill.GPUHourCost != nil {
		cols = append(cols, sizeColumn{"cost saved/h", func(s TierSize) string {
			if s.CostSavedPerHour == nil {
				return "n/a"
			}
			return strconv.FormatFloat(*s.CostSavedPerHour, 'f', 4, 64)
		}})
	}
	return cols
}

// writePrefill says how the curve priced the sizes, and what the GPU hits save.
func (r *SizeReport) writePrefill(b *strings.Builder) {
	p := r.Prefill
	if p == nil {
		return
	}
	pts := p.Curve.Points
	fmt.Fprintf(b, "  prefill saved: host-tier tokens priced at each request's prompt size by reload curve %q of %s (%d points, %s to %s tokens; recompute less reload time, linear between points)\n",
		p.Curve.ID, p.Curve.Run, len(pts), thousands(int64(pts[0].PromptTokens)), thousands(int64(pts[len(pts)-1].PromptTokens)))
	fmt.Fprintf(b, "  %s of %s requests lay outside the measured sizes: priced as the nearest end point, per token (clamped, not extrapolated)\n",
		thousands(int64(p.ClampedRequests)), thousands(int64(r.Requests)))
	if p.GPUPrefillSecondsSavedPerHour == nil {
		fmt.Fprintf(b, "  per hour: n/a, the requests span no trace time (one instant); over the window the GPU hits save %s s\n", units.Sec(p.GPUPrefillSecondsSaved))
	} else {
		fmt.Fprintf(b, "  per hour of trace time (%s s of it): the GPU hits save %s s of prefill at every size (an upper bound: the curve times no GPU hit)\n",
			units.Sec(p.TraceSeconds), units.Sec(*p.GPUPrefillSecondsSavedPerHour))
	}
	b.WriteString("  the estimate ignores queueing, batching, concurrency and reloads that overlap other work (docs/traces.md)\n")
}

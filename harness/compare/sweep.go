package compare

import (
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// SweepResult compares two capacity sweeps level by level.
type SweepResult struct {
	Schema            string  `json:"schema"`
	Baseline          string  `json:"baseline"`
	Candidate         string  `json:"candidate"`
	Scenario          string  `json:"scenario"`
	ThresholdMS       float64 `json:"ttft_p90_threshold_ms"`
	Tolerance         float64 `json:"tolerance"`
	BaselineCapacity  *int    `json:"baseline_capacity_users"`
	CandidateCapacity *int    `json:"candidate_capacity_users"`
	// BaselineCapacityRate and CandidateCapacityRate are request-rate sweeps' capacities in
	// requests per second.
	BaselineCapacityRate  *float64     `json:"baseline_capacity_requests_per_second,omitempty"`
	CandidateCapacityRate *float64     `json:"candidate_capacity_requests_per_second,omitempty"`
	Load                  string       `json:"load,omitempty"`
	Levels                []SweepDelta `json:"levels"`
	Regression            bool         `json:"regression"`
	Findings              []string     `json:"findings"`
}

// SweepDelta is one user count, or one request rate, in both sweeps.
type SweepDelta struct {
	Users             int      `json:"users,omitempty"`
	TimeScale         *float64 `json:"time_scale,omitempty"`
	RequestsPerSecond *float64 `json:"requests_per_second,omitempty"`
	BaselineP90MS     *float64 `json:"baseline_ttft_p90_ms"`
	CandidateP90MS    *float64 `json:"candidate_ttft_p90_ms"`
	// P90Change is (candidate - baseline) / baseline; null when either is missing or the
	// baseline is 0. Negative is faster (with a host tier as the candidate: its TTFT gain).
	P90Change          *float64 `json:"ttft_p90_change"`
	BaselineHostShare  *float64 `json:"baseline_host_share"`
	CandidateHostShare *float64 `json:"candidate_host_share"`
	BaselineRecompute  *float64 `json:"baseline_recompute_share"`
	CandidateRecompute *float64 `json:"candidate_recompute_share"`
}

// CompareSweeps flags a capacity regression: the candidate's capacity is below the
// baseline's, and beyond noise: at the baseline's capacity level the candidate's TTFT p90
// exceeds the threshold by more than tolerance (or the level failed). A capacity that drops
// only because a p90 landed just over the line is noise, not a regression. The sweeps must
// be of the same scenario and step with the same threshold, unless allowMismatch.
func CompareSweeps(base, cand *record.Sweep, baseName, candName string, tolerance float64, allowMismatch bool) (*SweepResult, error) {
	var mism []string
	if base.Scenario != cand.Scenario || base.Step != cand.Step {
		mism = append(mism, fmt.Sprintf("scenario %s/%s vs %s/%s", base.Scenario, base.Step, cand.Scenario, cand.Step))
	}
	if base.TTFTP90ThresholdMS == nil || cand.TTFTP90ThresholdMS == nil {
		return nil, fmt.Errorf("%w: a sweep without --ttft-p90-ms has no capacity to compare", ErrMismatch)
	}
	if *base.TTFTP90ThresholdMS != *cand.TTFTP90ThresholdMS {
		mism = append(mism, fmt.Sprintf("threshold %s ms vs %s ms", units.Exact(*base.TTFTP90ThresholdMS), units.Exact(*cand.TTFTP90ThresholdMS)))
	}
	if len(mism) > 0 && !allowMismatch {
		return nil, fmt.Errorf("%w: %s (--allow-mismatch to compare anyway)", ErrMismatch, mism[0])
	}
	for _, s := range []*record.Sweep{base, cand} {
		if s.Status != record.StatusCompleted {
			return nil, fmt.Errorf("%w: a sweep is %s: %s", ErrIncomplete, s.Status, s.StopReason)
		}
	}
	if base.Load != cand.Load && !allowMismatch {
		return nil, fmt.Errorf("%w: a sweep of %s against one of %s", ErrMismatch, loadWord(base.Load), loadWord(cand.Load))
	}
	th := *base.TTFTP90ThresholdMS
	res := &SweepResult{Schema: SweepSchema, Baseline: baseName, Candidate: candName, Scenario: base.Scenario, ThresholdMS: th, Tolerance: tolerance,
		BaselineCapacity: base.CapacityUsers, CandidateCapacity: cand.CapacityUsers,
		BaselineCapacityRate: base.CapacityRequestsPerSecond, CandidateCapacityRate: cand.CapacityRequestsPerSecond,
		Load: base.Load, Findings: []string{}}
	candAt := map[string]record.SweepLevel{}
	for _, l := range cand.Levels {
		candAt[l.Key()] = l
	}
	for _, b := range base.Levels {
		d := SweepDelta{Users: b.Users, TimeScale: b.TimeScale, RequestsPerSecond: b.RequestsPerSecond, BaselineP90MS: b.TTFTMS.P90, BaselineHostShare: b.Tiers.Host, BaselineRecompute: b.Tiers.Recompute}
		if c, ok := candAt[b.Key()]; ok {
			d.CandidateP90MS, d.CandidateHostShare, d.CandidateRecompute = c.TTFTMS.P90, c.Tiers.Host, c.Tiers.Recompute
			if b.TTFTMS.P90 != nil && c.TTFTMS.P90 != nil && *b.TTFTMS.P90 > 0 {
				v := (*c.TTFTMS.P90 - *b.TTFTMS.P90) / *b.TTFTMS.P90
				d.P90Change = &v
			}
		}
		res.Levels = append(res.Levels, d)
	}
	bl, ok := base.CapacityLevel()
	if !ok {
		return res, nil // nothing to lose
	}
	cl, candHas := cand.CapacityLevel()
	if candHas && cl.LoadValue() >= bl.LoadValue() {
		return res, nil
	}
	lost := capacityChange(bl, cl, candHas)
	at := levelWords(bl)
	c, ok := candAt[bl.Key()]
	switch {
	case !ok:
		res.Findings = append(res.Findings, fmt.Sprintf("%s, and the candidate did not run the %s level", lost, at))
		res.Regression = true
	case c.FailedRequests > 0 || c.Status != record.StatusCompleted || c.TTFTMS.P90 == nil:
		res.Findings = append(res.Findings, fmt.Sprintf("%s: at %s the candidate had %d failed requests (status %s)", lost, at, c.FailedRequests, c.Status))
		res.Regression = true
	case *c.TTFTMS.P90 > th*(1+tolerance):
		res.Findings = append(res.Findings, fmt.Sprintf("%s: at %s TTFT p90 is %s ms, beyond the %s ms threshold by more than %s", lost, at, units.MS(c.TTFTMS.P90), units.Exact(th), units.Percent(&tolerance)))
		res.Regression = true
	default:
		res.Findings = append(res.Findings, fmt.Sprintf("%s, but at %s TTFT p90 is %s ms, within %s of the %s ms threshold: noise, not a regression", lost, at, units.MS(c.TTFTMS.P90), units.Percent(&tolerance), units.Exact(th)))
	}
	return res, nil
}

// capacityChange words a capacity that fell: "capacity 32 -> 16 users" (0 when the
// candidate has none, as before rates were swept), "capacity 8.3 requests/s (time_scale 0.5)
// -> none".
func capacityChange(base, cand record.SweepLevel, candHas bool) string {
	if base.TimeScale == nil {
		users := 0
		if candHas {
			users = cand.Users
		}
		return fmt.Sprintf("capacity %d -> %d users", base.Users, users)
	}
	to := "none"
	if candHas {
		to = levelWords(cand)
	}
	return fmt.Sprintf("capacity %s -> %s", levelWords(base), to)
}

// levelWords names a level: "32 users", "4.2 requests/s (time_scale 0.5)".
func levelWords(l record.SweepLevel) string {
	switch {
	case l.TimeScale == nil:
		return fmt.Sprintf("%d users", l.Users)
	case l.RequestsPerSecond == nil:
		return "time_scale " + units.Exact(*l.TimeScale)
	}
	return fmt.Sprintf("%s requests/s (time_scale %s)", rate(l.RequestsPerSecond), units.Exact(*l.TimeScale))
}

func loadWord(load string) string {
	if load == record.SweepRequestRate {
		return "request rates"
	}
	return "user counts"
}

// WriteText prints the comparison as a table.
func (r *SweepResult) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { r.writeText(w) })
}

// writeText writes what WriteText writes.
func (r *SweepResult) writeText(w io.Writer) {
	fmt.Fprintf(w, "sweep %s: baseline %s, candidate %s (TTFT p90 threshold %s ms)\n", r.Scenario, r.Baseline, r.Candidate, units.Exact(r.ThresholdMS))
	fmt.Fprintf(w, "%6s  %12s  %12s  %8s  %10s  %10s  %10s  %10s\n", r.loadHeader(), "base p90 ms", "cand p90 ms", "change", "base host", "cand host", "base recmp", "cand recmp")
	rs := r.rateScale()
	for _, l := range r.Levels {
		fmt.Fprintf(w, "%6s  %12s  %12s  %8s  %10s  %10s  %10s  %10s\n", l.load(rs), units.MS(l.BaselineP90MS), units.MS(l.CandidateP90MS), change(l.P90Change),
			units.Percent(l.BaselineHostShare), units.Percent(l.CandidateHostShare), units.Percent(l.BaselineRecompute), units.Percent(l.CandidateRecompute))
	}
	fmt.Fprintf(w, "capacity: %s\n", r.capacityLine())
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if r.Regression {
		fmt.Fprintln(w, "REGRESSION")
	}
}

// rate writes one request rate on its own, as units.Scale chooses for it.
func rate(p *float64) string {
	if p == nil {
		return units.Absent
	}
	return units.Scale(units.PerSecond, *p).Format(*p)
}

// rateScale is one scaler for the rates of a table's load column and capacity line.
func (r *SweepResult) rateScale() units.Scaler {
	var vs []float64
	for _, p := range []*float64{r.BaselineCapacityRate, r.CandidateCapacityRate} {
		if p != nil {
			vs = append(vs, *p)
		}
	}
	for _, l := range r.Levels {
		if l.RequestsPerSecond != nil {
			vs = append(vs, *l.RequestsPerSecond)
		}
	}
	return units.Scale(units.PerSecond, vs...)
}

// capacityLine is the two capacities: "16 -> 32 users", "2.1 -> 4.2 requests/s".
func (r *SweepResult) capacityLine() string {
	if r.Load == record.SweepRequestRate {
		s := r.rateScale()
		return fmt.Sprintf("%s -> %s requests/s", s.Value(r.BaselineCapacityRate), s.Value(r.CandidateCapacityRate))
	}
	return fmt.Sprintf("%s -> %s users", units.Int(r.BaselineCapacity), units.Int(r.CandidateCapacity))
}

func (r *SweepResult) loadHeader() string {
	if r.Load == record.SweepRequestRate {
		return "req/s"
	}
	return "users"
}

// load is the level's users or request rate, at the column's scale.
func (d SweepDelta) load(s units.Scaler) string {
	if d.TimeScale == nil {
		return fmt.Sprint(d.Users)
	}
	return s.Value(d.RequestsPerSecond)
}

// WriteMarkdown prints the comparison as a Markdown table (for a CI job summary).
func (r *SweepResult) WriteMarkdown(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { r.writeMarkdown(w) })
}

// writeMarkdown writes what WriteMarkdown writes.
func (r *SweepResult) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "### kvbench sweep %s: capacity %s (TTFT p90 within %s ms)\n\n", r.Scenario, r.capacityLine(), units.Exact(r.ThresholdMS))
	fmt.Fprintf(w, "| %s | baseline p90 ms | candidate p90 ms | change | baseline host | candidate host | baseline recompute | candidate recompute |\n", r.loadHeader())
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	rs := r.rateScale()
	for _, l := range r.Levels {
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", l.load(rs), units.MS(l.BaselineP90MS), units.MS(l.CandidateP90MS), change(l.P90Change),
			units.Percent(l.BaselineHostShare), units.Percent(l.CandidateHostShare), units.Percent(l.BaselineRecompute), units.Percent(l.CandidateRecompute))
	}
	fmt.Fprintln(w)
	for _, f := range r.Findings {
		fmt.Fprintf(w, "- %s\n", f)
	}
	if r.Regression {
		fmt.Fprintln(w, "\n**Capacity regression.**")
	}
}

func change(p *float64) string {
	if p == nil {
		return units.NotApplicable // nothing to compare at this level
	}
	return units.SignedShare(*p)
}

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
	Baseline          string       `json:"baseline"`
	Candidate         string       `json:"candidate"`
	Scenario          string       `json:"scenario"`
	ThresholdMS       float64      `json:"ttft_p90_threshold_ms"`
	Tolerance         float64      `json:"tolerance"`
	BaselineCapacity  *int         `json:"baseline_capacity_users"`
	CandidateCapacity *int         `json:"candidate_capacity_users"`
	Levels            []SweepDelta `json:"levels"`
	Regression        bool         `json:"regression"`
	Findings          []string     `json:"findings"`
}

// SweepDelta is one user count in both sweeps.
type SweepDelta struct {
	Users          int      `json:"users"`
	BaselineP90MS  *float64 `json:"baseline_ttft_p90_ms"`
	CandidateP90MS *float64 `json:"candidate_ttft_p90_ms"`
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
		mism = append(mism, fmt.Sprintf("threshold %.0f ms vs %.0f ms", *base.TTFTP90ThresholdMS, *cand.TTFTP90ThresholdMS))
	}
	if len(mism) > 0 && !allowMismatch {
		return nil, fmt.Errorf("%w: %s (--allow-mismatch to compare anyway)", ErrMismatch, mism[0])
	}
	for _, s := range []*record.Sweep{base, cand} {
		if s.Status != record.StatusCompleted {
			return nil, fmt.Errorf("%w: a sweep is %s: %s", ErrIncomplete, s.Status, s.StopReason)
		}
	}
	th := *base.TTFTP90ThresholdMS
	res := &SweepResult{Baseline: baseName, Candidate: candName, Scenario: base.Scenario, ThresholdMS: th, Tolerance: tolerance,
		BaselineCapacity: base.CapacityUsers, CandidateCapacity: cand.CapacityUsers, Findings: []string{}}
	candAt := map[int]record.SweepLevel{}
	for _, l := range cand.Levels {
		candAt[l.Users] = l
	}
	for _, b := range base.Levels {
		d := SweepDelta{Users: b.Users, BaselineP90MS: b.TTFTMS.P90, BaselineHostShare: b.Tiers.Host, BaselineRecompute: b.Tiers.Recompute}
		if c, ok := candAt[b.Users]; ok {
			d.CandidateP90MS, d.CandidateHostShare, d.CandidateRecompute = c.TTFTMS.P90, c.Tiers.Host, c.Tiers.Recompute
			if b.TTFTMS.P90 != nil && c.TTFTMS.P90 != nil && *b.TTFTMS.P90 > 0 {
				v := (*c.TTFTMS.P90 - *b.TTFTMS.P90) / *b.TTFTMS.P90
				d.P90Change = &v
			}
		}
		res.Levels = append(res.Levels, d)
	}
	bc := base.CapacityUsers
	if bc == nil {
		return res, nil // nothing to lose
	}
	cc := 0
	if cand.CapacityUsers != nil {
		cc = *cand.CapacityUsers
	}
	if cc >= *bc {
		return res, nil
	}
	c, ok := candAt[*bc]
	switch {
	case !ok:
		res.Findings = append(res.Findings, fmt.Sprintf("capacity %d -> %d users, and the candidate did not run the %d-user level", *bc, cc, *bc))
		res.Regression = true
	case c.FailedRequests > 0 || c.Status != record.StatusCompleted || c.TTFTMS.P90 == nil:
		res.Findings = append(res.Findings, fmt.Sprintf("capacity %d -> %d users: at %d users the candidate had %d failed requests (status %s)", *bc, cc, *bc, c.FailedRequests, c.Status))
		res.Regression = true
	case *c.TTFTMS.P90 > th*(1+tolerance):
		res.Findings = append(res.Findings, fmt.Sprintf("capacity %d -> %d users: at %d users TTFT p90 is %.1f ms, beyond the %.0f ms threshold by more than %.0f%%", *bc, cc, *bc, *c.TTFTMS.P90, th, tolerance*100))
		res.Regression = true
	default:
		res.Findings = append(res.Findings, fmt.Sprintf("capacity %d -> %d users, but at %d users TTFT p90 is %.1f ms, within %.0f%% of the %.0f ms threshold: noise, not a regression", *bc, cc, *bc, *c.TTFTMS.P90, tolerance*100, th))
	}
	return res, nil
}

// WriteText prints the comparison as a table.
func (r *SweepResult) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { r.writeText(w) })
}

// writeText writes what WriteText writes.
func (r *SweepResult) writeText(w io.Writer) {
	fmt.Fprintf(w, "sweep %s: baseline %s, candidate %s (TTFT p90 threshold %.0f ms)\n", r.Scenario, r.Baseline, r.Candidate, r.ThresholdMS)
	fmt.Fprintf(w, "%6s  %12s  %12s  %8s  %10s  %10s  %10s  %10s\n", "users", "base p90 ms", "cand p90 ms", "change", "base host", "cand host", "base recmp", "cand recmp")
	for _, l := range r.Levels {
		fmt.Fprintf(w, "%6d  %12s  %12s  %8s  %10s  %10s  %10s  %10s\n", l.Users, units.MS(l.BaselineP90MS), units.MS(l.CandidateP90MS), change(l.P90Change),
			units.Percent(l.BaselineHostShare), units.Percent(l.CandidateHostShare), units.Percent(l.BaselineRecompute), units.Percent(l.CandidateRecompute))
	}
	fmt.Fprintf(w, "capacity: %s -> %s users\n", units.Int(r.BaselineCapacity), units.Int(r.CandidateCapacity))
	for _, f := range r.Findings {
		fmt.Fprintf(w, "  %s\n", f)
	}
	if r.Regression {
		fmt.Fprintln(w, "REGRESSION")
	}
}

// WriteMarkdown prints the comparison as a Markdown table (for a CI job summary).
func (r *SweepResult) WriteMarkdown(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { r.writeMarkdown(w) })
}

// writeMarkdown writes what WriteMarkdown writes.
func (r *SweepResult) writeMarkdown(w io.Writer) {
	fmt.Fprintf(w, "### kvbench sweep %s: capacity %s -> %s users (TTFT p90 within %.0f ms)\n\n", r.Scenario, units.Int(r.BaselineCapacity), units.Int(r.CandidateCapacity), r.ThresholdMS)
	fmt.Fprintln(w, "| users | baseline p90 ms | candidate p90 ms | change | baseline host | candidate host | baseline recompute | candidate recompute |")
	fmt.Fprintln(w, "|---:|---:|---:|---:|---:|---:|---:|---:|")
	for _, l := range r.Levels {
		fmt.Fprintf(w, "| %d | %s | %s | %s | %s | %s | %s | %s |\n", l.Users, units.MS(l.BaselineP90MS), units.MS(l.CandidateP90MS), change(l.P90Change),
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

package export

import (
	"math"
	"strconv"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/stats"
)

// CompareJob is the Pushgateway job a comparison is pushed under: its own group, so pushing
// it never replaces the candidate run's series (job kvbench) and the other way round.
const CompareJob = "kvbench_compare"

// CompareFamilies returns a comparison's series sorted by name, each with the labels in
// extra: how many regressions it found (the alert's series), which judged metric regressed
// and by what relative change, which server settings changed, and when the candidate was
// observed (an alert on its absence finds a nightly that stopped comparing).
// By default a judged metric has one series per step: regressed when any request of the
// step regressed, and the largest relative change among them; CompareFamiliesFor with
// perRequest gives one per request.
func CompareFamilies(res *compare.Result, extra []Label) ([]*dto.MetricFamily, error) {
	return CompareFamiliesFor(res, extra, false)
}

// CompareFamiliesFor is CompareFamilies, per request when perRequest is set.
func CompareFamiliesFor(res *compare.Result, extra []Label, perRequest bool) ([]*dto.MetricFamily, error) {
	b := &builder{fams: map[string]*dto.MetricFamily{}, extra: extra}
	b.gauge("kvbench_compare_regressions", ptr(float64(len(res.Findings))))
	if t, err := time.Parse(time.RFC3339, res.Candidate.ObservedAt); err == nil {
		b.gauge("kvbench_compare_timestamp_seconds", ptr(float64(t.Unix())))
	}
	for _, m := range res.ServerChanges {
		b.gauge("kvbench_compare_server_changed", ptr(1.0), "field", m.Field)
	}
	for _, st := range res.Steps {
		if v := st.Verdict; v != nil {
			b.gauge("kvbench_compare_regressed", regressed(v.Status), "step", st.Step, "metric", "verdict")
		}
		type worst struct{ regressed, relative *float64 }
		perStep := map[string]*worst{}
		var order []string
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				if perRequest {
					l := []string{"step", st.Step, "request", strconv.Itoa(q.Index), "metric", m.Metric}
					b.gauge("kvbench_compare_regressed", regressed(m.Judgement), l...)
					b.gauge("kvbench_compare_relative_change", m.Relative, l...)
					continue
				}
				w, ok := perStep[m.Metric]
				if !ok {
					w = &worst{}
					perStep[m.Metric] = w
					order = append(order, m.Metric)
				}
				if r := regressed(m.Judgement); r != nil && (w.regressed == nil || *r > *w.regressed) {
					w.regressed = r
				}
				if r := m.Relative; r != nil && (w.relative == nil || math.Abs(*r) > math.Abs(*w.relative)) {
					w.relative = r
				}
			}
		}
		for _, metric := range order {
			l := []string{"step", st.Step, "metric", metric}
			b.gauge("kvbench_compare_regressed", perStep[metric].regressed, l...)
			b.gauge("kvbench_compare_relative_change", perStep[metric].relative, l...)
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.sorted(), nil
}

// regressed is 1 for a regression, 0 for another judgement, and nil (no series) when the
// metric was not measured in both runs or its change could not be told from noise.
func regressed(j stats.Judgement) *float64 {
	switch j {
	case stats.Regressed:
		return ptr(1.0)
	case stats.NotMeasured, stats.CannotTell:
		return nil
	}
	return ptr(0.0)
}

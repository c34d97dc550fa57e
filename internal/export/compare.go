package export

import (
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
func CompareFamilies(res *compare.Result, extra []Label) ([]*dto.MetricFamily, error) {
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
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				l := []string{"step", st.Step, "request", strconv.Itoa(q.Index), "metric", m.Metric}
				b.gauge("kvbench_compare_regressed", regressed(m.Judgement), l...)
				b.gauge("kvbench_compare_relative_change", m.Relative, l...)
			}
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

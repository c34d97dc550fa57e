// Package stats summarizes the repeated measurements of one value (a request's time to first
// output over N repetitions, say) and judges a change between two such sets against a
// tolerance and the sets' own noise. It is pure arithmetic, so it tests with literals; the
// record's repeats section, kvbench verify and kvbench compare share it.
package stats

import (
	"math"
	"slices"

	"github.com/anvil-serving/kvbench/harness/record"
)

// Summary is n measurements of one value: the record's type (its repeats section keeps
// them), which Summarize fills.
type Summary = record.Summary

// Summarize summarizes values in the order given; nil entries are absent measurements.
func Summarize(values []*float64) Summary {
	s := Summary{Values: []float64{}}
	for _, v := range values {
		if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
			s.Absent++
			continue
		}
		s.Values = append(s.Values, *v)
	}
	s.N = len(s.Values)
	if s.N == 0 {
		return s
	}
	sorted := slices.Clone(s.Values)
	slices.Sort(sorted)
	med := Median(sorted)
	lo, hi := sorted[0], sorted[len(sorted)-1]
	spread := hi - lo
	s.Median, s.Min, s.Max, s.Spread = &med, &lo, &hi, &spread
	if med != 0 {
		rel := spread / math.Abs(med)
		s.RelativeSpread = &rel
	}
	return s
}

// Of summarizes plain values (all present).
func Of(values ...float64) Summary {
	ptrs := make([]*float64, len(values))
	for i := range values {
		ptrs[i] = &values[i]
	}
	return Summarize(ptrs)
}

// Median of sorted values: the middle one, or the mean of the two middle ones.
func Median(sorted []float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	if n%2 == 1 {
		return sorted[n/2]
	}
	return (sorted[n/2-1] + sorted[n/2]) / 2
}

// NearestRank is the q-quantile (0 < q <= 1) of sorted values by the nearest-rank rule: the
// smallest value with at least q of the values at or below it. NaN when there are none.
func NearestRank(sorted []float64, q float64) float64 {
	n := len(sorted)
	if n == 0 {
		return math.NaN()
	}
	i := int(math.Ceil(q*float64(n))) - 1
	return sorted[min(max(i, 0), n-1)]
}

// Better says which way a metric improves.
type Better string

const (
	Lower  Better = "lower"  // times
	Higher Better = "higher" // rates, cached fraction
)

// Judgement is the outcome of comparing a candidate's measurements with a baseline's.
type Judgement string

const (
	Unchanged   Judgement = "ok"
	Improved    Judgement = "improved"
	Regressed   Judgement = "regression"
	NotMeasured Judgement = "not_measured"
	// CannotTell: the change passed the tolerance but is smaller than the noise two
	// unrepeated runs cannot rule out (a floor the caller states): neither a regression nor
	// an improvement.
	CannotTell Judgement = "cannot_tell"
)

// Change compares the medians of two summaries of one metric.
type Change struct {
	// Relative is (candidate - baseline) / |baseline| of the medians; Worse is the same change
	// signed so that a positive value is a change for the worse.
	Relative *float64 `json:"relative_change"`
	Worse    *float64 `json:"worse_by"`
	// Noise is the larger relative spread of the two sets; nil when neither was repeated.
	Noise *float64 `json:"noise"`
	// Threshold is what Worse had to exceed: max(tolerance, noise).
	Threshold float64   `json:"threshold"`
	Judgement Judgement `json:"status"`
	Why       string    `json:"why,omitempty"`
}

// Compare judges candidate against baseline: a regression only when the candidate's median is
// worse by more than the tolerance AND by more than the measured noise (the larger relative
// spread of the two sets); an improvement beyond both is reported as such. With no repeats
// on either side the noise is unknown and the tolerance alone decides.
func Compare(baseline, candidate Summary, better Better, tolerance float64) Change {
	c := Change{Threshold: tolerance, Judgement: NotMeasured}
	if baseline.Median == nil || candidate.Median == nil {
		c.Why = "not measured in both runs"
		return c
	}
	b, k := *baseline.Median, *candidate.Median
	if b == 0 {
		if k == 0 {
			c.Judgement = Unchanged
			zero := 0.0
			c.Relative, c.Worse = &zero, &zero
		} else {
			c.Why = "baseline median is 0: no relative change"
		}
		return c
	}
	rel := (k - b) / math.Abs(b)
	worse := rel
	if better == Higher {
		worse = -rel
	}
	c.Relative, c.Worse = &rel, &worse
	noise, measured := 0.0, false
	for _, s := range []Summary{baseline, candidate} {
		if s.N > 1 && s.RelativeSpread != nil {
			noise, measured = math.Max(noise, *s.RelativeSpread), true
		}
	}
	if measured {
		c.Noise = &noise
		c.Threshold = math.Max(tolerance, noise)
	}
	switch {
	case worse > c.Threshold:
		c.Judgement = Regressed
	case -worse > c.Threshold:
		c.Judgement = Improved
	default:
		c.Judgement = Unchanged
	}
	return c
}

// Within reports whether measured lies within a relative tolerance of claimed:
// |measured - claimed| <= tolerance x |claimed|.
func Within(measured, claimed, tolerance float64) bool {
	return math.Abs(measured-claimed) <= tolerance*math.Abs(claimed)
}

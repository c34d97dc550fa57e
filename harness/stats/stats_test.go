package stats

import (
	"math"
	"testing"
)

func f(v float64) *float64 { return &v }

func TestSummarize(t *testing.T) {
	cases := []struct {
		name                  string
		in                    []*float64
		n, absent             int
		median, lo, hi, rel   float64
		noMedian, noRelSpread bool
	}{
		{name: "odd", in: []*float64{f(3), f(1), f(2)}, n: 3, median: 2, lo: 1, hi: 3, rel: 1},
		{name: "even", in: []*float64{f(4), f(1), f(2), f(3)}, n: 4, median: 2.5, lo: 1, hi: 4, rel: 1.2},
		{name: "absent values are counted, not zero", in: []*float64{nil, f(10), nil}, n: 1, absent: 2, median: 10, lo: 10, hi: 10, rel: 0},
		{name: "all absent", in: []*float64{nil, nil}, absent: 2, noMedian: true},
		{name: "zero median", in: []*float64{f(-1), f(0), f(1)}, n: 3, median: 0, lo: -1, hi: 1, noRelSpread: true},
		{name: "NaN is absent", in: []*float64{f(math.NaN()), f(5)}, n: 1, absent: 1, median: 5, lo: 5, hi: 5},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			s := Summarize(c.in)
			if s.N != c.n || s.Absent != c.absent {
				t.Fatalf("n %d absent %d", s.N, s.Absent)
			}
			if c.noMedian {
				if s.Median != nil || s.Spread != nil {
					t.Fatalf("median %v of nothing", *s.Median)
				}
				return
			}
			if *s.Median != c.median || *s.Min != c.lo || *s.Max != c.hi || *s.Spread != c.hi-c.lo {
				t.Fatalf("median %v min %v max %v spread %v", *s.Median, *s.Min, *s.Max, *s.Spread)
			}
			if c.noRelSpread != (s.RelativeSpread == nil) || (s.RelativeSpread != nil && math.Abs(*s.RelativeSpread-c.rel) > 1e-12) {
				t.Fatalf("relative spread %v", s.RelativeSpread)
			}
		})
	}
}

func TestCompare(t *testing.T) {
	cases := []struct {
		name      string
		base, can Summary
		better    Better
		tol       float64
		want      Judgement
		noise     bool
	}{
		// Unrepeated runs: the tolerance alone decides.
		{"single, within tolerance", Of(100), Of(109), Lower, 0.10, Unchanged, false},
		{"single, beyond tolerance", Of(100), Of(111), Lower, 0.10, Regressed, false},
		{"single, faster is better", Of(100), Of(80), Lower, 0.10, Improved, false},
		{"rate drop", Of(1000), Of(700), Higher, 0.10, Regressed, false},
		// Repeated runs: a change inside the measured noise is not a regression...
		{"noisy, within noise", Of(80, 100, 120), Of(110, 115, 125), Lower, 0.10, Unchanged, true},
		// ...and one beyond both the noise and the tolerance is.
		{"noisy, beyond noise", Of(95, 100, 105), Of(140, 143, 150), Lower, 0.10, Regressed, true},
		// Tolerance above the noise still holds small changes back.
		{"quiet, within tolerance", Of(100, 100.5, 101), Of(105, 105.5, 106), Lower, 0.10, Unchanged, true},
		{"not measured", Summarize([]*float64{nil}), Of(1), Lower, 0.1, NotMeasured, false},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := Compare(c.base, c.can, c.better, c.tol)
			if got.Judgement != c.want || (got.Noise != nil) != c.noise {
				t.Fatalf("%s (worse %v, threshold %v, noise %v), want %s", got.Judgement, ptr(got.Worse), got.Threshold, ptr(got.Noise), c.want)
			}
		})
	}
}

func ptr(p *float64) any {
	if p == nil {
		return nil
	}
	return *p
}

func TestWithin(t *testing.T) {
	// Seed 001: 113674 prompt tokens / 0.8245862 s = 137855.81 tokens/s, claimed ~137,856;
	// the 15% band is 117,177.6..158,534.4.
	if !Within(137855.8117992414, 137856, 0.15) || !Within(117178, 137856, 0.15) || Within(117177, 137856, 0.15) {
		t.Fatal("15% band around 137,856 is wrong")
	}
}

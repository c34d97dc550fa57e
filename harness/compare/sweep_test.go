package compare

import (
	"bytes"
	"errors"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

func sweepOf(p90s ...float64) *record.Sweep {
	th := 100.0
	s := &record.Sweep{Schema: record.SweepSchema, Status: record.StatusCompleted, Scenario: "chat", Step: "chat", TTFTP90ThresholdMS: &th}
	for i, p := range p90s {
		v := p
		s.Levels = append(s.Levels, record.SweepLevelOf(8<<i, "", "", record.StatusCompleted,
			&record.ConversationSection{Requests: 10, TTFTMS: record.Percentiles{N: 10, P90: &v}, CountersValid: true}, &th))
	}
	s.Decide()
	return s
}

func TestCompareSweeps(t *testing.T) {
	base := sweepOf(20, 40, 90, 300) // capacity 32
	cases := []struct {
		name       string
		cand       *record.Sweep
		regression bool
	}{
		{"same", sweepOf(20, 40, 90, 300), false},
		{"better", sweepOf(20, 40, 60, 95), false},
		{"just over the line", sweepOf(20, 40, 105, 300), false},
		{"beyond noise", sweepOf(20, 40, 180, 400), true},
		{"nothing within", sweepOf(150, 200, 300, 400), true},
	}
	for _, c := range cases {
		res, err := CompareSweeps(base, c.cand, "b", "c", DefaultTolerance, false)
		if err != nil {
			t.Fatal(err)
		}
		if res.Regression != c.regression {
			t.Errorf("%s: regression %v, want %v: %v", c.name, res.Regression, c.regression, res.Findings)
		}
	}
	if *base.CapacityUsers != 32 {
		t.Fatalf("capacity %v, want 32", *base.CapacityUsers)
	}
	other := sweepOf(20)
	other.Scenario = "other"
	if _, err := CompareSweeps(base, other, "b", "c", DefaultTolerance, false); !errors.Is(err, ErrMismatch) {
		t.Errorf("different scenarios: err %v", err)
	}
	none := sweepOf(20)
	none.TTFTP90ThresholdMS = nil
	if _, err := CompareSweeps(base, none, "b", "c", DefaultTolerance, false); !errors.Is(err, ErrMismatch) {
		t.Errorf("no threshold: err %v", err)
	}
}

func TestSweepCapacityStopsAtFirstFailure(t *testing.T) {
	s := sweepOf(20, 150, 90) // 32 users pass after 16 failed: capacity stays 8
	if s.CapacityUsers == nil || *s.CapacityUsers != 8 {
		t.Fatalf("capacity %v, want 8", s.CapacityUsers)
	}
	if s = sweepOf(150); s.CapacityUsers != nil {
		t.Fatalf("capacity %v, want none", *s.CapacityUsers)
	}
}

func TestSweepP90Change(t *testing.T) {
	res, err := CompareSweeps(sweepOf(20, 40), sweepOf(10, 60), "b", "c", DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	if c := res.Levels[0].P90Change; c == nil || *c != -0.5 {
		t.Errorf("8 users: change %v, want -50%%", c)
	}
	if c := res.Levels[1].P90Change; c == nil || *c != 0.5 {
		t.Errorf("16 users: change %v, want +50%%", c)
	}
}

func rateSweepOf(p90s ...float64) *record.Sweep {
	th := 100.0
	s := &record.Sweep{Schema: record.SweepSchema, Status: record.StatusCompleted, Scenario: "trace", Step: "load", Load: record.SweepRequestRate, TTFTP90ThresholdMS: &th}
	for i, p := range p90s {
		v, scale := p, 1/float64(int(1)<<i)
		rate := 10 / scale
		s.Levels = append(s.Levels, record.SweepTraceLevelOf(scale, &rate, "", "", record.StatusCompleted,
			&record.TraceSection{Requests: 10, TTFTMS: record.Percentiles{N: 10, P90: &v}, CountersValid: true}, &th))
	}
	s.Decide()
	return s
}

// TestCompareRequestRateSweeps: two trace sweeps compare level by level by time scale, and
// the capacity the tier adds is in requests per second.
func TestCompareRequestRateSweeps(t *testing.T) {
	on, off := rateSweepOf(20, 40, 300), rateSweepOf(60, 400, 900)
	res, err := CompareSweeps(off, on, "off", "on", DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Regression || *res.BaselineCapacityRate != 10 || *res.CandidateCapacityRate != 20 || res.Levels[1].TimeScale == nil || *res.Levels[1].P90Change > -0.85 {
		t.Fatalf("gain: %+v", res)
	}
	res, err = CompareSweeps(on, off, "on", "off", DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	if !res.Regression || len(res.Findings) != 1 || res.Findings[0] != "capacity 20.0 requests/s (time_scale 0.5) -> 10.0 requests/s (time_scale 1): at 20.0 requests/s (time_scale 0.5) TTFT p90 is 400.0 ms, beyond the 100 ms threshold by more than 10%" {
		t.Fatalf("loss: %+v", res)
	}
	var b bytes.Buffer
	res.WriteText(&b)
	if !strings.Contains(b.String(), "capacity: 20.0 -> 10.0 requests/s") || !strings.Contains(b.String(), " req/s   base p90 ms") {
		t.Errorf("text:\n%s", b.String())
	}
	if _, err := CompareSweeps(on, sweepOf(20, 40), "on", "users", DefaultTolerance, false); !errors.Is(err, ErrMismatch) {
		t.Errorf("a rate sweep against a users sweep: %v", err)
	}
}

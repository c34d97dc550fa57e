package record

import (
	"strings"
	"testing"
)

func ms(v float64) *float64 { return &v }

// TestSweepCapacityReason: the reason names what kept a level from counting (failed
// requests, no TTFT, an interrupted level, a p90 over the line), never a p90 "over the
// threshold" that was under it or absent.
func TestSweepCapacityReason(t *testing.T) {
	th := 2000.0
	level := func(users int, status string, failed int, p90 *float64) SweepLevel {
		cs := &ConversationSection{Requests: users * 3, FailedRequests: failed}
		cs.TTFTMS.P90 = p90
		return SweepLevelOf(users, "r", "s", status, cs, &th)
	}
	cases := []struct {
		name     string
		status   string
		levels   []SweepLevel
		capacity int // 0: none
		want     string
		not      []string
	}{
		{"failed requests at the lowest level", StatusCompleted,
			[]SweepLevel{level(8, StatusCompleted, 6, ms(48)), level(16, StatusCompleted, 12, ms(50))}, 0,
			"no capacity: the lowest level, 8 users, had 6 failed requests of 24 (TTFT p90 48.0 ms)", []string{"within 2000 ms"}},
		{"no output at all", StatusCompleted,
			[]SweepLevel{level(8, StatusCompleted, 24, nil)}, 0,
			"the lowest level, 8 users, had 24 failed requests of 24 (no TTFT p90)", []string{"within 2000 ms"}},
		{"interrupted next level", StatusInterrupted,
			[]SweepLevel{level(8, StatusCompleted, 0, ms(40)), level(16, StatusInterrupted, 0, ms(90))}, 8,
			"capacity is at least 8 users; the next level, 16 users, was interrupted before it finished", []string{"did not"}},
		{"interrupted lowest level", StatusInterrupted,
			[]SweepLevel{level(8, StatusInterrupted, 0, ms(40))}, 0,
			"no capacity decided: the lowest level, 8 users, was interrupted", nil},
		{"p90 over the line", StatusCompleted,
			[]SweepLevel{level(8, StatusCompleted, 0, ms(40)), level(16, StatusCompleted, 0, ms(2500))}, 8,
			"8 users kept TTFT p90 within 2000 ms with no failed request; the next level, 16 users, had TTFT p90 2500.0 ms, over the 2000 ms threshold", nil},
		{"every level that ran, then a signal", StatusInterrupted,
			[]SweepLevel{level(8, StatusCompleted, 0, ms(40))}, 8,
			"capacity is at least 8 users (the sweep stopped before its other levels: interrupted: received SIGINT)", nil},
	}
	for _, c := range cases {
		s := &Sweep{Status: c.status, StopReason: "interrupted: received SIGINT", TTFTP90ThresholdMS: &th, Levels: c.levels}
		s.Decide()
		if c.capacity == 0 && s.CapacityUsers != nil || c.capacity != 0 && (s.CapacityUsers == nil || *s.CapacityUsers != c.capacity) {
			t.Errorf("%s: capacity %v, want %d", c.name, s.CapacityUsers, c.capacity)
		}
		if !strings.Contains(s.CapacityReason, c.want) {
			t.Errorf("%s: reason %q\nwant %q", c.name, s.CapacityReason, c.want)
		}
		for _, n := range c.not {
			if strings.Contains(s.CapacityReason, n) {
				t.Errorf("%s: reason %q says %q", c.name, s.CapacityReason, n)
			}
		}
	}
}

// TestSweepRequestRateCapacity: a trace step's sweep steps the request rate down its time
// scales; its capacity is the highest rate within the threshold before the first level that
// is not, in requests per second, and the reason names rates, not users.
func TestSweepRequestRateCapacity(t *testing.T) {
	th := 500.0
	level := func(scale float64, p90 float64, failed int) SweepLevel {
		ts := &TraceSection{Requests: 100, FailedRequests: failed, CountersValid: true}
		ts.TTFTMS.P90 = &p90
		ts.Ideal = &IdealTiers{IdealShares: IdealShares{HostShare: 0.3}}
		rate := 10 / scale
		return SweepTraceLevelOf(scale, &rate, "r", "s", StatusCompleted, ts, &th)
	}
	s := &Sweep{Status: StatusCompleted, Load: SweepRequestRate, TTFTP90ThresholdMS: &th,
		Levels: []SweepLevel{level(1, 100, 0), level(0.5, 300, 0), level(0.25, 900, 0), level(0.125, 200, 0)}}
	s.Decide()
	if s.CapacityUsers != nil || s.CapacityTimeScale == nil || *s.CapacityTimeScale != 0.5 || *s.CapacityRequestsPerSecond != 20 {
		t.Fatalf("capacity %v users, time scale %v, %v requests/s; want 20 requests/s at 0.5", s.CapacityUsers, s.CapacityTimeScale, s.CapacityRequestsPerSecond)
	}
	want := "20.0 requests/s (time_scale 0.5) kept TTFT p90 within 500 ms with no failed request; the next level, 40.0 requests/s (time_scale 0.25), had TTFT p90 900.0 ms, over the 500 ms threshold"
	if s.CapacityReason != want {
		t.Errorf("reason %q\nwant %q", s.CapacityReason, want)
	}
	if l, ok := s.CapacityLevel(); !ok || l.Key() != "time_scale=0.5" || l.LoadValue() != 2 || *l.IdealHostShare != 0.3 {
		t.Errorf("capacity level %+v", l)
	}
	// A level whose replay fell behind carries the finding.
	behind := &TraceSection{Requests: 100, CountersValid: true, DispatchBehind: &DispatchBehind{ThresholdP99MS: 5, LagP99MS: 40}}
	if l := SweepTraceLevelOf(0.1, nil, "r", "s", StatusCompleted, behind, &th); l.DispatchBehind == nil || l.DispatchBehind.LagP99MS != 40 {
		t.Errorf("a level that fell behind: %+v", l.DispatchBehind)
	}
	s.Levels[0] = level(1, 100, 3)
	s.Decide()
	if s.CapacityRequestsPerSecond != nil || !strings.Contains(s.CapacityReason, "no capacity: the lowest level, 10.0 requests/s (time_scale 1), had 3 failed requests of 100") {
		t.Errorf("failed lowest level: %v, %q", s.CapacityRequestsPerSecond, s.CapacityReason)
	}
}

// TestSweepThresholdAsGiven: the reason writes the threshold as the user gave it, so a
// p90 of 250.2 ms is never "over the 250 ms threshold" it is within.
func TestSweepThresholdAsGiven(t *testing.T) {
	th := 250.5
	cs := &ConversationSection{Requests: 3}
	cs.TTFTMS.P90 = ms(250.2)
	cs2 := &ConversationSection{Requests: 6}
	cs2.TTFTMS.P90 = ms(251)
	s := &Sweep{Status: StatusCompleted, TTFTP90ThresholdMS: &th,
		Levels: []SweepLevel{SweepLevelOf(1, "r", "s", StatusCompleted, cs, &th), SweepLevelOf(2, "r", "s", StatusCompleted, cs2, &th)}}
	s.Decide()
	want := "1 users kept TTFT p90 within 250.5 ms with no failed request; the next level, 2 users, had TTFT p90 251.0 ms, over the 250.5 ms threshold"
	if s.CapacityReason != want {
		t.Errorf("reason %q\nwant %q", s.CapacityReason, want)
	}
}

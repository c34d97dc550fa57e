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

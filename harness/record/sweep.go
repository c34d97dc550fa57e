package record

import (
	"fmt"
	"io"
	"slices"

	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// SweepSchema is the schema of sweep.json, the record of a capacity sweep.
const SweepSchema = "anvil-serving.kvbench-sweep/v1"

// Sweep is a capacity sweep (kvbench sweep): one conversation step run at several user
// counts, each level a run directory of its own under the sweep's directory, and the highest
// user count whose TTFT p90 stayed within the threshold.
type Sweep struct {
	Schema     string `json:"schema"`
	ObservedAt string `json:"observed_at"`
	Status     string `json:"status"` // completed, interrupted or failed
	StopReason string `json:"stop_reason,omitempty"`
	Scenario   string `json:"scenario"`
	Step       string `json:"step"`
	// TTFTP90ThresholdMS is the TTFT p90 a level must stay within; null: none was given,
	// and the sweep reports no capacity.
	TTFTP90ThresholdMS *float64     `json:"ttft_p90_threshold_ms"`
	Levels             []SweepLevel `json:"levels"`
	// CapacityUsers is the highest user count within the threshold; null when no level
	// was, or there is no threshold.
	CapacityUsers  *int    `json:"capacity_users"`
	CapacityReason string  `json:"capacity_reason"`
	Kvbench        Kvbench `json:"kvbench"`
}

// SweepLevel is one user count of a sweep.
type SweepLevel struct {
	Users int `json:"users"`
	// Run is the level's run directory, relative to the sweep's; RunSHA256 its run.json's.
	Run            string      `json:"run"`
	RunSHA256      string      `json:"run_sha256"`
	Status         string      `json:"status"`
	Requests       int         `json:"requests"`
	FailedRequests int         `json:"failed_requests"`
	TTFTMS         Percentiles `json:"time_to_first_output_ms"`
	Tiers          TierShares  `json:"tiers"`
	Preemptions    *float64    `json:"preemptions"`
	CountersValid  bool        `json:"counters_valid"`
	// WithinThreshold: the level completed with no failed request and its TTFT p90 is at
	// most the threshold; null when there is no threshold.
	WithinThreshold *bool `json:"within_threshold"`
}

// SweepLevelOf summarizes a level from its run's conversation section.
func SweepLevelOf(users int, run, sum, status string, cs *ConversationSection, threshold *float64) SweepLevel {
	l := SweepLevel{Users: users, Run: run, RunSHA256: sum, Status: status}
	if cs != nil {
		l.Requests, l.FailedRequests = cs.Requests, cs.FailedRequests
		l.TTFTMS, l.Tiers, l.Preemptions, l.CountersValid = cs.TTFTMS, cs.Tiers, cs.Preemptions, cs.CountersValid
	}
	if threshold != nil {
		ok := cs != nil && status == StatusCompleted && l.FailedRequests == 0 && l.TTFTMS.P90 != nil && *l.TTFTMS.P90 <= *threshold
		l.WithinThreshold = &ok
	}
	return l
}

// Decide sets the sweep's capacity: the highest user count within the threshold. A level
// above it that also passes does not raise it past a failing level below (capacity is where
// the server still keeps up as load grows).
func (s *Sweep) Decide() {
	s.CapacityUsers = nil
	if s.TTFTP90ThresholdMS == nil {
		s.CapacityReason = "no --ttft-p90-ms threshold given: no capacity decided"
		return
	}
	for _, l := range s.Levels {
		if l.WithinThreshold == nil || !*l.WithinThreshold {
			break
		}
		u := l.Users
		s.CapacityUsers = &u
	}
	th := *s.TTFTP90ThresholdMS
	switch {
	case s.CapacityUsers == nil:
		first := s.Levels[0]
		if first.unfinished() {
			s.CapacityReason = fmt.Sprintf("no capacity decided: the lowest level, %d users, %s", first.Users, first.miss(th))
		} else {
			s.CapacityReason = fmt.Sprintf("no capacity: the lowest level, %d users, %s", first.Users, first.miss(th))
		}
	case *s.CapacityUsers == s.Levels[len(s.Levels)-1].Users && s.Status != StatusCompleted:
		s.CapacityReason = fmt.Sprintf("every level that ran kept TTFT p90 within %.0f ms with no failed request: capacity is at least %d users (the sweep stopped before its other levels: %s)", th, *s.CapacityUsers, s.StopReason)
	case *s.CapacityUsers == s.Levels[len(s.Levels)-1].Users:
		s.CapacityReason = fmt.Sprintf("every level kept TTFT p90 within %.0f ms with no failed request: capacity is at least %d users", th, *s.CapacityUsers)
	default:
		next := s.Levels[slices.IndexFunc(s.Levels, func(l SweepLevel) bool { return l.Users == *s.CapacityUsers })+1]
		if next.unfinished() {
			s.CapacityReason = fmt.Sprintf("%d users kept TTFT p90 within %.0f ms with no failed request: capacity is at least %d users; the next level, %d users, %s", *s.CapacityUsers, th, *s.CapacityUsers, next.Users, next.miss(th))
		} else {
			s.CapacityReason = fmt.Sprintf("%d users kept TTFT p90 within %.0f ms with no failed request; the next level, %d users, %s", *s.CapacityUsers, th, next.Users, next.miss(th))
		}
	}
}

// unfinished reports whether the level's run stopped before its step ended (interrupted,
// failed, killed): it says nothing about the server's capacity.
func (l SweepLevel) unfinished() bool { return l.Status != StatusCompleted }

// miss says why a level did not count toward capacity: it did not finish, requests failed,
// no TTFT was measured, or its TTFT p90 was over the threshold.
func (l SweepLevel) miss(threshold float64) string {
	p90 := "no TTFT p90"
	if l.TTFTMS.P90 != nil {
		p90 = fmt.Sprintf("TTFT p90 %.1f ms", *l.TTFTMS.P90)
	}
	switch {
	case l.Status == StatusInterrupted:
		return fmt.Sprintf("was interrupted before it finished (%s over the requests it measured), so it says nothing about capacity", p90)
	case l.unfinished():
		return fmt.Sprintf("did not finish (status %s), so it says nothing about capacity", l.Status)
	case l.FailedRequests > 0:
		return fmt.Sprintf("had %d failed requests of %d (%s)", l.FailedRequests, l.Requests, p90)
	case l.TTFTMS.P90 == nil:
		return "measured no TTFT (no request produced output)"
	case *l.TTFTMS.P90 > threshold:
		return fmt.Sprintf("had TTFT p90 %.1f ms, over the %.0f ms threshold", *l.TTFTMS.P90, threshold)
	}
	return "was within the threshold"
}

// WriteText prints the sweep as a table.
func (s *Sweep) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { s.writeText(w) })
}

// writeText writes what WriteText writes.
func (s *Sweep) writeText(w io.Writer) {
	fmt.Fprintf(w, "sweep %s step %s (%s)\n", s.Scenario, s.Step, s.Status)
	fmt.Fprintf(w, "%6s  %8s  %9s  %9s  %9s  %6s  %6s  %6s  %6s  %s\n", "users", "requests", "p50 ms", "p90 ms", "p99 ms", "gpu", "host", "recomp", "preempt", "within")
	for _, l := range s.Levels {
		within := "-"
		if l.WithinThreshold != nil {
			within = fmt.Sprint(*l.WithinThreshold)
		}
		fmt.Fprintf(w, "%6d  %8s  %9s  %9s  %9s  %6s  %6s  %6s  %6s  %s\n", l.Users,
			fmt.Sprintf("%d/%d", l.Requests-l.FailedRequests, l.Requests),
			units.MS(l.TTFTMS.P50), units.MS(l.TTFTMS.P90), units.MS(l.TTFTMS.P99),
			units.Percent(l.Tiers.GPU), units.Percent(l.Tiers.Host), units.Percent(l.Tiers.Recompute), units.Count(l.Preemptions), within)
	}
	fmt.Fprintf(w, "capacity: %s\n", s.CapacityReason)
}

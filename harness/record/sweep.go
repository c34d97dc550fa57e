package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/units"
)

// SweepSchema is the schema of sweep.json, the record of a capacity sweep.
const SweepSchema = "anvil-serving.kvbench-sweep/v1"

// What a sweep's levels step.
const (
	SweepUsers       = "users"        // a conversation step's users
	SweepRequestRate = "request_rate" // a trace step's request rate, through its time_scale
	// SweepHostTier: a trace step on several endpoints, one host-tier size each, measured
	// against the host-tier model calibrated at one of them.
	SweepHostTier = "host_tier"
)

// Sweep is a capacity sweep (kvbench sweep): one conversation step run at several user
// counts, or one trace step at several request rates (time_scale), each level a run
// directory of its own under the sweep's directory, and the highest load whose TTFT p90
// stayed within the threshold.
type Sweep struct {
	Schema     string `json:"schema"`
	ObservedAt string `json:"observed_at"`
	Status     string `json:"status"` // completed, interrupted or failed
	StopReason string `json:"stop_reason,omitempty"`
	Scenario   string `json:"scenario"`
	Step       string `json:"step"`
	// Load is what the levels step: users (also when absent, as in older records) or
	// request_rate.
	Load string `json:"load,omitempty"`
	// Shard is the part of the trace window each level replayed (--shard; absent: all of
	// it): the capacity is this client's share of the load.
	Shard *TraceShard `json:"shard,omitempty"`
	// TTFTP90ThresholdMS is the TTFT p90 a level must stay within; null: none was given,
	// and the sweep reports no capacity.
	TTFTP90ThresholdMS *float64     `json:"ttft_p90_threshold_ms"`
	Levels             []SweepLevel `json:"levels"`
	// CapacityUsers is the highest user count within the threshold; null when no level
	// was, or there is no threshold.
	CapacityUsers *int `json:"capacity_users"`
	// CapacityTimeScale and CapacityRequestsPerSecond are a request-rate sweep's: the level
	// at the highest rate within the threshold.
	CapacityTimeScale         *float64 `json:"capacity_time_scale,omitempty"`
	CapacityRequestsPerSecond *float64 `json:"capacity_requests_per_second,omitempty"`
	CapacityReason            string   `json:"capacity_reason"`
	// HostTier is a host-tier sweep's calibration and how well it predicted the other
	// levels (absent for the other sweeps).
	HostTier *SweepHostTierFit `json:"host_tier,omitempty"`
	Kvbench  Kvbench           `json:"kvbench"`
}

// SweepHostTierFit is the host-tier policy fitted to one level of a host-tier sweep (trace
// size --calibrate on its run) and what it predicted at every level's size.
type SweepHostTierFit struct {
	// CalibratedFrom is the level's run directory, relative to the sweep's.
	CalibratedFrom string  `json:"calibrated_from"`
	Policy         string  `json:"policy,omitempty"`
	ResidualPoints float64 `json:"residual_points"`
	Fits           bool    `json:"fits"`
	Finding        string  `json:"finding,omitempty"`
	// MaxErrorPoints is the largest |predicted - measured host share| over the other levels,
	// in points; null when no other level measured one.
	MaxErrorPoints *float64 `json:"max_error_points"`
	// Unavailable says why nothing was fitted (the level could not calibrate).
	Unavailable string `json:"unavailable,omitempty"`
}

// SweepLevel is one user count, or one request rate, of a sweep.
type SweepLevel struct {
	Users int `json:"users,omitempty"`
	// TimeScale is a request-rate level's time_scale, and RequestsPerSecond the rate it
	// offers: the window's requests over its trace time x time_scale (null for one request).
	TimeScale         *float64 `json:"time_scale,omitempty"`
	RequestsPerSecond *float64 `json:"requests_per_second,omitempty"`
	// Run is the level's run directory, relative to the sweep's; RunSHA256 its run.json's.
	Run            string      `json:"run"`
	RunSHA256      string      `json:"run_sha256"`
	Status         string      `json:"status"`
	Requests       int         `json:"requests"`
	FailedRequests int         `json:"failed_requests"`
	TTFTMS         Percentiles `json:"time_to_first_output_ms"`
	Tiers          TierShares  `json:"tiers"`
	Preemptions    *float64    `json:"preemptions"`
	// DispatchLagMS is a request-rate level's dispatch lag: a client that fell behind the
	// trace offered less than the rate.
	DispatchLagMS *Percentiles `json:"dispatch_lag_ms,omitempty"`
	// DispatchBehind is set when the level's replay fell behind its trace: the server saw
	// less than the level's rate.
	DispatchBehind *DispatchBehind `json:"dispatch_behind,omitempty"`
	// IdealHostShare is a request-rate level's ideal host share at the server's pool sizes.
	IdealHostShare *float64 `json:"ideal_host_share,omitempty"`
	// Endpoint is a host-tier level's server, HostTokens its host tier (its ideal's) and
	// PredictedHostShare what the calibrated model predicts there.
	Endpoint           string   `json:"endpoint,omitempty"`
	HostTokens         *int64   `json:"host_tokens,omitempty"`
	PredictedHostShare *float64 `json:"predicted_host_share,omitempty"`
	CountersValid      bool     `json:"counters_valid"`
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

// SweepTraceLevelOf summarizes a request-rate level from its run's trace section: rate is
// the rate the level offers (nil when unknown).
func SweepTraceLevelOf(timeScale float64, rate *float64, run, sum, status string, ts *TraceSection, threshold *float64) SweepLevel {
	l := SweepLevel{TimeScale: &timeScale, RequestsPerSecond: rate, Run: run, RunSHA256: sum, Status: status}
	l.fromTrace(ts, threshold)
	return l
}

// SweepHostTierLevelOf summarizes a host-tier level, the trace replayed on endpoint, from
// its run's trace section.
func SweepHostTierLevelOf(endpoint, run, sum, status string, ts *TraceSection, threshold *float64) SweepLevel {
	l := SweepLevel{Endpoint: endpoint, Run: run, RunSHA256: sum, Status: status}
	l.fromTrace(ts, threshold)
	if ts != nil && ts.Ideal != nil {
		h := ts.Ideal.HostTokens
		l.HostTokens = &h
	}
	return l
}

// fromTrace fills a trace level's measurements from its section (nil: none).
func (l *SweepLevel) fromTrace(ts *TraceSection, threshold *float64) {
	if ts != nil {
		l.Requests, l.FailedRequests = ts.Requests, ts.FailedRequests
		l.TTFTMS, l.Tiers, l.Preemptions, l.CountersValid = ts.TTFTMS, ts.Tiers, ts.Preemptions, ts.CountersValid
		lag := ts.DispatchLagMS
		l.DispatchLagMS, l.DispatchBehind = &lag, ts.DispatchBehind
		if ts.Ideal != nil {
			v := ts.Ideal.HostShare
			l.IdealHostShare = &v
		}
	}
	if threshold != nil {
		ok := ts != nil && l.Status == StatusCompleted && l.FailedRequests == 0 && l.TTFTMS.P90 != nil && *l.TTFTMS.P90 <= *threshold
		l.WithinThreshold = &ok
	}
}

// name words the level's load: "16 users", or "4.2 requests/s (time_scale 0.5)".
func (l SweepLevel) name() string {
	if l.Endpoint != "" {
		return l.hostTierName()
	}
	if l.TimeScale == nil {
		return fmt.Sprintf("%d users", l.Users)
	}
	if l.RequestsPerSecond == nil {
		return "time_scale " + units.Exact(*l.TimeScale)
	}
	return fmt.Sprintf("%s requests/s (time_scale %s)", units.Scale(units.PerSecond, *l.RequestsPerSecond).Format(*l.RequestsPerSecond), units.Exact(*l.TimeScale))
}

// hostTierName words a host-tier level: its tier and server.
func (l SweepLevel) hostTierName() string {
	if l.HostTokens == nil {
		return "host tier of unknown size at " + l.Endpoint
	}
	return fmt.Sprintf("host tier of %s tokens at %s", units.Whole(float64(*l.HostTokens)), l.Endpoint)
}

// Key names the level's load so the same level of two sweeps is found: its users, or its
// time_scale.
func (l SweepLevel) Key() string {
	if l.Endpoint != "" {
		if l.HostTokens != nil {
			return fmt.Sprintf("host_tokens=%d", *l.HostTokens)
		}
		return "endpoint=" + l.Endpoint
	}
	if l.TimeScale == nil {
		return fmt.Sprintf("users=%d", l.Users)
	}
	return "time_scale=" + units.Exact(*l.TimeScale)
}

// LoadValue orders levels by load: users, or 1/time_scale (a smaller time_scale offers more).
func (l SweepLevel) LoadValue() float64 {
	if l.HostTokens != nil {
		return float64(*l.HostTokens)
	}
	if l.TimeScale == nil {
		return float64(l.Users)
	}
	return 1 / *l.TimeScale
}

// CapacityLevel is the level at the sweep's capacity; false when there is none.
func (s *Sweep) CapacityLevel() (SweepLevel, bool) {
	i := s.capacityIndex()
	if i < 0 {
		return SweepLevel{}, false
	}
	return s.Levels[i], true
}

// capacityIndex is the last level within the threshold before the first that is not; -1
// when the first is not, or there is no threshold.
func (s *Sweep) capacityIndex() int {
	if s.TTFTP90ThresholdMS == nil {
		return -1
	}
	at := -1
	for i, l := range s.Levels {
		if l.WithinThreshold == nil || !*l.WithinThreshold {
			break
		}
		at = i
	}
	return at
}

// Decide sets the sweep's capacity: the highest load within the threshold. A level above it
// that also passes does not raise it past a failing level below (capacity is where the
// server still keeps up as load grows).
func (s *Sweep) Decide() {
	s.CapacityUsers, s.CapacityTimeScale, s.CapacityRequestsPerSecond = nil, nil, nil
	if s.TTFTP90ThresholdMS == nil {
		s.CapacityReason = "no --ttft-p90-ms threshold given: no capacity decided"
		return
	}
	i := s.capacityIndex()
	if i >= 0 {
		l := s.Levels[i]
		if l.TimeScale != nil {
			s.CapacityTimeScale, s.CapacityRequestsPerSecond = l.TimeScale, l.RequestsPerSecond
		} else {
			u := l.Users
			s.CapacityUsers = &u
		}
	}
	th := *s.TTFTP90ThresholdMS
	thw := units.Exact(th) // the threshold as the user gave it
	last := len(s.Levels) - 1
	switch {
	case i < 0:
		first := s.Levels[0]
		if first.unfinished() {
			s.CapacityReason = fmt.Sprintf("no capacity decided: the lowest level, %s, %s", first.name(), first.miss(th))
		} else {
			s.CapacityReason = fmt.Sprintf("no capacity: the lowest level, %s, %s", first.name(), first.miss(th))
		}
	case i == last && s.Status != StatusCompleted:
		s.CapacityReason = fmt.Sprintf("every level that ran kept TTFT p90 within %s ms with no failed request: capacity is at least %s (the sweep stopped before its other levels: %s)", thw, s.Levels[i].name(), s.StopReason)
	case i == last:
		s.CapacityReason = fmt.Sprintf("every level kept TTFT p90 within %s ms with no failed request: capacity is at least %s", thw, s.Levels[i].name())
	default:
		at, next := s.Levels[i], s.Levels[i+1]
		if next.unfinished() {
			s.CapacityReason = fmt.Sprintf("%s kept TTFT p90 within %s ms with no failed request: capacity is at least %s; the next level, %s, %s", at.name(), thw, at.name(), next.name(), next.miss(th))
		} else {
			s.CapacityReason = fmt.Sprintf("%s kept TTFT p90 within %s ms with no failed request; the next level, %s, %s", at.name(), thw, next.name(), next.miss(th))
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
		p90 = "TTFT p90 " + units.MS(l.TTFTMS.P90) + " ms"
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
		return fmt.Sprintf("had TTFT p90 %s ms, over the %s ms threshold", units.MS(l.TTFTMS.P90), units.Exact(threshold))
	}
	return "was within the threshold"
}

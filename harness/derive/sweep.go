package derive

import (
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// WriteSweep prints the sweep as a table.
func WriteSweep(w io.Writer, s *record.Sweep) error {
	return textout.Write(w, func(w io.Writer) { writeSweep(w, s) })
}

// writeSweep writes what WriteSweep writes.
func writeSweep(w io.Writer, s *record.Sweep) {
	fmt.Fprintf(w, "sweep %s step %s (%s)\n", s.Scenario, s.Step, s.Status)
	if s.Load == record.SweepHostTier {
		writeHostTierSweep(w, s)
		return
	}
	load := "users"
	if s.Load == record.SweepRequestRate {
		load = "req/s"
	}
	var rates []float64
	for _, l := range s.Levels {
		if l.RequestsPerSecond != nil {
			rates = append(rates, *l.RequestsPerSecond)
		}
	}
	rs := units.Scale(units.PerSecond, rates...) // one scaler for the load column
	fmt.Fprintf(w, "%6s  %8s  %9s  %9s  %9s  %6s  %6s  %6s  %6s  %s\n", load, "requests", "p50 ms", "p90 ms", "p99 ms", "gpu", "host", "recomp", "preempt", "within")
	for _, l := range s.Levels {
		within := "-"
		if l.WithinThreshold != nil {
			within = fmt.Sprint(*l.WithinThreshold)
		}
		level := fmt.Sprint(l.Users)
		if l.TimeScale != nil {
			level = "-"
			if l.RequestsPerSecond != nil {
				level = rs.Format(*l.RequestsPerSecond)
			}
		}
		fmt.Fprintf(w, "%6s  %8s  %9s  %9s  %9s  %6s  %6s  %6s  %6s  %s\n", level,
			fmt.Sprintf("%d/%d", l.Requests-l.FailedRequests, l.Requests),
			units.MS(l.TTFTMS.P50), units.MS(l.TTFTMS.P90), units.MS(l.TTFTMS.P99),
			units.Percent(l.Tiers.GPU), units.Percent(l.Tiers.Host), units.Percent(l.Tiers.Recompute), units.Count(l.Preemptions), within)
	}
	fmt.Fprintf(w, "capacity: %s\n", s.CapacityReason)
}

// writeHostTierSweep writes a host-tier sweep: per level its tier, the host share measured
// and the calibrated model's prediction, then the fit.
func writeHostTierSweep(w io.Writer, s *record.Sweep) {
	fmt.Fprintf(w, "%12s  %8s  %9s  %6s  %9s  %9s  %6s  %s\n", "host tokens", "requests", "p90 ms", "gpu", "host", "predicted", "ideal", "endpoint")
	for _, l := range s.Levels {
		host := "-"
		if l.HostTokens != nil {
			host = units.Whole(float64(*l.HostTokens))
		}
		fmt.Fprintf(w, "%12s  %8s  %9s  %6s  %9s  %9s  %6s  %s\n", host, fmt.Sprintf("%d/%d", l.Requests-l.FailedRequests, l.Requests),
			units.MS(l.TTFTMS.P90), units.Percent(l.Tiers.GPU), units.Percent(l.Tiers.Host), units.Percent(l.PredictedHostShare), units.Percent(l.IdealHostShare), l.Endpoint)
	}
	f := s.HostTier
	switch {
	case f == nil:
	case f.Unavailable != "":
		fmt.Fprintf(w, "host-tier model: not calibrated at %s: %s\n", f.CalibratedFrom, f.Unavailable)
	default:
		worst := "no other level measured a host share"
		if f.MaxErrorPoints != nil {
			worst = fmt.Sprintf("the other levels' predictions are within %.2f points of their measurement", *f.MaxErrorPoints)
		}
		fmt.Fprintf(w, "host-tier model: %s calibrated at %s (residual %+.2f points): %s\n  %s\n", f.Policy, f.CalibratedFrom, f.ResidualPoints, worst, f.Finding)
	}
}

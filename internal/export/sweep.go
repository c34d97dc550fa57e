package export

import (
	"fmt"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
)

// SweepFamilies returns a capacity sweep's series sorted by name, each with the labels in
// extra: its capacity (none when it decided none), when it was observed, and per level
// (the level label: users=N or time_scale=X) its TTFT p90, whether it kept within the
// threshold and its tier shares. Bounded by the sweep's levels.
func SweepFamilies(sw *record.Sweep, extra []Label) ([]*dto.MetricFamily, error) {
	b := &builder{fams: map[string]*dto.MetricFamily{}, extra: extra}
	step := []string{"step", sw.Step}
	if t, err := time.Parse(time.RFC3339, sw.ObservedAt); err == nil {
		b.gauge("kvbench_sweep_timestamp_seconds", ptr(float64(t.Unix())), step...)
	}
	if u := sw.CapacityUsers; u != nil {
		b.gauge("kvbench_sweep_capacity_users", ptr(float64(*u)), step...)
	}
	b.gauge("kvbench_sweep_capacity_requests_per_second", sw.CapacityRequestsPerSecond, step...)
	for _, l := range sw.Levels {
		level := append(append([]string{}, step...), "level", l.Key())
		b.gauge("kvbench_sweep_level_time_to_first_output_p90_seconds", seconds(l.TTFTMS.P90), level...)
		if w := l.WithinThreshold; w != nil {
			b.gauge("kvbench_sweep_level_within_threshold", ptr(boolValue(*w)), level...)
		}
		b.gauge("kvbench_sweep_level_failed_requests", ptr(float64(l.FailedRequests)), level...)
		b.tiers(l.Tiers.GPU, l.Tiers.Host, l.Tiers.Recompute, "measured", level)
		if h := l.IdealHostShare; h != nil {
			b.gauge("kvbench_tier_share_ratio", h, append(append([]string{}, level...), "tier", "host", "kind", "ideal")...)
		}
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.sorted(), nil
}

// SweepIdentity labels a sweep's series with its scenario, and its shard (K/N) where its
// levels replayed one, so N shards' sweeps do not replace each other.
func SweepIdentity(sw *record.Sweep) []Label {
	out := []Label{{"scenario", sw.Scenario}}
	if sh := sw.Shard; sh != nil {
		out = append(out, Label{"shard", fmt.Sprintf("%d/%d", sh.Index, sh.Count)})
	}
	return out
}

// Sweep is a loaded sweep directory.
type Sweep struct {
	Dir    string
	Record *record.Sweep
}

// LoadDirs loads each directory as a run, or as a sweep where it holds one (sweep.json):
// what kvbench export reads. An unreadable one is bad input.
func LoadDirs(dirs []string) ([]*runs.Run, []Sweep, error) {
	var rs []*runs.Run
	var sweeps []Sweep
	for _, d := range dirs {
		if runs.IsSweep(d) {
			sw, err := runs.LoadSweep(d)
			if err != nil {
				return nil, nil, cli.UsageError(err)
			}
			sweeps = append(sweeps, Sweep{Dir: d, Record: sw})
			continue
		}
		r, err := runs.Load(d)
		if err != nil {
			return nil, nil, cli.UsageError(err)
		}
		rs = append(rs, r)
	}
	return rs, sweeps, nil
}

// sweepSets returns each sweep's families, labelled with its identity and extra.
func sweepSets(sweeps []Sweep, extra []Label) ([][]*dto.MetricFamily, error) {
	var sets [][]*dto.MetricFamily
	for _, s := range sweeps {
		fams, err := SweepFamilies(s.Record, append(SweepIdentity(s.Record), extra...))
		if err != nil {
			return nil, fmt.Errorf("%s: %w", s.Dir, err)
		}
		sets = append(sets, fams)
	}
	return sets, nil
}

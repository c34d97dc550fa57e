package metrics

import (
	"fmt"
	"maps"
	"slices"
	"strconv"
	"time"
)

// CounterDelta is one counter's change between two snapshots.
type CounterDelta struct {
	Before, After Reading
	Delta         float64 // After - Before; meaningful only when Present
	Present       bool    // both sides present; an absent side never reads as 0
	Decreased     bool    // After < Before: the server restarted, the delta is invalid
	Reason        string  // why Decreased, naming the counter and both values
}

// Delta is the change of every counter between two snapshots of one target.
type Delta struct {
	BeforeAt time.Time                `json:"before_at,omitzero"`
	AfterAt  time.Time                `json:"after_at,omitzero"`
	Counters map[Counter]CounterDelta `json:"counters"`
	// Valid is false when any counter went down: counters reset on a server restart, so no
	// delta of this pair can be trusted.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
}

// Diff computes after - before for every counter in either snapshot. Gauges are not
// differenced: they are sampled, not accumulated.
func Diff(before, after Snapshot) Delta {
	d := Delta{
		BeforeAt: before.TakenAt,
		AfterAt:  after.TakenAt,
		Counters: make(map[Counter]CounterDelta, len(after.Counters)),
		Valid:    true,
	}
	union := maps.Clone(after.Counters)
	maps.Copy(union, before.Counters)
	for _, c := range slices.Sorted(maps.Keys(union)) {
		cd := CounterDelta{Before: before.Counters[c], After: after.Counters[c]}
		if cd.Before.Present && cd.After.Present {
			cd.Present = true
			cd.Delta = cd.After.Value - cd.Before.Value
			if cd.After.Value < cd.Before.Value {
				cd.Decreased = true
				cd.Reason = fmt.Sprintf("%s went down from %s to %s (%s): the server restarted between the scrapes",
					c, formatValue(cd.Before.Value), formatValue(cd.After.Value), cd.After.Source)
				d.Valid = false
				d.InvalidReasons = append(d.InvalidReasons, cd.Reason)
			}
		}
		d.Counters[c] = cd
	}
	return d
}

// Value returns c's delta and whether it can be used: present on both sides and not decreased.
func (d Delta) Value(c Counter) (float64, bool) {
	cd, ok := d.Counters[c]
	if !ok || !cd.Present || cd.Decreased {
		return 0, false
	}
	return cd.Delta, true
}

func formatValue(v float64) string { return strconv.FormatFloat(v, 'f', -1, 64) }

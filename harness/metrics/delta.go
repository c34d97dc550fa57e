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
	Decreased     bool    // After < Before (a restart), or otherwise unusable: see Reason
	// Reason says why the delta cannot be used: why Decreased, naming the counter and both
	// values, or which side read NaN or Inf.
	Reason string
}

// Unreadable is why c's delta cannot be used although the server serves c (a side read NaN
// or Inf); "" otherwise.
func (d Delta) Unreadable(c Counter) string {
	cd := d.Counters[c]
	if cd.Before.Unreadable == "" && cd.After.Unreadable == "" {
		return ""
	}
	return cd.Reason
}

// Invalidity is the kind of reason a delta cannot be trusted.
type Invalidity string

// Kinds of invalidity; each gets its own wording where a verdict names it.
const (
	InvalidReset        Invalidity = "reset"         // a counter went down: the server restarted
	InvalidMissing      Invalidity = "missing"       // a counter the delta needs was not read
	InvalidScrapeFailed Invalidity = "scrape_failed" // a scrape the delta needs failed
	InvalidContaminated Invalidity = "contaminated"  // other clients' requests moved the counters
)

// Delta is the change of every counter between two snapshots of one target.
type Delta struct {
	BeforeAt time.Time                `json:"before_at,omitzero"`
	AfterAt  time.Time                `json:"after_at,omitzero"`
	Counters map[Counter]CounterDelta `json:"counters"`
	// Valid is false when any reason below holds (a counter went down on a restart, a scrape
	// failed...): no delta of this window can then be trusted.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	// InvalidKinds[i] is the kind of InvalidReasons[i].
	InvalidKinds []Invalidity `json:"invalid_kinds,omitempty"`
	// Contaminated: the counters moved by more than the measured request(s) account for, so
	// other clients' requests ran inside the window (see Isolation).
	Contaminated bool `json:"contaminated,omitempty"`
	// Isolation is the check that the window saw only the measured request: "clean: ...",
	// "contaminated: ..." or "unchecked: ..." with what was compared; "" when not checked.
	Isolation string `json:"isolation,omitempty"`
}

// Contaminate marks d as moved by other clients' requests.
func (d *Delta) Contaminate(reason string) {
	d.Contaminated = true
	d.Isolation = "contaminated: " + reason
	d.Invalidate(InvalidContaminated, reason)
}

// Invalidate marks d invalid for reason.
func (d *Delta) Invalidate(kind Invalidity, reason string) {
	d.Valid = false
	d.InvalidReasons = append(d.InvalidReasons, reason)
	d.InvalidKinds = append(d.InvalidKinds, kind)
}

// InvalidateAll marks d invalid for reason and every counter's change unusable: the scrapes
// it spans miss part of what it claims to cover, so no change in it can be trusted.
func (d *Delta) InvalidateAll(kind Invalidity, reason string) {
	d.Invalidate(kind, reason)
	for c, cd := range d.Counters {
		if cd.Present && !cd.Decreased {
			cd.Decreased, cd.Reason = true, reason
			d.Counters[c] = cd
		}
	}
}

// FirstInvalid is the first reason d is invalid and its kind; "" when d is valid.
func (d Delta) FirstInvalid() (Invalidity, string) {
	if d.Valid || len(d.InvalidReasons) == 0 {
		return "", ""
	}
	kind := InvalidReset // records written before kinds existed knew only restarts
	if len(d.InvalidKinds) > 0 {
		kind = d.InvalidKinds[0]
	}
	return kind, d.InvalidReasons[0]
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
		switch {
		case cd.Before.Unreadable != "":
			cd.Reason = fmt.Sprintf("%s read %s before (%s)", c, cd.Before.Unreadable, cd.Before.Source)
		case cd.After.Unreadable != "":
			cd.Reason = fmt.Sprintf("%s read %s after (%s)", c, cd.After.Unreadable, cd.After.Source)
		}
		if cd.Before.Present && cd.After.Present {
			cd.Present = true
			cd.Delta = cd.After.Value - cd.Before.Value
			if cd.After.Value < cd.Before.Value {
				cd.Decreased = true
				cd.Reason = fmt.Sprintf("%s went down from %s to %s (%s): the server restarted between the scrapes",
					c, formatValue(cd.Before.Value), formatValue(cd.After.Value), cd.After.Source)
				d.Invalidate(InvalidReset, cd.Reason)
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

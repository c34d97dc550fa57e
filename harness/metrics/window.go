package metrics

import (
	"fmt"
	"maps"
	"slices"
)

// Window is two scrapes around a request or step and their difference: the evidence one
// measurement rests on.
type Window struct {
	Before Snapshot `json:"before"`
	After  Snapshot `json:"after"`
	Delta  Delta    `json:"delta"`
}

// NewWindow diffs two snapshots.
func NewWindow(before, after Snapshot) *Window {
	return &Window{Before: before, After: after, Delta: Diff(before, after)}
}

// BeforeValue is c's reading before, nil when the server did not expose it.
func (w *Window) BeforeValue(c Counter) *float64 { return w.Before.Counters[c].Ptr() }

// AfterValue is c's reading after, nil when the server did not expose it.
func (w *Window) AfterValue(c Counter) *float64 { return w.After.Counters[c].Ptr() }

// DeltaValue is c's change, nil when absent on either side or invalid.
func (w *Window) DeltaValue(c Counter) *float64 { return w.Delta.Ptr(c) }

// Ptr is the reading as a pointer, nil when absent: absent is never 0.
func (r Reading) Ptr() *float64 {
	if !r.Present {
		return nil
	}
	v := r.Value
	return &v
}

// Ptr is c's usable delta as a pointer, nil when it cannot be used (see Value).
func (d Delta) Ptr(c Counter) *float64 {
	v, ok := d.Value(c)
	if !ok {
		return nil
	}
	return &v
}

// PerToken divides one counter's delta by another's, e.g. load bytes per external hit; nil
// when either is absent or no token moved.
func (d Delta) PerToken(bytes, tokens Counter) *float64 {
	b, ok1 := d.Value(bytes)
	t, ok2 := d.Value(tokens)
	if !ok1 || !ok2 || t <= 0 {
		return nil
	}
	v := b / t
	return &v
}

// ComputedTokens is the prompt tokens a delta computed (not served from any cache): the
// local_compute source where the server splits by source, else queries minus both hits.
func (d Delta) ComputedTokens() (float64, bool) {
	if v, ok := d.Value(PromptTokensLocalCompute); ok {
		return v, true
	}
	q, ok1 := d.Value(GPUPrefixQueries)
	g, ok2 := d.Value(GPUPrefixHits)
	if !ok1 || !ok2 {
		return 0, false
	}
	e, _ := d.Value(ExternalPrefixHits)
	return q - g - e, true
}

// Join spans windows taken one after another (the requests of a step): from the first's
// before to the last's after. Counters reset on a restart and may grow past their old value
// again, so the endpoints alone cannot show a restart: the joined delta is valid only when
// every window is valid and every scrape, also from one window's after to the next one's
// before, is monotone and present for each counter present at both ends. names[i] names
// window i in the reasons.
func Join(names []string, ws []*Window) *Window {
	if len(ws) == 0 {
		return nil
	}
	out := NewWindow(ws[0].Before, ws[len(ws)-1].After)
	for i, w := range ws {
		out.Delta.Contaminated = out.Delta.Contaminated || w.Delta.Contaminated
		for j, reason := range w.Delta.InvalidReasons {
			kind := InvalidReset
			if j < len(w.Delta.InvalidKinds) {
				kind = w.Delta.InvalidKinds[j]
			}
			out.Delta.Invalidate(kind, names[i]+": "+reason)
		}
	}
	for _, c := range slices.Sorted(maps.Keys(out.Delta.Counters)) {
		cd := out.Delta.Counters[c]
		if !cd.Present {
			continue
		}
		for i, w := range ws {
			switch r := w.Delta.Counters[c]; {
			case r.Decreased: // already among the reasons
				cd.Decreased, cd.Reason = true, names[i]+": "+r.Reason
			case !r.Present:
				cd.Decreased = true // unusable: a restart could hide in the unread scrape
				cd.Reason = fmt.Sprintf("%s was not read on both sides of %s", c, names[i])
				out.Delta.Invalidate(InvalidMissing, cd.Reason)
			}
			if i == 0 {
				continue
			}
			prev, next := ws[i-1].After.Counters[c], w.Before.Counters[c]
			if prev.Present && next.Present && next.Value < prev.Value {
				cd.Decreased = true
				cd.Reason = fmt.Sprintf("%s went down from %s after %s to %s before %s (%s): the server restarted between them",
					c, formatValue(prev.Value), names[i-1], formatValue(next.Value), names[i], next.Source)
				out.Delta.Invalidate(InvalidReset, cd.Reason)
			}
		}
		out.Delta.Counters[c] = cd
	}
	return out
}

package derive

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// NewCounters is the change from one snapshot to the next, for every counter in either.
// Gauges are not differenced: they are sampled, not accumulated.
func NewCounters(before, after metrics.Snapshot) *record.Counters {
	c := &record.Counters{BeforeAt: before.TakenAt, AfterAt: after.TakenAt, Values: map[metrics.Counter]record.CounterChange{}, Valid: true}
	union := maps.Clone(after.Counters)
	maps.Copy(union, before.Counters)
	for _, k := range slices.Sorted(maps.Keys(union)) {
		b, a := before.Counters[k], after.Counters[k]
		cc := record.CounterChange{Before: b.Ptr(), After: a.Ptr(), Source: a.Source, Resolution: max(b.Resolution, a.Resolution), Note: joinNotes(b.Note, a.Note)}
		if b.Source != a.Source {
			cc.SourceBefore = b.Source
		}
		switch {
		case b.Unreadable != "":
			cc.Unreadable, cc.Reason = true, fmt.Sprintf("%s read %s before (%s)", k, b.Unreadable, b.Source)
		case a.Unreadable != "":
			cc.Unreadable, cc.Reason = true, fmt.Sprintf("%s read %s after (%s)", k, a.Unreadable, a.Source)
		case cc.Present() && a.Value < b.Value:
			cc.Decreased = true
			cc.Reason = fmt.Sprintf("%s went down from %s to %s (%s): the server restarted between the scrapes", k, units.Exact(b.Value), units.Exact(a.Value), a.Source)
			c.Invalidate(metrics.InvalidReset, cc.Reason)
		}
		c.Values[k] = cc
	}
	if why := restarted(before, after); why != "" {
		c.Invalidate(metrics.InvalidReset, why)
	}
	c.Unattributed = unattributedChanges(before.Unattributed, after.Unattributed)
	return c
}

// restarted says why the server's process start time shows a restart between two
// snapshots ("" when it does not, or either side did not expose it): counters that regrew
// past their old values hide a restart from the monotonicity check.
func restarted(before, after metrics.Snapshot) string {
	b, a := before.Gauges[metrics.ProcessStart], after.Gauges[metrics.ProcessStart]
	if !b.Present || !a.Present || a.Value == b.Value {
		return ""
	}
	return fmt.Sprintf("the server's process start time moved from %s to %s (%s): the server restarted between the scrapes",
		units.Exact(b.Value), units.Exact(a.Value), a.Source)
}

// joinNotes is the notes of both sides of a span, each once.
func joinNotes(before, after string) string {
	if before == "" || before == after {
		return after
	}
	if after == "" {
		return before
	}
	return "before: " + before + "; after: " + after
}

// unattributedChanges pairs the groups under unknown label values of two snapshots.
func unattributedChanges(before, after []metrics.Unattributed) []record.Unattributed {
	var out []record.Unattributed
	find := func(key string) int {
		return slices.IndexFunc(out, func(u record.Unattributed) bool { return u.Family+"\xff"+u.Label+"\xff"+u.Value == key })
	}
	for i, list := range [][]metrics.Unattributed{before, after} {
		for _, u := range list {
			j := find(u.Key())
			if j < 0 {
				out = append(out, record.Unattributed{Family: u.Family, Label: u.Label, Value: u.Value, Unit: u.Unit, Model: u.Model})
				j = len(out) - 1
			}
			v := u.Amount
			if i == 0 {
				out[j].Before = &v
			} else {
				out[j].After = &v
			}
		}
	}
	for j := range out {
		// A series missing from the scrape before was created after it, at 0: what it reads
		// after moved within the span.
		if b, a := out[j].Before, out[j].After; a != nil {
			d := *a
			if b != nil {
				d -= *b
			}
			out[j].Delta = &d
		}
	}
	return out
}

// joinUnattributed spans the unknown-value groups of consecutive spans: the first's before
// to the last's after.
func joinUnattributed(first, last *record.Counters) []record.Unattributed {
	var before, after []metrics.Unattributed
	for _, u := range first.Unattributed {
		if u.Before != nil {
			before = append(before, metrics.Unattributed{Family: u.Family, Label: u.Label, Value: u.Value, Amount: *u.Before, Unit: u.Unit, Model: u.Model})
		}
	}
	for _, u := range last.Unattributed {
		if u.After != nil {
			after = append(after, metrics.Unattributed{Family: u.Family, Label: u.Label, Value: u.Value, Amount: *u.After, Unit: u.Unit, Model: u.Model})
		}
	}
	return unattributedChanges(before, after)
}

// Join spans consecutive spans (the requests of a step, the steps of a run): from the
// first's before to the last's after. Counters reset on a restart and may grow past their
// old value again, so the endpoints alone cannot show a restart: the joined change is
// usable only when every span is valid and every scrape, also from one span's after to the
// next one's before, is monotone and read for each counter read at both ends. names[i]
// names span i in the reasons. Join of no spans is nil.
func Join(names []string, spans []*record.Counters) *record.Counters {
	if len(spans) == 0 {
		return nil
	}
	first, last := spans[0], spans[len(spans)-1]
	out := &record.Counters{BeforeAt: first.BeforeAt, AfterAt: last.AfterAt, Values: map[metrics.Counter]record.CounterChange{}, Valid: true}
	for i, s := range spans {
		out.Contaminated = out.Contaminated || s.Contaminated
		for j, reason := range s.InvalidReasons {
			kind := metrics.InvalidReset
			if j < len(s.InvalidKinds) {
				kind = s.InvalidKinds[j]
			}
			out.Invalidate(kind, names[i]+": "+reason)
		}
	}
	union := maps.Clone(last.Values)
	maps.Copy(union, first.Values)
	for _, k := range slices.Sorted(maps.Keys(union)) {
		b, a := first.Values[k], last.Values[k]
		cc := record.CounterChange{Before: b.Before, After: a.After, Source: a.Source, Resolution: max(b.Resolution, a.Resolution), Note: joinNotes(b.Note, a.Note)}
		if src := b.BeforeSource(); src != cc.Source {
			cc.SourceBefore = src
		}
		if b.Unreadable && b.Before == nil {
			cc.Unreadable, cc.Reason = true, b.Reason
		} else if a.Unreadable && a.After == nil {
			cc.Unreadable, cc.Reason = true, a.Reason
		}
		if cc.Present() {
			joinChecks(out, k, &cc, names, spans)
		}
		out.Values[k] = cc
	}
	out.Unattributed = joinUnattributed(first, last)
	return out
}

// joinChecks marks cc unusable when a span or the gap between two spans could hide a
// restart.
func joinChecks(out *record.Counters, k metrics.Counter, cc *record.CounterChange, names []string, spans []*record.Counters) {
	for i, s := range spans {
		switch r := s.Values[k]; {
		case r.Decreased: // already among the reasons
			cc.Decreased, cc.Reason = true, names[i]+": "+r.Reason
		case !r.Present():
			cc.Decreased = true // unusable: a restart could hide in the unread scrape
			cc.Reason = fmt.Sprintf("%s was not read on both sides of %s", k, names[i])
			out.Invalidate(metrics.InvalidMissing, cc.Reason)
		}
		if i == 0 {
			continue
		}
		prev, next := spans[i-1].Values[k].After, s.Values[k].Before
		if prev != nil && next != nil && *next < *prev {
			cc.Decreased = true
			cc.Reason = fmt.Sprintf("%s went down from %s after %s to %s before %s (%s): the server restarted between them",
				k, units.Exact(*prev), names[i-1], units.Exact(*next), names[i], s.Values[k].Source)
			out.Invalidate(metrics.InvalidReset, cc.Reason)
		}
	}
}

// ComputedTokens is the prompt tokens span c computed (not served from any cache): the
// local_compute source where the server splits by source, else queries minus both hits.
func ComputedTokens(c *record.Counters) (float64, bool) {
	if v, ok := c.Value(metrics.PromptTokensLocalCompute); ok {
		return v, true
	}
	q, ok1 := c.Value(metrics.GPUPrefixQueries)
	g, ok2 := c.Value(metrics.GPUPrefixHits)
	if !ok1 || !ok2 {
		return 0, false
	}
	e, _ := c.Value(metrics.ExternalPrefixHits)
	return q - g - e, true
}

// StepCounters is a step's change of the counters between the scrapes around it, or why
// there is none: the scrape before or after the step that failed. reset is why a counter
// went down during the step as a scraper between them saw it ("" when none did, or nothing
// scraped between): then no change over the step can be trusted.
func StepCounters(before, after metrics.Snapshot, errBefore, errAfter error, reset string) (*record.Counters, string) {
	var why []string
	if errBefore != nil {
		why = append(why, "before the step: "+errBefore.Error())
	}
	if errAfter != nil {
		why = append(why, "after the step: "+errAfter.Error())
	}
	if len(why) > 0 {
		return nil, strings.Join(why, "; ")
	}
	c := NewCounters(before, after)
	if reset != "" {
		c.InvalidateAll(metrics.InvalidReset, reset)
	}
	return c, ""
}

package derive

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// Step is a step as every reader sees it: its artifact and what is derived from it. Assemble
// builds it the one way there is, whether the step just ended, was read from its file, or
// was rebuilt from its journal after a crash.
type Step struct {
	record.StepArtifact
	// Span is the counters over the whole step: the step's own scrapes when its requests
	// overlapped, else its isolated requests' spans joined (Join), so a counter reset between
	// two requests shows. Nil when nothing was read, and SpanError says why.
	Span      *record.Counters
	SpanError string
	// Sampled are the step's gauge readings: its own when its requests overlapped, else its
	// requests' merged.
	Sampled record.Samples
}

// Assemble derives a step's span and samples from its artifact.
func Assemble(a record.StepArtifact) Step {
	for _, q := range a.Requests {
		if q.Verdict != nil && q.Verdict.FromV1 {
			upgradeV1(q.Verdict)
		}
	}
	s := Step{StepArtifact: a}
	if a.DeltaScope == record.ScopeStep {
		s.Span, s.SpanError = a.Counters, a.CountersError
		if s.Span == nil && s.SpanError == "" {
			s.SpanError = "the step's closing scrape was never taken (the run ended during the step)"
		}
		if why := undercounted(s.Span, a.Requests); why != "" {
			s.Span = cloneCounters(s.Span) // the artifact keeps what was read
			s.Span.InvalidateAll(metrics.InvalidReset, why)
		}
		s.Sampled.Merge(a.Samples)
		return s
	}
	var names, unread []string
	var spans []*record.Counters
	for _, q := range a.Requests {
		s.Sampled.Merge(q.Samples)
		name := fmt.Sprintf("request %d", q.IndexInStep)
		switch {
		case q.Counters != nil:
			names, spans = append(names, name), append(spans, q.Counters)
		case q.CountersError != "":
			unread = append(unread, name+": "+q.CountersError)
		default:
			unread = append(unread, name+": no counters were recorded")
		}
	}
	// The step's change is only as good as every scrape in it.
	s.Span = Join(names, spans)
	if s.Span != nil {
		for _, u := range unread {
			s.Span.InvalidateAll(metrics.InvalidScrapeFailed, "counters not read around "+u)
		}
	} else if len(unread) > 0 {
		s.SpanError = "no request's counters were read: " + strings.Join(unread, "; ")
	}
	return s
}

// undercounted says why span c, over overlapping requests, cannot be the whole step's: its
// prompt-token counter grew by clearly less than the requests' usage sums to, as when the
// server restarted during the step and its counters grew again from 0 (no scrape need fall
// across the restart to see it). Counters may lag a request's answer, so up to the larger of
// a tenth of the usage and the largest prompt may be missing. "" when it agrees or nothing
// says.
func undercounted(c *record.Counters, reqs []record.Request) string {
	if c == nil {
		return ""
	}
	// The largest count read: an engine whose prompt-token counter leaves out cached tokens
	// still counts them among its prefix-cache queries, and a restart lowers them all.
	counted, ok := c.Value(metrics.PromptTokens)
	source := c.Values[metrics.PromptTokens].Source
	if t := SplitTiers(c); t.PromptTokens != nil && (!ok || *t.PromptTokens > counted) {
		counted, ok, source = *t.PromptTokens, true, c.Values[metrics.GPUPrefixQueries].Source
		if t.Source == record.TierBySource {
			source = "prompt tokens by source"
		}
	}
	if !ok {
		return ""
	}
	usage, largest := 0.0, 0.0
	for _, q := range reqs {
		if r := q.Result; !r.Failed() && r.PromptTokens != nil {
			usage += float64(*r.PromptTokens)
			largest = max(largest, float64(*r.PromptTokens))
		}
	}
	if counted >= usage-max(0.1*usage, largest) {
		return ""
	}
	return fmt.Sprintf("the server's counters (%s) rose by %s prompt tokens over the step while its requests' usage sums to %s: they missed part of the step (the server restarted during it, or a replica that served it was not scraped)",
		source, units.Whole(counted), units.Whole(usage))
}

// cloneCounters is a copy of c that can be invalidated without changing c.
func cloneCounters(c *record.Counters) *record.Counters {
	out := *c
	out.Values = maps.Clone(c.Values)
	out.InvalidReasons, out.InvalidKinds = slices.Clone(c.InvalidReasons), slices.Clone(c.InvalidKinds)
	return &out
}

// SpanOf joins the spans of steps (one repetition's, in order): the run's change from the
// first step's first scrape to the last one's last, valid only when every scrape in between
// is, and no step in between went unread; nil when no step read counters.
func SpanOf(steps []Step) *record.Counters {
	var names []string
	var spans []*record.Counters
	var unread []string // unread steps since the last read one
	var between []string
	for _, st := range steps {
		switch {
		case st.Span != nil:
			if len(spans) > 0 {
				between = append(between, unread...)
			}
			unread = nil
			names, spans = append(names, "step "+st.Step), append(spans, st.Span)
		case st.SpanError != "":
			unread = append(unread, "step "+st.Step+" ("+st.SpanError+")")
		}
	}
	out := Join(names, spans)
	for _, u := range between {
		out.InvalidateAll(metrics.InvalidScrapeFailed, "counters not read during "+u)
	}
	return out
}

// SpanValidity is whether the step's counters can be trusted and, if not, why: the span's
// own reasons, or why no span was read.
func (st *Step) SpanValidity() (bool, []string) {
	switch {
	case st.SpanError != "" && st.Span != nil:
		return false, append(slices.Clip(st.Span.InvalidReasons), "counters not read: "+st.SpanError)
	case st.SpanError != "":
		return false, []string{"counters not read: " + st.SpanError}
	case st.Span != nil:
		return st.Span.Valid, st.Span.InvalidReasons
	}
	return false, nil
}

// upgradeV1 words a v1 verdict as v1 did, from the capacity math its step kept (the record
// put it on the verdict): the sentences are verdict's and capacity's.
func upgradeV1(v *record.Decision) {
	if v.Slot != nil {
		v.DecidedBy = verdict.BySlot // v1 kept a slot attribution only for slot verdicts
	}
	var a *capacity.Assessment
	if v.Capacity != nil {
		a = &capacity.Assessment{Capacity: *v.Capacity}
	}
	d := verdict.Decision{Decision: record.Decision{Verdict: v.Verdict, Reason: v.Reason, DecidedBy: v.DecidedBy, Diagnosis: v.Diagnosis}}
	v.Interpretation = d.Interpret(a)
	v.FromV1 = false
}

package derive

import (
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// traceStepOf is a trace step of n 1,000-token requests, each with usage's cached tokens,
// whose trace an unbounded cache could serve at most maxHit of; span is its counters.
func traceStepOf(n, cached int, maxHit float64, span *record.Counters) Step {
	a := isolated("replay")
	a.Kind, a.DeltaScope, a.Counters = record.KindTrace, record.ScopeStep, span
	a.Trace = &record.TraceReplay{Ideal: &record.IdealTiers{BlockTokens: 16, MaxHitRate: maxHit}}
	for k := range n {
		q := coldRequest(1000, cached)
		q.Step, q.IndexInStep = "replay", k
		a.Requests = append(a.Requests, q)
	}
	return Assemble(a)
}

// queriesHits is a valid span in which the GPU prefix cache was asked for queries tokens and
// hit hits of them.
func queriesHits(queries, hits float64) *record.Counters {
	return span(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0},
		map[metrics.Counter]float64{metrics.GPUPrefixQueries: queries, metrics.GPUPrefixHits: hits})
}

// TestWarmTraceSteps: a trace step whose hits exceed the most any cache could serve of its
// trace (a second replay against the same server: 97.2% where the ideal's max is 46.5%) is
// warm, by its counters or, where they are not valid, its requests' usage; hits within the
// trace's own reuse and a block of rounding per request are not.
func TestWarmTraceSteps(t *testing.T) {
	reset := queriesHits(10000, 9720)
	reset.Invalidate(metrics.InvalidReset, "restarted")
	cases := []struct {
		name string
		step Step
		want string // part of the reason; "" when cold
	}{
		{"warm by the step's hits", traceStepOf(10, 0, 0.465, queriesHits(10000, 9720)),
			"step replay replays a trace of which any cache could serve at most 46.50%, yet its 10 requests came back 97.20% cached (9720 of 10000 prompt tokens, 4910 beyond the most the trace itself could give; prefix-cache hits over the step)"},
		{"cold: the trace's own reuse", traceStepOf(10, 0, 0.465, queriesHits(10000, 4650)), ""},
		{"cold: the trace's reuse and a block per request", traceStepOf(10, 0, 0.465, queriesHits(10000, 4800)), ""},
		{"warm by usage when the counters are not valid", traceStepOf(10, 972, 0.465, reset), "came back 97.20% cached (9720 of 10000 prompt tokens, 4910 beyond the most the trace itself could give; usage's cached tokens)"},
		{"cold by usage", traceStepOf(10, 465, 0.465, nil), ""},
		{"no evidence", traceStepOf(10, -1, 0.465, nil), ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := WarmSteps([]Step{c.step}, Prompts{BlockSize: 16})
			switch {
			case c.want == "" && len(got) > 0:
				t.Errorf("cold step found warm: %s", got[0].Reason)
			case c.want != "" && (got[0] == nil || !strings.Contains(got[0].Reason, c.want)):
				t.Errorf("got %+v, want %q", got[0], c.want)
			}
		})
	}
	noIdeal := traceStepOf(10, 972, 0.465, nil)
	noIdeal.Trace.Ideal = nil
	if got := WarmSteps([]Step{noIdeal}, Prompts{BlockSize: 16}); len(got) > 0 {
		t.Errorf("without an ideal nothing bounds the hits: %+v", got[0])
	}
}

// TestDeriveMarksWarmTrace: the record's trace section carries the finding, and WarmFindings
// (what compare refuses) names it.
func TestDeriveMarksWarmTrace(t *testing.T) {
	sc := &scenarios.Scenario{Name: "trace", Steps: []scenarios.Step{{ID: "replay"}}}
	r := NewRun(RunInfo{Scenario: sc, ObservedAt: time.Unix(0, 0), Status: record.StatusCompleted, Cache: record.Cache{BlockSize: 16}})
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0}, Steps: []Step{traceStepOf(10, 0, 0.465, queriesHits(10000, 9720))}}})
	tr := r.Sections[0].Trace
	if tr == nil || tr.WarmCaches == nil || tr.WarmCaches.Requests != 10 || tr.WarmCaches.By != "prefix-cache hits over the step" {
		t.Fatalf("trace section %+v", tr)
	}
	if f := r.WarmFindings(); len(f) != 1 || !strings.HasPrefix(f[0], "warm caches: step replay replays a trace") {
		t.Errorf("findings %q", f)
	}
}

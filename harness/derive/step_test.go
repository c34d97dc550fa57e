package derive

import (
	"encoding/json"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// span is an isolated request's counters from before to after (store bytes, GPU hits).
func span(before, after map[metrics.Counter]float64) *record.Counters {
	return NewCounters(snap(before), snap(after))
}

// TestAssembleJoinsRequests: an isolated step's span runs from its first request's before to
// its last one's after, and a counter reset hidden between two of its requests makes it
// invalid, as it does for the same requests rebuilt from a journal (Assemble is the one way).
func TestAssembleJoinsRequests(t *testing.T) {
	a := isolated("seq",
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 1000}), Samples: &record.Samples{Count: 1, PeakKVUsage: f(0.4)}},
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 1000}, map[metrics.Counter]float64{metrics.StoreBytes: 2500}), Samples: &record.Samples{Count: 2, PeakKVUsage: f(0.7)}},
	)
	s := Assemble(a)
	if s.Span == nil || !s.Span.Valid || *s.Span.Delta(metrics.StoreBytes) != 2500 || s.SpanError != "" {
		t.Fatalf("span %+v error %q", s.Span, s.SpanError)
	}
	if s.Sampled.Count != 3 || *s.Sampled.PeakKVUsage != 0.7 {
		t.Fatalf("samples %+v", s.Sampled)
	}
	// The server restarted between the requests: 1000 -> 10, then growth past 2500.
	reset := isolated("seq",
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 1000})},
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 10}, map[metrics.Counter]float64{metrics.StoreBytes: 5000})},
	)
	for _, name := range []string{"step file", "journal"} {
		art := reset
		if name == "journal" {
			art.Interrupted = true // as runs rebuilds it
		}
		s := Assemble(art)
		if s.Span.Valid || s.Span.Delta(metrics.StoreBytes) != nil || !strings.Contains(s.Span.InvalidReasons[0], "went down from 1000 after request 0 to 10 before request 1") {
			t.Fatalf("%s: a reset between requests passed: %+v", name, s.Span)
		}
	}
}

// TestAssembleUnreadRequest: a request whose scrape failed makes every change of its step
// unusable; with no request read at all there is no span and the error says why.
func TestAssembleUnreadRequest(t *testing.T) {
	a := isolated("seq",
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 10})},
		record.Request{CountersError: "after the request: connection refused"},
		record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 20}, map[metrics.Counter]float64{metrics.StoreBytes: 30})},
	)
	s := Assemble(a)
	if s.Span.Valid || s.Span.Delta(metrics.StoreBytes) != nil || !strings.Contains(strings.Join(s.Span.InvalidReasons, ";"), "counters not read around request 1: after the request: connection refused") {
		t.Fatalf("%+v", s.Span)
	}
	none := Assemble(isolated("seq", record.Request{CountersError: "before the request: 500"}, record.Request{}))
	if none.Span != nil || none.SpanError != "no request's counters were read: request 0: before the request: 500; request 1: no counters were recorded" {
		t.Fatalf("span %v error %q", none.Span, none.SpanError)
	}
	if empty := Assemble(isolated("seq")); empty.Span != nil || empty.SpanError != "" {
		t.Fatalf("a step with no request: %+v %q", empty.Span, empty.SpanError)
	}
}

// TestAssembleStepScope: a step whose requests overlapped keeps its own scrapes; rebuilt from
// a journal it has none, and says so.
func TestAssembleStepScope(t *testing.T) {
	c := span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 64})
	s := Assemble(record.StepArtifact{Step: "load", DeltaScope: record.ScopeStep, Counters: c, Samples: &record.Samples{Count: 4}, Requests: []record.Request{{}, {}}})
	if s.Span != c || s.Sampled.Count != 4 {
		t.Fatalf("%+v", s)
	}
	j := Assemble(record.StepArtifact{Step: "load", DeltaScope: record.ScopeStep, Interrupted: true, Requests: []record.Request{{}}})
	if j.Span != nil || !strings.Contains(j.SpanError, "closing scrape was never taken") {
		t.Fatalf("journal: %v %q", j.Span, j.SpanError)
	}
	failed := Assemble(record.StepArtifact{Step: "load", DeltaScope: record.ScopeStep, CountersError: "after the step: timeout"})
	if failed.SpanError != "after the step: timeout" {
		t.Fatalf("%q", failed.SpanError)
	}
}

// TestSpanValidity: a step's counters count only when a span was read and is valid; an
// unread span says why, after the span's own reasons.
func TestSpanValidity(t *testing.T) {
	good := Assemble(isolated("seq", record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 10})}))
	if ok, why := good.SpanValidity(); !ok || len(why) != 0 {
		t.Errorf("a read span: %v %q", ok, why)
	}
	unread := Assemble(isolated("seq", record.Request{CountersError: "before the request: 500"}))
	if ok, why := unread.SpanValidity(); ok || len(why) != 1 || !strings.HasPrefix(why[0], "counters not read: no request's counters were read") {
		t.Errorf("no span: %v %q", ok, why)
	}
	both := Step{Span: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 10}), SpanError: "after the step: timeout"}
	if ok, why := both.SpanValidity(); ok || len(why) != 1 || why[0] != "counters not read: after the step: timeout" {
		t.Errorf("a span and an error: %v %q", ok, why)
	}
	if ok, why := (&Step{}).SpanValidity(); ok || len(why) != 0 {
		t.Errorf("nothing: %v %q", ok, why)
	}
}

// TestSpanOf: a run's change over its steps, which a reset between steps or an unread step
// in the middle leaves unusable; unread steps outside the read ones do not matter.
func TestSpanOf(t *testing.T) {
	s0 := Assemble(isolated("a", record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 0}, map[metrics.Counter]float64{metrics.StoreBytes: 100})}))
	s1 := Assemble(isolated("b", record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 100}, map[metrics.Counter]float64{metrics.StoreBytes: 300})}))
	bad := Assemble(isolated("b", record.Request{Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: 5}, map[metrics.Counter]float64{metrics.StoreBytes: 900})}))
	unread := Assemble(isolated("u", record.Request{CountersError: "timeout"}))
	if d := SpanOf([]Step{s0, s1}); !d.Valid || *d.Delta(metrics.StoreBytes) != 300 {
		t.Fatalf("%+v", d)
	}
	if d := SpanOf([]Step{s0, bad}); d.Valid || !strings.Contains(d.InvalidReasons[0], "before step b") {
		t.Fatalf("reset between steps: %+v", d)
	}
	if d := SpanOf([]Step{s0, unread, s1}); d.Valid || !strings.Contains(d.InvalidReasons[0], "counters not read during step u") {
		t.Fatalf("unread step between: %+v", d)
	}
	if d := SpanOf([]Step{unread, s0, s1, unread}); !d.Valid {
		t.Fatalf("unread steps outside: %+v", d.InvalidReasons)
	}
	if SpanOf([]Step{unread}) != nil {
		t.Fatal("no span from unread steps")
	}
}

// TestMeasuredBytesPerTokenSeed001 reproduces seed 001's figures: 13,627,722,240 bytes
// stored for 655,420 computed tokens and 1,001,721,600 bytes loaded for 113,408 hits, over
// the joined span of its steps; a reset anywhere in it leaves both unknown.
func TestMeasuredBytesPerTokenSeed001(t *testing.T) {
	zero := map[metrics.Counter]float64{metrics.StoreBytes: 0, metrics.LoadBytes: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0}
	mid := map[metrics.Counter]float64{metrics.StoreBytes: 13627722240, metrics.LoadBytes: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 682044, metrics.GPUPrefixHits: 26624}
	end := map[metrics.Counter]float64{metrics.StoreBytes: 13627722240, metrics.LoadBytes: 1001721600, metrics.ExternalPrefixHits: 113408, metrics.GPUPrefixQueries: 682044 + 113674, metrics.GPUPrefixHits: 26624 + 266}
	steps := []Step{Assemble(isolated("seq", record.Request{Counters: span(zero, mid)})), Assemble(isolated("replay", record.Request{Counters: span(mid, end)}))}
	// The replay computed 266 of its tokens: 682,044 - 26,624 + 266 - 266 = 655,420 computed.
	store, load := MeasuredBytesPerToken(steps)
	if store == nil || *store < 20792 || *store > 20793 {
		t.Fatalf("stored bytes per token %v", store)
	}
	if load == nil || *load < 8832.8 || *load > 8833 {
		t.Fatalf("loaded bytes per token %v", load)
	}
	// The same counters, but the server restarted between the steps.
	restarted := map[metrics.Counter]float64{metrics.StoreBytes: 0, metrics.LoadBytes: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0}
	steps[1] = Assemble(isolated("replay", record.Request{Counters: span(restarted, end)}))
	if s, l := MeasuredBytesPerToken(steps); s != nil || l != nil {
		t.Fatalf("across a restart: %v %v", s, l)
	}
	// Absent counters give no figure rather than a made-up one.
	noStore := map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0}
	if s, _ := MeasuredBytesPerToken([]Step{Assemble(isolated("seq", record.Request{Counters: span(noStore, noStore)}))}); s != nil {
		t.Fatalf("store bytes absent, got %v", *s)
	}
	if s, l := MeasuredBytesPerToken(nil); s != nil || l != nil {
		t.Fatal("no steps, figures")
	}
}

// TestV1SlotVerdictWorded: a v1 slot verdict read by the record is decided by the slot and
// worded as v1 worded it, with no capacity math to weigh.
func TestV1SlotVerdictWorded(t *testing.T) {
	old := `{"verdict":"cpu_reload","reason":"r","slot_attribution":{"verdict":"cpu_reload","live_slot_tokens":818,"host_cache_tokens":5206,
	"evidence":{"common_prefix_with_previous_prompt":818,"slots":1,"tolerance_tokens":16}},"evidence":{"counters_valid":true}}`
	var v record.Decision
	if err := json.Unmarshal([]byte(old), &v); err != nil {
		t.Fatal(err)
	}
	upgradeV1(&v)
	if v.DecidedBy != verdict.BySlot || v.FromV1 || v.Interpretation != "The replay was restored from the host-RAM prompt cache." || v.SetupValid != capacity.Unknown {
		t.Fatalf("%+v", v)
	}
}

// TestAssembleCrossChecksUsage: a step of overlapping requests whose prompt-token counter rose
// by clearly less than its requests' usage (the engine restarted during it and counted again
// from 0, no scrape falling across the restart) has no valid counters, and the reason names
// both figures; a counter that lags by less than a request agrees. The artifact keeps what
// was read.
func TestAssembleCrossChecksUsage(t *testing.T) {
	step := func(counted float64, prompts ...int) Step {
		a := isolated("conversation")
		a.Kind, a.DeltaScope = record.KindConversation, record.ScopeStep
		a.Counters = span(map[metrics.Counter]float64{metrics.PromptTokens: 1000, metrics.GPUPrefixQueries: 1000, metrics.GPUPrefixHits: 0},
			map[metrics.Counter]float64{metrics.PromptTokens: 1000 + counted, metrics.GPUPrefixQueries: 1000 + counted, metrics.GPUPrefixHits: counted / 2})
		for k, p := range prompts {
			a.Requests = append(a.Requests, record.Request{Step: "conversation", IndexInStep: k, Result: record.Result{PromptTokens: i(p)}})
		}
		return Assemble(a)
	}
	prompts := make([]int, 20)
	for k := range prompts {
		prompts[k] = 1395 // 27,900 in all
	}
	st := step(15165, prompts...)
	valid, reasons := st.SpanValidity()
	want := "the server's counters (test:prompt_tokens) rose by 15165 prompt tokens over the step while its requests' usage sums to 27900"
	if valid || len(reasons) != 1 || !strings.Contains(reasons[0], want) {
		t.Errorf("a reset inside the step: valid %v, reasons %q, want %q", valid, reasons, want)
	}
	if !st.StepArtifact.Counters.Valid || st.Span.Delta(metrics.GPUPrefixHits) != nil {
		t.Errorf("the artifact's counters changed (%v) or the span's hits stayed usable", st.StepArtifact.Counters.Valid)
	}
	if sec := ConversationOf(st, "c.json"); sec.CountersValid || sec.Tiers.GPU != nil {
		t.Errorf("the section kept counters: valid %v, GPU share %v", sec.CountersValid, sec.Tiers.GPU)
	}
	for _, counted := range []float64{27900, 26505, 30000} { // exact, one request short, re-admissions
		st := step(counted, prompts...)
		if valid, reasons := st.SpanValidity(); !valid {
			t.Errorf("counted %v of 27900: %q", counted, reasons)
		}
	}
	if st := step(15165); !st.Span.Valid {
		t.Error("no usage is no evidence against the counters")
	}
}

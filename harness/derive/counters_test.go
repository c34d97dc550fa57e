package derive

import (
	"reflect"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

func TestNewCounters(t *testing.T) {
	before := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{
		metrics.StoreBytes:         present(100, "vllm:kv_offload_store_bytes_total"),
		metrics.LoadBytes:          present(0, `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"} (lazy, no series yet)`),
		metrics.ExternalPrefixHits: {},
		metrics.GPUPrefixHits:      present(500, "vllm:prefix_cache_hits_total"),
		metrics.PromptTokens:       present(40, "vllm:prompt_tokens_total"),
	}}
	after := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{
		metrics.StoreBytes:         present(1100, "vllm:kv_offload_store_bytes_total"),
		metrics.LoadBytes:          present(8192, `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`),
		metrics.ExternalPrefixHits: present(96, "vllm:external_prefix_cache_hits_total"),
		metrics.GPUPrefixHits:      present(500, "vllm:prefix_cache_hits_total"),
		metrics.PromptTokens:       present(12, "vllm:prompt_tokens_total"),
	}}
	c := NewCounters(before, after)
	tests := []struct {
		counter   metrics.Counter
		delta     *float64
		decreased bool
		usable    bool
		reason    string
	}{
		{metrics.StoreBytes, f(1000), false, true, ""},
		{metrics.LoadBytes, f(8192), false, true, ""},
		{metrics.ExternalPrefixHits, nil, false, false, ""},
		{metrics.GPUPrefixHits, f(0), false, true, ""},
		{metrics.PromptTokens, f(-28), true, false, "prompt_tokens went down from 40 to 12"},
	}
	for _, tt := range tests {
		cc := c.Values[tt.counter]
		if !reflect.DeepEqual(cc.Delta(), tt.delta) || cc.Decreased != tt.decreased || !strings.Contains(cc.Reason, tt.reason) {
			t.Errorf("%s: %+v delta %v, want delta %v decreased %v reason %q", tt.counter, cc, cc.Delta(), tt.delta, tt.decreased, tt.reason)
		}
		if v, ok := c.Value(tt.counter); ok != tt.usable || (ok && v != *tt.delta) {
			t.Errorf("Value(%s) = %v, %v; want usable %v", tt.counter, v, ok, tt.usable)
		}
	}
	if c.Valid || len(c.InvalidReasons) != 1 || !strings.Contains(c.InvalidReasons[0], "restarted") || c.InvalidKinds[0] != metrics.InvalidReset {
		t.Errorf("valid=%v reasons=%q, want invalid for one restart", c.Valid, c.InvalidReasons)
	}
	if kind, why := c.FirstInvalid(); kind != metrics.InvalidReset || !strings.Contains(why, "prompt_tokens") {
		t.Errorf("first invalid %s %q", kind, why)
	}
	if got := c.Values[metrics.LoadBytes].SourceBefore; !strings.HasSuffix(got, "(lazy, no series yet)") {
		t.Errorf("source before %q", got)
	}
	if *c.Before(metrics.StoreBytes) != 100 || *c.After(metrics.StoreBytes) != 1100 || c.Before(metrics.ExternalPrefixHits) != nil {
		t.Error("before/after readings")
	}
}

// TestCountersAbsentIsNotZero: a side the server did not serve leaves the change absent on
// a valid span; every accessor says absent, none says 0.
func TestCountersAbsentIsNotZero(t *testing.T) {
	for _, tt := range []struct {
		name          string
		before, after metrics.Reading
	}{
		{"absent before", metrics.Reading{}, present(5, "x")},
		{"absent after", present(5, "x"), metrics.Reading{}},
		{"absent both", metrics.Reading{}, metrics.Reading{}},
	} {
		c := NewCounters(metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.LoadBytes: tt.before}},
			metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.LoadBytes: tt.after}})
		cc := c.Values[metrics.LoadBytes]
		if cc.Present() || cc.Decreased || !c.Valid || c.Delta(metrics.LoadBytes) != nil || cc.Delta() != nil {
			t.Errorf("%s: %+v valid=%v, want an absent change on a valid span", tt.name, cc, c.Valid)
		}
	}
	var none *record.Counters
	if _, ok := none.Value(metrics.LoadBytes); ok || none.Before(metrics.LoadBytes) != nil || none.After(metrics.LoadBytes) != nil || none.Unreadable(metrics.LoadBytes) != "" {
		t.Error("a nil span has values")
	}
}

// TestCountersUnreadable: a counter served as NaN is neither present nor 0, and says which
// side and why.
func TestCountersUnreadable(t *testing.T) {
	good := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.GPUPrefixHits: present(500, "h"), metrics.PromptTokens: present(40, "p")}}
	bad := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.GPUPrefixHits: {Source: "h", Unreadable: "NaN"}, metrics.PromptTokens: present(80, "p")}}
	c := NewCounters(good, bad)
	if c.Delta(metrics.GPUPrefixHits) != nil || c.Unreadable(metrics.GPUPrefixHits) != "gpu_prefix_hits read NaN after (h)" {
		t.Fatalf("after: %+v %q", c.Values[metrics.GPUPrefixHits], c.Unreadable(metrics.GPUPrefixHits))
	}
	if c.Unreadable(metrics.PromptTokens) != "" || *c.Delta(metrics.PromptTokens) != 40 {
		t.Fatal("prompt tokens")
	}
	if c := NewCounters(bad, good); c.Unreadable(metrics.GPUPrefixHits) != "gpu_prefix_hits read NaN before (h)" {
		t.Fatalf("before: %q", c.Unreadable(metrics.GPUPrefixHits))
	}
	// A NaN at either end of a join stays unreadable.
	j := Join([]string{"a", "b"}, []*record.Counters{NewCounters(good, good), NewCounters(good, bad)})
	if j.Unreadable(metrics.GPUPrefixHits) == "" || j.Delta(metrics.GPUPrefixHits) != nil {
		t.Fatalf("joined: %+v", j.Values[metrics.GPUPrefixHits])
	}
}

// TestJoinSeesEveryScrape: a restart between two spans, or inside one, leaves the endpoints
// looking monotone; the joined span is still invalid and the counter unusable.
func TestJoinSeesEveryScrape(t *testing.T) {
	w0 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 100, metrics.GPUPrefixHits: 0}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 1100, metrics.GPUPrefixHits: 10}))
	// The server restarted between the two requests: store bytes fell to 50, then grew past 1100.
	w1 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 50, metrics.GPUPrefixHits: 20}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 5050, metrics.GPUPrefixHits: 30}))
	if !w0.Valid || !w1.Valid {
		t.Fatal("each span alone is valid")
	}
	j := Join([]string{"request 0", "request 1"}, []*record.Counters{w0, w1})
	if j.Valid || len(j.InvalidReasons) != 1 || j.InvalidKinds[0] != metrics.InvalidReset ||
		!strings.Contains(j.InvalidReasons[0], "store_bytes went down from 1100 after request 0 to 50 before request 1") {
		t.Fatalf("joined valid %v, reasons %q kinds %v; want one reset naming both requests", j.Valid, j.InvalidReasons, j.InvalidKinds)
	}
	if _, ok := j.Value(metrics.StoreBytes); ok {
		t.Error("store bytes usable across a restart")
	}
	if v, ok := j.Value(metrics.GPUPrefixHits); !ok || v != 30 {
		t.Errorf("gpu hits %v %v, want 30", v, ok)
	}
	// A restart inside one span is named with its span.
	w2 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 5050}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 7}))
	w3 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 7}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 9000}))
	j = Join([]string{"request 2", "request 3"}, []*record.Counters{w2, w3})
	if j.Valid || !strings.HasPrefix(j.InvalidReasons[0], "request 2: store_bytes went down from 5050 to 7") || j.Values[metrics.StoreBytes].Reason == "" {
		t.Fatalf("reasons %q, want request 2's restart", j.InvalidReasons)
	}
	// A counter not read around a span in the middle could hide a restart.
	w4 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 1}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 2}))
	w5 := NewCounters(snap(map[metrics.Counter]float64{}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 3}))
	w6 := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 3}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 4}))
	j = Join([]string{"a", "b", "c"}, []*record.Counters{w4, w5, w6})
	if j.Valid || j.InvalidKinds[0] != metrics.InvalidMissing || !strings.Contains(j.InvalidReasons[0], "store_bytes was not read on both sides of b") {
		t.Fatalf("reasons %q kinds %v, want store_bytes missing around b", j.InvalidReasons, j.InvalidKinds)
	}
	if Join(nil, nil) != nil {
		t.Error("joining no spans should give no span")
	}
	// Contamination carries over.
	w4.Contaminate("2 requests ran")
	if j := Join([]string{"a", "c"}, []*record.Counters{w4, w6}); !j.Contaminated || j.Valid || j.InvalidKinds[0] != metrics.InvalidContaminated {
		t.Fatalf("contamination lost: %+v", j)
	}
}

func TestInvalidateAll(t *testing.T) {
	c := NewCounters(snap(map[metrics.Counter]float64{metrics.StoreBytes: 1, metrics.LoadBytes: 0}), snap(map[metrics.Counter]float64{metrics.StoreBytes: 5, metrics.LoadBytes: 4}))
	c.InvalidateAll(metrics.InvalidScrapeFailed, "counters not read around request 2")
	if c.Valid || c.Delta(metrics.StoreBytes) != nil || c.Delta(metrics.LoadBytes) != nil || c.Values[metrics.LoadBytes].Reason != "counters not read around request 2" {
		t.Fatalf("%+v", c)
	}
	if kind, _ := c.FirstInvalid(); kind != metrics.InvalidScrapeFailed {
		t.Fatalf("kind %s", kind)
	}
	// Records written before kinds existed knew only restarts.
	old := &record.Counters{InvalidReasons: []string{"went down"}}
	if kind, why := old.FirstInvalid(); kind != metrics.InvalidReset || why != "went down" {
		t.Fatalf("%s %q", kind, why)
	}
	if kind, why := (&record.Counters{Valid: true}).FirstInvalid(); kind != "" || why != "" {
		t.Fatal("a valid span has an invalid reason")
	}
}

// TestPerTokenAndComputed: seed 001's arithmetic: 1,001,721,600 bytes for 113,408 hits; the
// computed tokens from the by-source counter where served, else queries minus both hits.
func TestPerTokenAndComputed(t *testing.T) {
	c := NewCounters(snap(map[metrics.Counter]float64{metrics.LoadBytes: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0}),
		snap(map[metrics.Counter]float64{metrics.LoadBytes: 1001721600, metrics.ExternalPrefixHits: 113408, metrics.GPUPrefixQueries: 795718, metrics.GPUPrefixHits: 26890}))
	if p := c.PerToken(metrics.LoadBytes, metrics.ExternalPrefixHits); p == nil || *p < 8832.9 || *p > 8833 {
		t.Fatalf("per token %v", p)
	}
	if n, ok := ComputedTokens(c); !ok || n != 655420 {
		t.Fatalf("computed %v %v", n, ok)
	}
	if c.PerToken(metrics.LoadBytes, metrics.StoreBytes) != nil {
		t.Fatal("per token of an absent counter")
	}
	c = NewCounters(snap(map[metrics.Counter]float64{metrics.PromptTokensLocalCompute: 10}), snap(map[metrics.Counter]float64{metrics.PromptTokensLocalCompute: 110}))
	if n, ok := ComputedTokens(c); !ok || n != 100 {
		t.Fatalf("by source: %v %v", n, ok)
	}
	if _, ok := ComputedTokens(NewCounters(snap(nil), snap(nil))); ok {
		t.Fatal("computed tokens without counters")
	}
}

// TestProcessStartShowsRestart: counters that regrew past their old values pass the
// monotonicity check, but the process start time moving invalidates the span; the same
// start time, or one side without it, leaves the span valid.
func TestProcessStartShowsRestart(t *testing.T) {
	at := func(hits, start float64, withStart bool) metrics.Snapshot {
		s := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{metrics.GPUPrefixHits: present(hits, "h")},
			Gauges: map[metrics.Gauge]metrics.Reading{}}
		if withStart {
			s.Gauges[metrics.ProcessStart] = present(start, "process_start_time_seconds")
		}
		return s
	}
	for _, tt := range []struct {
		name        string
		before      metrics.Snapshot
		after       metrics.Snapshot
		wantInvalid bool
	}{
		{"restarted", at(100, 1000.5, true), at(900, 1003.25, true), true},
		{"same process", at(100, 1000.5, true), at(900, 1000.5, true), false},
		{"absent before", at(100, 0, false), at(900, 1003.25, true), false},
		{"absent after", at(100, 1000.5, true), at(900, 0, false), false},
	} {
		c := NewCounters(tt.before, tt.after)
		if c.Valid == tt.wantInvalid {
			t.Errorf("%s: valid %v, reasons %q", tt.name, c.Valid, c.InvalidReasons)
		}
		if tt.wantInvalid && (len(c.InvalidKinds) != 1 || c.InvalidKinds[0] != metrics.InvalidReset ||
			!strings.Contains(c.InvalidReasons[0], "moved from 1000.5 to 1003.25")) {
			t.Errorf("%s: kinds %v reasons %q", tt.name, c.InvalidKinds, c.InvalidReasons)
		}
	}
}

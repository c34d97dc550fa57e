package metrics_test

import (
	. "github.com/anvil-serving/kvbench/harness/metrics"
	"strings"
	"testing"
)

func present(v float64, source string) Reading {
	return Reading{Value: v, Present: true, Source: source}
}

func TestDiff(t *testing.T) {
	before := Snapshot{Counters: map[Counter]Reading{
		StoreBytes:         present(100, "vllm:kv_offload_store_bytes_total"),
		LoadBytes:          present(0, `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"} (lazy, no series yet)`),
		ExternalPrefixHits: {},
		GPUPrefixHits:      present(500, "vllm:prefix_cache_hits_total"),
		PromptTokens:       present(40, "vllm:prompt_tokens_total"),
	}}
	after := Snapshot{Counters: map[Counter]Reading{
		StoreBytes:         present(1100, "vllm:kv_offload_store_bytes_total"),
		LoadBytes:          present(8192, `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`),
		ExternalPrefixHits: present(96, "vllm:external_prefix_cache_hits_total"),
		GPUPrefixHits:      present(500, "vllm:prefix_cache_hits_total"),
		PromptTokens:       present(12, "vllm:prompt_tokens_total"),
	}}
	d := Diff(before, after)
	tests := []struct {
		counter            Counter
		delta              float64
		present, decreased bool
		usable             bool
		reasonMentions     string
	}{
		{StoreBytes, 1000, true, false, true, ""},
		{LoadBytes, 8192, true, false, true, ""},
		{ExternalPrefixHits, 0, false, false, false, ""},
		{GPUPrefixHits, 0, true, false, true, ""},
		{PromptTokens, -28, true, true, false, "prompt_tokens went down from 40 to 12"},
	}
	for _, tt := range tests {
		cd := d.Counters[tt.counter]
		if cd.Delta != tt.delta || cd.Present != tt.present || cd.Decreased != tt.decreased {
			t.Errorf("%s: %+v, want delta %v present %v decreased %v", tt.counter, cd, tt.delta, tt.present, tt.decreased)
		}
		if tt.reasonMentions != "" && !strings.Contains(cd.Reason, tt.reasonMentions) {
			t.Errorf("%s reason %q lacks %q", tt.counter, cd.Reason, tt.reasonMentions)
		}
		if v, ok := d.Value(tt.counter); ok != tt.usable || (ok && v != tt.delta) {
			t.Errorf("Value(%s) = %v, %v; want %v, %v", tt.counter, v, ok, tt.delta, tt.usable)
		}
	}
	if d.Valid || len(d.InvalidReasons) != 1 || !strings.Contains(d.InvalidReasons[0], "restarted") {
		t.Errorf("valid=%v reasons=%q, want invalid for one restart", d.Valid, d.InvalidReasons)
	}
}

func TestDiffAbsentOnEitherSide(t *testing.T) {
	tests := []struct {
		name          string
		before, after Reading
	}{
		{"absent before", Reading{}, present(5, "x")},
		{"absent after", present(5, "x"), Reading{}},
		{"absent both", Reading{}, Reading{}},
	}
	for _, tt := range tests {
		d := Diff(Snapshot{Counters: map[Counter]Reading{LoadBytes: tt.before}},
			Snapshot{Counters: map[Counter]Reading{LoadBytes: tt.after}})
		cd := d.Counters[LoadBytes]
		if cd.Present || cd.Decreased || !d.Valid {
			t.Errorf("%s: %+v valid=%v, want an absent delta on a valid pair", tt.name, cd, d.Valid)
		}
		if _, ok := d.Value(LoadBytes); ok {
			t.Errorf("%s: Value reported usable", tt.name)
		}
	}
}

// A whole sample scraped twice gives zero deltas everywhere it is present.
func TestDiffSameSnapshot(t *testing.T) {
	s := mustProfile(t, "vllm").Snapshot(mustParse(t, readSample(t), "s"))
	d := Diff(s, s)
	if !d.Valid {
		t.Fatalf("invalid: %v", d.InvalidReasons)
	}
	for c, cd := range d.Counters {
		if cd.Present != s.Counters[c].Present || cd.Delta != 0 {
			t.Errorf("%s: %+v", c, cd)
		}
	}
}

// snap is a snapshot with the given counters present.
func snap(counters map[Counter]float64) Snapshot {
	s := Snapshot{Counters: map[Counter]Reading{}}
	for c, v := range counters {
		s.Counters[c] = present(v, "test:"+string(c))
	}
	return s
}

// TestJoinSeesEveryScrape: a restart between two windows, or inside one, leaves the
// endpoints looking monotone; the joined delta is still invalid and the counter unusable.
func TestJoinSeesEveryScrape(t *testing.T) {
	w0 := NewWindow(snap(map[Counter]float64{StoreBytes: 100, GPUPrefixHits: 0}), snap(map[Counter]float64{StoreBytes: 1100, GPUPrefixHits: 10}))
	// Between w0's after and w1's before the server restarted: 1100 -> 50.
	w1 := NewWindow(snap(map[Counter]float64{StoreBytes: 50, GPUPrefixHits: 20}), snap(map[Counter]float64{StoreBytes: 5050, GPUPrefixHits: 30}))
	if !w0.Delta.Valid || !w1.Delta.Valid || !Diff(w0.Before, w1.After).Valid {
		t.Fatal("setup: each window and the endpoints alone should look valid")
	}
	j := Join([]string{"request 0", "request 1"}, []*Window{w0, w1})
	if j.Delta.Valid || len(j.Delta.InvalidReasons) != 1 || j.Delta.InvalidKinds[0] != InvalidReset ||
		!strings.Contains(j.Delta.InvalidReasons[0], "store_bytes went down from 1100 after request 0 to 50 before request 1") {
		t.Fatalf("joined delta valid %v, reasons %q kinds %v; want one reset naming both requests", j.Delta.Valid, j.Delta.InvalidReasons, j.Delta.InvalidKinds)
	}
	if _, ok := j.Delta.Value(StoreBytes); ok {
		t.Error("store_bytes is still usable across the restart")
	}
	if v, ok := j.Delta.Value(GPUPrefixHits); !ok || v != 30 {
		t.Errorf("gpu_prefix_hits %v (usable %v), want 30: it stayed monotone", v, ok)
	}

	// A window that is itself invalid makes the join invalid with its reason, named.
	w2 := NewWindow(snap(map[Counter]float64{StoreBytes: 5050}), snap(map[Counter]float64{StoreBytes: 7}))
	w3 := NewWindow(snap(map[Counter]float64{StoreBytes: 7}), snap(map[Counter]float64{StoreBytes: 9000}))
	j = Join([]string{"request 2", "request 3"}, []*Window{w2, w3})
	if j.Delta.Valid || !strings.HasPrefix(j.Delta.InvalidReasons[0], "request 2: store_bytes went down from 5050 to 7") {
		t.Fatalf("reasons %q, want request 2's restart", j.Delta.InvalidReasons)
	}

	// A counter unread in a middle window cannot be vouched for.
	w4 := NewWindow(snap(map[Counter]float64{StoreBytes: 1}), snap(map[Counter]float64{StoreBytes: 2}))
	w5 := NewWindow(snap(map[Counter]float64{}), snap(map[Counter]float64{StoreBytes: 3}))
	w6 := NewWindow(snap(map[Counter]float64{StoreBytes: 3}), snap(map[Counter]float64{StoreBytes: 4}))
	j = Join([]string{"a", "b", "c"}, []*Window{w4, w5, w6})
	if j.Delta.Valid || j.Delta.InvalidKinds[0] != InvalidMissing || !strings.Contains(j.Delta.InvalidReasons[0], "store_bytes was not read on both sides of b") {
		t.Fatalf("reasons %q kinds %v, want store_bytes missing around b", j.Delta.InvalidReasons, j.Delta.InvalidKinds)
	}
	if Join(nil, nil) != nil {
		t.Error("joining no windows should give no window")
	}
}

// TestNonFiniteIsUnreadable: a counter served as NaN or +Inf is neither present nor 0; its
// delta is unusable and says which side and why, also when summed with another URL.
func TestNonFiniteIsUnreadable(t *testing.T) {
	prof := mustProfile(t, "vllm")
	good := "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total 500\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 40\n"
	for _, v := range []string{"NaN", "+Inf", "-Inf"} {
		bad := "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total " + v + "\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 80\n"
		after := prof.Snapshot(mustParse(t, bad, "after"))
		r := after.Counters[GPUPrefixHits]
		if r.Present || r.Value != 0 || r.Unreadable != v || r.Source != "vllm:prefix_cache_hits_total" {
			t.Errorf("%s: reading %+v, want unreadable %s, not present", v, r, v)
		}
		d := Diff(prof.Snapshot(mustParse(t, good, "before")), after)
		if p := d.Ptr(GPUPrefixHits); p != nil {
			t.Errorf("%s: delta %v, want none", v, *p)
		}
		if got := d.Unreadable(GPUPrefixHits); got != "gpu_prefix_hits read "+v+" after (vllm:prefix_cache_hits_total)" {
			t.Errorf("%s: unreadable %q", v, got)
		}
		if got := d.Unreadable(PromptTokens); got != "" {
			t.Errorf("%s: prompt tokens unreadable %q, want a number", v, got)
		}
		// Two URLs, one finite and one not: the sum is not a number either.
		sum := prof.Snapshot(mustParse(t, good, "a"), mustParse(t, bad, "b")).Counters[GPUPrefixHits]
		if sum.Present || sum.Unreadable != v {
			t.Errorf("%s: summed reading %+v, want unreadable", v, sum)
		}
	}
}

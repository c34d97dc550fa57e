package metrics

import (
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

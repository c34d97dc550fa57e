package record

import (
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

func present(v float64) metrics.Reading { return metrics.Reading{Value: v, Present: true, Source: "x"} }

// TestMeasuredBytesPerTokenSeed001 reproduces seed 001's figures: 13,627,722,240 bytes
// stored for 655,420 computed tokens and 1,001,721,600 bytes loaded for 113,408 hits.
func TestMeasuredBytesPerTokenSeed001(t *testing.T) {
	before := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{
		metrics.StoreBytes: present(0), metrics.LoadBytes: present(0), metrics.ExternalPrefixHits: present(0),
		metrics.GPUPrefixQueries: present(0), metrics.GPUPrefixHits: present(0),
	}}
	after := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{
		metrics.StoreBytes: present(13627722240), metrics.LoadBytes: present(1001721600), metrics.ExternalPrefixHits: present(113408),
		metrics.GPUPrefixQueries: present(682044 + 113674), metrics.GPUPrefixHits: present(26624 + 266),
	}}
	// The replay computed 266 of its tokens: 682,044 - 26,624 + 266 - 266 = 655,420 computed.
	steps := []StepArtifact{{Counters: metrics.NewWindow(before, after)}}
	store, load := MeasuredBytesPerToken(steps)
	if store == nil || load == nil {
		t.Fatal("nil")
	}
	if got := *store; got < 20792 || got > 20793 {
		t.Fatalf("stored bytes per token %v", got)
	}
	if got := *load; got < 8832.8 || got > 8833 {
		t.Fatalf("loaded bytes per token %v", got)
	}
	// Absent counters give no figure rather than a made-up one.
	delete(after.Counters, metrics.StoreBytes)
	steps[0].Counters.After = after
	if s, _ := MeasuredBytesPerToken(steps); s != nil {
		t.Fatalf("store bytes absent, got %v", *s)
	}
}

func TestInterpretation(t *testing.T) {
	a := capacity.Assess(capacity.Setup{GPUKVTokens: 503468, CPUOffloadGiB: 8, StoreBytesPerToken: 20790, StoreBytesSource: "measured"},
		capacity.Sequence{Tokens: []int{70000, 80000, 100000}, Nested: true, Counting: "measured"})
	got := Interpretation(&verdict.Replay{Verdict: verdict.GPUHit}, &a)
	want := "The replay remained in GPU cache. At the measured bytes per stored token (20,790), the 8 GiB CPU tier (about 413,176 tokens) was smaller than the 503,468-token GPU KV tier and was not a valid GPU-eviction reload setup."
	if got != want {
		t.Fatalf("got  %q\nwant %q", got, want)
	}
}

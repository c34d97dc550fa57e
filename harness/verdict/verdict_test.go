package verdict

import (
	"math"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

func i(v int) *int         { return &v }
func f(v float64) *float64 { return &v }

func TestDecide(t *testing.T) {
	// Seed 001's replay: 113,408 external hits, 1,001,721,600 bytes loaded, no GPU hits.
	seed := Evidence{PromptTokens: i(113674), CachedPromptTokens: i(113408), GPUHitsDelta: f(0), ExternalHitsDelta: f(113408),
		LoadBytesDelta: f(1001721600), SharedPrefixTokens: 8000, BlockSize: 16, LoadBytesPerToken: 8833, CountersValid: true}
	withPrefix := seed
	withPrefix.GPUHitsDelta, withPrefix.ExternalHitsDelta = f(7984), f(105424)
	cases := []struct {
		name    string
		e       Evidence
		verdict string
		reason  string
	}{
		{"seed 001 reload", seed, CPUReload, "113408 tokens (99.8% of the prompt) were reloaded"},
		{"reload with the shared prefix on GPU", withPrefix, CPUReload, "GPU hits stayed within the shared prefix"},
		{"GPU hit", Evidence{PromptTokens: i(70000), GPUHitsDelta: f(69984), ExternalHitsDelta: f(0), LoadBytesDelta: f(0), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true}, GPUHit, "hit in GPU memory"},
		{"both tiers", Evidence{PromptTokens: i(70000), GPUHitsDelta: f(40000), ExternalHitsDelta: f(29984), LoadBytesDelta: f(1e6), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true}, Partial, "beyond the 8000-token shared prefix"},
		{"external hits well below the prompt", Evidence{PromptTokens: i(100000), GPUHitsDelta: f(8000), ExternalHitsDelta: f(20000), LoadBytesDelta: f(1e6), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true}, Partial, "well below"},
		{"recompute beyond the prefix", Evidence{PromptTokens: i(100000), GPUHitsDelta: f(7984), ExternalHitsDelta: f(0), LoadBytesDelta: f(0), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true}, Recompute, "nothing beyond the 8000-token shared prefix"},
		{"restart", Evidence{PromptTokens: i(100), CountersValid: false, Invalidity: metrics.InvalidReset, InvalidReason: "gpu_prefix_hits went down"}, Invalid, "server restart"},
		{"failed request", Evidence{RequestFailed: true, RequestFailure: "http 400", CountersValid: true}, Invalid, "http 400"},
		{"no counters", Evidence{PromptTokens: i(100), CachedPromptTokens: i(90), CountersValid: true}, TierUnknown, "no prefix-cache hit counters"},
		{"hits without bytes", Evidence{PromptTokens: i(1000), GPUHitsDelta: f(0), ExternalHitsDelta: f(990), LoadBytesDelta: f(0), CountersValid: true}, Partial, "counters disagree"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Decide(c.e)
			if r.Verdict != c.verdict || !strings.Contains(r.Reason, c.reason) && !strings.Contains(strings.Join(r.Notes, " "), c.reason) {
				t.Fatalf("got %s (%s; notes %v), want %s with %q", r.Verdict, r.Reason, r.Notes, c.verdict, c.reason)
			}
		})
	}
	r := Decide(seed)
	if r.ExpectedLoadBytes == nil || *r.ExpectedLoadBytes != 113408*8833 {
		t.Fatalf("expected load bytes %v", r.ExpectedLoadBytes)
	}
	if r.MeasuredLoadBytesPerToken == nil || math.Abs(*r.MeasuredLoadBytesPerToken-8832.9) > 0.1 {
		t.Fatalf("measured bytes per token %v", *r.MeasuredLoadBytesPerToken)
	}
	if r.UsageAgrees == nil || !*r.UsageAgrees {
		t.Fatal("usage and counters should agree for seed 001")
	}
}

func TestCachedFraction(t *testing.T) {
	got := CachedFraction(i(113674), i(113408))
	if got == nil || math.Abs(*got-0.9976599750162746) > 1e-15 {
		t.Fatalf("seed 001 cached fraction %v", got)
	}
	if CachedFraction(i(100), nil) != nil {
		t.Fatal("unknown cached tokens must give an unknown fraction")
	}
}

// TestDecideInvalidReasons: each kind of invalid counters gets its own reason; only a reset
// is called a restart.
func TestDecideInvalidReasons(t *testing.T) {
	cases := []struct {
		kind         metrics.Invalidity
		reason, want string
	}{
		{metrics.InvalidReset, "gpu_prefix_hits went down from 90 to 3", "counters went down between the scrapes (server restart): gpu_prefix_hits went down from 90 to 3"},
		{metrics.InvalidScrapeFailed, "after the request: connection refused", "no counters were read around the replay (a scrape failed): after the request: connection refused"},
		{metrics.InvalidMissing, "gpu_prefix_hits is not exposed", "a counter the verdict needs was not read: gpu_prefix_hits is not exposed"},
		{metrics.InvalidContaminated, "prompt tokens moved by 1344, usage reports 300", "other requests ran on the server during the replay: prompt tokens moved by 1344, usage reports 300"},
	}
	for _, c := range cases {
		r := Decide(Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), GPUHitsDelta: f(0), ExternalHitsDelta: f(288), Invalidity: c.kind, InvalidReason: c.reason})
		if r.Verdict != Invalid || r.Reason != c.want {
			t.Errorf("%s: %s %q, want invalid %q", c.kind, r.Verdict, r.Reason, c.want)
		}
		if c.kind != metrics.InvalidReset && strings.Contains(r.Reason, "restart") {
			t.Errorf("%s: reason %q calls it a restart", c.kind, r.Reason)
		}
	}
}

// TestDecideMissingGPUHits: usage says 288 of 300 tokens were cached, the server exposes
// external hits (0) but no GPU hit counter. Reading the missing counter as 0 would call it a
// recompute; the verdict is invalid and names the counter. A NaN counter is no better.
func TestDecideMissingGPUHits(t *testing.T) {
	e := Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), ExternalHitsDelta: f(0), LoadBytesDelta: f(0), SharedPrefixTokens: 64, BlockSize: 16, CountersValid: true}
	r := Decide(e)
	if r.Verdict != Invalid || !strings.Contains(r.Reason, "gpu_prefix_hits") || strings.Contains(r.Reason, "0 GPU hits") {
		t.Fatalf("got %s (%s), want invalid naming gpu_prefix_hits", r.Verdict, r.Reason)
	}
	e.GPUHitsDelta = nil
	e.UnreadableCounters = []string{"gpu_prefix_hits read NaN after (vllm:prefix_cache_hits_total)"}
	if r := Decide(e); r.Verdict != Invalid || r.Reason != "a counter the verdict needs was not read: gpu_prefix_hits read NaN after (vllm:prefix_cache_hits_total)" {
		t.Fatalf("NaN: got %s (%s)", r.Verdict, r.Reason)
	}
	// With neither hit counter (llama.cpp without slot attribution) the tier is unknown, as before.
	if r := Decide(Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), CountersValid: true}); r.Verdict != TierUnknown {
		t.Fatalf("no hit counters: got %s (%s), want %s", r.Verdict, r.Reason, TierUnknown)
	}
}

// TestSentencesNeverCallAbsentZero: against a server without offload counters, a recompute,
// a GPU hit and a usage disagreement say "external hits not exposed", never "0 external hits",
// and a GPU hit does not claim nothing was loaded from a tier it cannot see.
func TestSentencesNeverCallAbsentZero(t *testing.T) {
	recompute := Decide(Evidence{PromptTokens: i(100000), CachedPromptTokens: i(50000), GPUHitsDelta: f(992), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true})
	if recompute.Verdict != Recompute || recompute.Reason != "nothing beyond the 8000-token shared prefix was reused (992 GPU hits, external hits not exposed)" {
		t.Errorf("recompute: %s %q", recompute.Verdict, recompute.Reason)
	}
	if !contains(recompute.Notes, "usage reports 50000 cached tokens but the counters moved by 992 GPU hits + external hits not exposed") {
		t.Errorf("recompute notes %q", recompute.Notes)
	}
	hit := Decide(Evidence{PromptTokens: i(70000), GPUHitsDelta: f(69984), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true})
	if hit.Verdict != GPUHit || !strings.HasSuffix(hit.Reason, "; external hits not exposed") || strings.Contains(hit.Reason, "nothing was loaded") {
		t.Errorf("gpu hit: %s %q", hit.Verdict, hit.Reason)
	}
	for _, r := range []Replay{recompute, hit} {
		for _, s := range append([]string{r.Reason, r.Sentence()}, r.Notes...) {
			if strings.Contains(s, "0 external") {
				t.Errorf("%q calls the absent external counter 0", s)
			}
		}
	}
	// With the counter exposed, its 0 is a real 0 and is said.
	if r := Decide(Evidence{PromptTokens: i(100000), GPUHitsDelta: f(992), ExternalHitsDelta: f(0), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true}); !strings.Contains(r.Reason, "(992 GPU hits, 0 external hits)") {
		t.Errorf("exposed zero: %q", r.Reason)
	}
}

func contains(list []string, s string) bool {
	for _, x := range list {
		if x == s {
			return true
		}
	}
	return false
}

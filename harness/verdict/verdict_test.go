package verdict

import (
	"math"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

func i(v int) *int         { return &v }
func f(v float64) *float64 { return &v }

// window is a valid counter window with the deltas given as counter, value pairs; a counter
// left out is absent.
func window(kv ...any) *Counters {
	c := &Counters{Deltas: map[metrics.Counter]float64{}, Valid: true}
	for j := 0; j < len(kv); j += 2 {
		c.Deltas[kv[j].(metrics.Counter)] = kv[j+1].(float64)
	}
	return c
}

const (
	gpuHits = metrics.GPUPrefixHits
	extHits = metrics.ExternalPrefixHits
	load    = metrics.LoadBytes
)

func TestDecide(t *testing.T) {
	// Seed 001's replay: 113,408 external hits, 1,001,721,600 bytes loaded, no GPU hits.
	seed := Evidence{PromptTokens: i(113674), CachedPromptTokens: i(113408), SharedPrefixTokens: 8000, BlockSize: 16, LoadBytesPerToken: 8833,
		Counters: window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0)}
	withPrefix := seed
	withPrefix.Counters = window(gpuHits, 7984.0, extHits, 105424.0, load, 1001721600.0)
	pre := func(n int, c *Counters) Evidence {
		return Evidence{PromptTokens: i(n), SharedPrefixTokens: 8000, BlockSize: 16, Counters: c}
	}
	cases := []struct {
		name    string
		e       Evidence
		verdict Verdict
		reason  string
	}{
		{"seed 001 reload", seed, CPUReload, "113408 tokens (99.8% of the prompt) were reloaded"},
		{"reload with the shared prefix on GPU", withPrefix, CPUReload, "GPU hits stayed within the shared prefix"},
		{"GPU hit", pre(70000, window(gpuHits, 69984.0, extHits, 0.0, load, 0.0)), GPUHit, "hit in GPU memory"},
		{"both tiers", pre(70000, window(gpuHits, 40000.0, extHits, 29984.0, load, 1e6)), Partial, "beyond the 8000-token shared prefix"},
		{"external hits well below the prompt", pre(100000, window(gpuHits, 8000.0, extHits, 20000.0, load, 1e6)), Partial, "well below"},
		{"recompute beyond the prefix", pre(100000, window(gpuHits, 7984.0, extHits, 0.0, load, 0.0)), Recompute, "nothing beyond the 8000-token shared prefix"},
		{"restart", Evidence{PromptTokens: i(100), Counters: &Counters{Invalidity: metrics.InvalidReset, InvalidReason: "gpu_prefix_hits went down"}}, Invalid, "server restart"},
		{"failed request", Evidence{Failed: true, Failure: "http 400", Counters: window()}, Invalid, "http 400"},
		{"never sent", Evidence{NotSent: "the run stopped before the replay was sent"}, Invalid, "stopped before the replay"},
		{"no counters", Evidence{PromptTokens: i(100), CachedPromptTokens: i(90), Counters: window()}, TierUnknown, "no prefix-cache hit counters"},
		{"hits without bytes", Evidence{PromptTokens: i(1000), Counters: window(gpuHits, 0.0, extHits, 990.0, load, 0.0)}, Partial, "counters disagree"},
		{"no scrape", Evidence{PromptTokens: i(1000), NoCounters: "after the request: connection refused"}, Invalid, "a scrape failed): after the request: connection refused"},
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
	if r.DecidedBy != ByCounters {
		t.Fatalf("decided by %q", r.DecidedBy)
	}
}

func TestParse(t *testing.T) {
	for _, v := range All {
		if got, ok := Parse(string(v)); !ok || got != v {
			t.Errorf("Parse(%q) = %q, %v", v, got, ok)
		}
	}
	if _, ok := Parse("cpu_relaod"); ok {
		t.Error("a misspelt verdict parsed")
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
		w := window(gpuHits, 0.0, extHits, 288.0)
		w.Valid, w.Invalidity, w.InvalidReason = false, c.kind, c.reason
		r := Decide(Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), Counters: w})
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
	e := Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), SharedPrefixTokens: 64, BlockSize: 16, Counters: window(extHits, 0.0, load, 0.0)}
	r := Decide(e)
	if r.Verdict != Invalid || !strings.Contains(r.Reason, "gpu_prefix_hits") || strings.Contains(r.Reason, "0 GPU hits") {
		t.Fatalf("got %s (%s), want invalid naming gpu_prefix_hits", r.Verdict, r.Reason)
	}
	e.Counters.Unreadable = map[metrics.Counter]string{gpuHits: "gpu_prefix_hits read NaN after (vllm:prefix_cache_hits_total)"}
	if r := Decide(e); r.Verdict != Invalid || r.Reason != "a counter the verdict needs was not read: gpu_prefix_hits read NaN after (vllm:prefix_cache_hits_total)" {
		t.Fatalf("NaN: got %s (%s)", r.Verdict, r.Reason)
	}
	// With neither hit counter the tier is unknown.
	if r := Decide(Evidence{PromptTokens: i(300), CachedPromptTokens: i(288), Counters: window()}); r.Verdict != TierUnknown {
		t.Fatalf("no hit counters: got %s (%s), want %s", r.Verdict, r.Reason, TierUnknown)
	}
}

// TestSentencesNeverCallAbsentZero: against a server without offload counters, a recompute,
// a GPU hit and a usage disagreement say "external hits not exposed", never "0 external hits",
// and a GPU hit does not claim nothing was loaded from a tier it cannot see.
func TestSentencesNeverCallAbsentZero(t *testing.T) {
	recompute := Decide(Evidence{PromptTokens: i(100000), CachedPromptTokens: i(50000), SharedPrefixTokens: 8000, BlockSize: 16, Counters: window(gpuHits, 992.0)})
	if recompute.Verdict != Recompute || recompute.Reason != "nothing beyond the 8000-token shared prefix was reused (992 GPU hits, external hits not exposed)" {
		t.Errorf("recompute: %s %q", recompute.Verdict, recompute.Reason)
	}
	if !contains(recompute.Notes, "usage reports 50000 cached tokens but the counters moved by 992 GPU hits + external hits not exposed") {
		t.Errorf("recompute notes %q", recompute.Notes)
	}
	hit := Decide(Evidence{PromptTokens: i(70000), SharedPrefixTokens: 8000, BlockSize: 16, Counters: window(gpuHits, 69984.0)})
	if hit.Verdict != GPUHit || !strings.HasSuffix(hit.Reason, "; external hits not exposed") || strings.Contains(hit.Reason, "nothing was loaded") {
		t.Errorf("gpu hit: %s %q", hit.Verdict, hit.Reason)
	}
	for _, r := range []Decision{recompute, hit} {
		for _, s := range append([]string{r.Reason, r.Sentence(), r.Interpretation}, r.Notes...) {
			if strings.Contains(s, "0 external") {
				t.Errorf("%q calls the absent external counter 0", s)
			}
		}
	}
	// With the counter exposed, its 0 is a real 0 and is said.
	if r := Decide(Evidence{PromptTokens: i(100000), SharedPrefixTokens: 8000, BlockSize: 16, Counters: window(gpuHits, 992.0, extHits, 0.0)}); !strings.Contains(r.Reason, "(992 GPU hits, 0 external hits)") {
		t.Errorf("exposed zero: %q", r.Reason)
	}
}

// TestEngineNotes: an engine that names tiers per request says when the response did not;
// one that cannot tell the tiers says why; KVBM's stuck reload counter is named.
func TestEngineNotes(t *testing.T) {
	e := Evidence{PromptTokens: i(1000), CachedPromptTokens: i(990), BlockSize: 16, Counters: window(gpuHits, 0.0, extHits, 990.0),
		Engine: Engine{RequestTier: true}}
	if r := Decide(e); !contains(r.Notes, "the response carried no cached_tokens_details: the verdict rests on the counters alone") {
		t.Errorf("request tier note missing: %v", r.Notes)
	}
	e = Evidence{PromptTokens: i(1000), CachedPromptTokens: i(990), Counters: window(metrics.PromptTokensCached, 990.0),
		Engine: Engine{TierUnknown: "the engine has no tier split"}}
	r := Decide(e)
	if r.Verdict != TierUnknown || !contains(r.Notes, "the engine has no tier split") || !contains(r.Notes, "the cached prompt token counter moved by 990 around the replay") {
		t.Errorf("tier unknown: %s %v", r.Verdict, r.Notes)
	}
	e = Evidence{PromptTokens: i(1000), Counters: window(gpuHits, 0.0, extHits, 0.0, metrics.MatchedTokens, 512.0, metrics.ReloadTokens, 0.0),
		Engine: Engine{ReloadCounterHint: "kvbm's reload counter stays 0"}}
	if r := Decide(e); !contains(r.Notes, "kvbm's reload counter stays 0") {
		t.Errorf("reload hint missing: %v", r.Notes)
	}
}

// TestSetupValidity: the capacity math decides, unless the replay itself shows a host
// reload: then the setup is valid whatever the math could not tell.
func TestSetupValidity(t *testing.T) {
	unknown := &capacity.Assessment{Capacity: record.Capacity{CanProveReload: capacity.Unknown, TierLargerThanGPU: capacity.Unknown}}
	no := &capacity.Assessment{Capacity: record.Capacity{CanProveReload: capacity.No, TierLargerThanGPU: capacity.No, Setup: capacity.Setup{CPUOffloadGiB: 8, StoreBytesPerToken: 20790, GPUKVTokens: 503468}, CPUTierTokens: 413176}}
	reload := Evidence{PromptTokens: i(113674), CachedPromptTokens: i(113408), BlockSize: 16, Counters: window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0)}
	reload.Setup = unknown
	d := Decide(reload)
	if d.SetupValid != capacity.Yes || d.SetupReason != "shown by the replay: 1001721600 bytes were loaded CPU->GPU for the replay" {
		t.Fatalf("reload with unknown math: %s (%s)", d.SetupValid, d.SetupReason)
	}
	if !strings.Contains(d.Interpretation, "The replay itself shows the reload") || !strings.Contains(d.Interpretation, "answered unknown") {
		t.Fatalf("interpretation %q", d.Interpretation)
	}
	gpu := Evidence{PromptTokens: i(59226), CachedPromptTokens: i(59216), BlockSize: 16, SharedPrefixTokens: 0, Counters: window(gpuHits, 59216.0, extHits, 0.0, load, 0.0), Setup: no}
	d = Decide(gpu)
	if d.SetupValid != capacity.No || !strings.Contains(d.Interpretation, "was not a valid GPU-eviction reload setup") {
		t.Fatalf("control: %s (%s): %s", d.SetupValid, d.SetupReason, d.Interpretation)
	}
	if d := Decide(Evidence{NotSent: "the run stopped"}); d.SetupValid != capacity.Unknown {
		t.Fatalf("unmeasured replay: %s", d.SetupValid)
	}
	// A slot engine's host-RAM restore (issue: -np 1 --cache-ram 512, prompt state per token
	// unknown) proves the setup by itself.
	slot := Evidence{PromptTokens: i(2500), CachedPromptTokens: i(2499), Engine: Engine{BySlot: true},
		Slot: &SlotEvidence{CommonPrefix: i(400), Slots: 1, Tolerance: 16}, Setup: unknown}
	d = Decide(slot)
	if d.Verdict != CPUReload || d.SetupValid != capacity.Yes || !strings.Contains(d.SetupReason, "host-RAM prompt cache") {
		t.Fatalf("slot restore: %s %s (%s)", d.Verdict, d.SetupValid, d.SetupReason)
	}
}

// TestDecideBySlotUnlessContaminated: a slot engine is attributed by its slot, unless other
// requests moved its counters during the replay.
func TestDecideBySlotUnlessContaminated(t *testing.T) {
	w := window()
	w.Valid, w.Contaminated, w.Invalidity, w.InvalidReason = false, true, metrics.InvalidContaminated, "2 requests were running at once"
	d := Decide(Evidence{PromptTokens: i(2500), CachedPromptTokens: i(2499), Engine: Engine{BySlot: true},
		Slot: &SlotEvidence{CommonPrefix: i(400), Slots: 1, Tolerance: 16}, Counters: w})
	if d.Verdict != Invalid || d.Slot != nil || !strings.Contains(d.Reason, "other requests ran") {
		t.Fatalf("contaminated slot replay: %s (%s)", d.Verdict, d.Reason)
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

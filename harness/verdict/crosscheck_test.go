package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

// checkNamed returns the decision's cross-check called name, failing when there is none.
func checkNamed(t *testing.T, d Decision, name string) CrossCheck {
	t.Helper()
	for _, c := range d.CrossChecks {
		if c.Name == name {
			return c
		}
	}
	t.Fatalf("no cross-check %s in %+v (notes %v)", name, d.CrossChecks, d.Notes)
	return CrossCheck{}
}

// TestConnectorHitsCrossCheck: LMCache's own hit counter can stay 0 (or lag its 10 s tick)
// while vLLM's external counter and usage show the hit. The verdict goes with the two that
// agree, names the disagreement, and with no third source says the tier is unknown.
func TestConnectorHitsCrossCheck(t *testing.T) {
	base := func(conn float64, usage *int) Evidence {
		return Evidence{PromptTokens: i(6000), CachedPromptTokens: usage, SharedPrefixTokens: 256, BlockSize: 16,
			Engine:   Engine{ConnectorHits: "LMCache's counter lags"},
			Counters: window(gpuHits, 256.0, extHits, 5728.0, metrics.ConnectorHitTokens, conn)}
	}
	d := Decide(base(0, i(5984)))
	if d.Verdict != CPUReload || !contains(d.Notes, "LMCache's counter lags") {
		t.Fatalf("frozen connector counter: %s (%s) %v", d.Verdict, d.Reason, d.Notes)
	}
	if c := checkNamed(t, d, CheckConnectorHits); c.Agrees || !strings.Contains(c.Used, "the external hits, which agree with usage's 5984") {
		t.Fatalf("check %+v", c)
	}
	// The engine's counter is the odd one out: the connector's agrees with usage.
	e := base(5728, i(5984))
	e.Counters.Deltas[extHits] = 0
	if d := Decide(e); d.Verdict != CPUReload || !strings.Contains(checkNamed(t, d, CheckConnectorHits).Used, "the connector's hit tokens") {
		t.Fatalf("connector right: %s (%s) %+v", d.Verdict, d.Reason, d.CrossChecks)
	}
	if d := Decide(base(0, nil)); d.Verdict != TierUnknown || !strings.Contains(d.Reason, "no third source") {
		t.Fatalf("no usage: %s (%s)", d.Verdict, d.Reason)
	}
	// Without usage, vLLM's prompt tokens by source settle it.
	bySource := base(0, nil)
	bySource.Counters.Deltas[metrics.PromptTokensExternal] = 5728
	if d := Decide(bySource); d.Verdict != CPUReload || !strings.Contains(checkNamed(t, d, CheckConnectorHits).Used, "prompt tokens by source") {
		t.Fatalf("by source: %s (%s) %+v", d.Verdict, d.Reason, d.CrossChecks)
	}
	if d := Decide(base(5728, i(5984))); d.Verdict != CPUReload || !checkNamed(t, d, CheckConnectorHits).Agrees {
		t.Fatalf("agreeing: %s %+v", d.Verdict, d.CrossChecks)
	}
}

// TestSplitFromLoadBack: older SGLang has no cache_source split and no per-request details;
// the hit counters are absent (never read as 0), and the load-back counter, checked against
// the cached total, gives the host tier's share.
func TestSplitFromLoadBack(t *testing.T) {
	e := Evidence{PromptTokens: i(11600), CachedPromptTokens: i(11520), SharedPrefixTokens: 256, BlockSize: 1,
		Counters: window(metrics.ReloadTokens, 11264.0, metrics.PromptTokensCached, 11520.0)}
	d := Decide(e)
	if d.Verdict != CPUReload || !strings.Contains(d.Reason, "11264 tokens moved host->GPU") || !checkNamed(t, d, CheckLoadBack).Agrees {
		t.Fatalf("load-back split: %s (%s) %v", d.Verdict, d.Reason, d.Notes)
	}
	if d.UsageAgrees != nil {
		t.Fatalf("usage cannot cross-check a split taken from it: %v", *d.UsageAgrees)
	}
	e.CachedPromptTokens = nil // the cached-token counter stands in
	if d := Decide(e); d.Verdict != CPUReload || !strings.Contains(strings.Join(d.Notes, " "), "the cached-token counter") {
		t.Fatalf("from the counter: %s %v", d.Verdict, d.Notes)
	}
	e.Counters.Deltas[metrics.ReloadTokens] = 40000 // e.g. TP ranks summed
	if d := Decide(e); d.Verdict != TierUnknown || checkNamed(t, d, CheckLoadBack).Agrees {
		t.Fatalf("load-back over the cached total: %s (%s)", d.Verdict, d.Reason)
	}
	none := Evidence{PromptTokens: i(11600), SharedPrefixTokens: 256, Counters: window(metrics.ReloadTokens, 11264.0)}
	if d := Decide(none); d.Verdict != TierUnknown {
		t.Fatalf("no cached total: %s (%s)", d.Verdict, d.Reason)
	}
}

// TestUsageDisagreementNeedsAThirdSource: when usage and both hit counters disagree, vLLM's
// prompt tokens by source (or its cached-token counter) decide; with neither the tier is
// unknown.
func TestUsageDisagreementNeedsAThirdSource(t *testing.T) {
	doubled := func(kv ...any) Evidence {
		return Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 16,
			Counters: window(append([]any{gpuHits, 512.0, extHits, 11456.0}, kv...)...)}
	}
	d := Decide(doubled(metrics.PromptTokensLocalCacheHit, 256.0, metrics.PromptTokensExternal, 5728.0))
	if d.Verdict != CPUReload || !strings.Contains(d.Reason, "5728 tokens") || !strings.Contains(checkNamed(t, d, CheckUsage).Used, "prompt tokens by source") {
		t.Fatalf("by source agrees with usage: %s (%s) %v", d.Verdict, d.Reason, d.Notes)
	}
	usageOff := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(2000), SharedPrefixTokens: 256, BlockSize: 16,
		Counters: window(gpuHits, 256.0, extHits, 5728.0, metrics.PromptTokensLocalCacheHit, 256.0, metrics.PromptTokensExternal, 5728.0)}
	d = Decide(usageOff)
	if d.Verdict != CPUReload || !strings.Contains(checkNamed(t, d, CheckUsage).Used, "the hit counters, which agree") {
		t.Fatalf("by source agrees with the counters: %s %+v", d.Verdict, d.CrossChecks)
	}
	if d := Decide(doubled()); d.Verdict != TierUnknown || !strings.Contains(d.Reason, "no third source") {
		t.Fatalf("no third source: %s (%s)", d.Verdict, d.Reason)
	}
	agree := Decide(Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 16, Counters: window(gpuHits, 256.0, extHits, 5728.0)})
	if !checkNamed(t, agree, CheckUsage).Agrees {
		t.Fatalf("agreeing usage recorded as %+v", agree.CrossChecks)
	}
}

// TestRequestTierStorageThroughHost: SGLang's storage hits are prefetched into the host tier
// and loaded back from there, so load-back is compared with host + storage.
func TestRequestTierStorageThroughHost(t *testing.T) {
	e := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 1,
		RequestTier: &TierTokens{Device: 256, Host: 0, Storage: 5728, StorageBackend: "HiCacheFile"},
		Counters:    window(gpuHits, 256.0, extHits, 5728.0, metrics.ReloadTokens, 5728.0, metrics.CachedFromDisk, 5728.0)}
	d := Decide(e)
	if d.Verdict != CPUReload || strings.Contains(strings.Join(d.Notes, " "), "disagree") {
		t.Fatalf("storage through host: %s %v", d.Verdict, d.Notes)
	}
	for _, c := range d.CrossChecks {
		if !c.Agrees {
			t.Fatalf("check %+v", c)
		}
	}
}

// TestKVBMDiskStagedThroughHost: KVBM v2 serves disk hits disk->host->GPU; the host->GPU
// counter includes them, and the verdict says how many came from disk.
func TestKVBMDiskStagedThroughHost(t *testing.T) {
	e := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 16,
		Counters: window(gpuHits, 256.0, extHits, 5728.0, metrics.ReloadTokens, 5728.0, metrics.DiskStagedTokens, 5728.0)}
	d := Decide(e)
	if d.Verdict != CPUReload || !strings.Contains(strings.Join(d.Notes, " "), "5728 tokens came from the disk tier, staged through the host tier") || !checkNamed(t, d, CheckOnboarded).Agrees {
		t.Fatalf("v2 disk: %s %v %+v", d.Verdict, d.Notes, d.CrossChecks)
	}
	// KVBM v1 reads disk hits disk->GPU: the onboarded total is host + disk.
	e.Counters = window(gpuHits, 256.0, extHits, 5728.0, metrics.ReloadTokens, 0.0, metrics.DiskReloadTokens, 5728.0)
	if d := Decide(e); !checkNamed(t, d, CheckOnboarded).Agrees || !strings.Contains(strings.Join(d.Notes, " "), "onboarded from the disk tier") {
		t.Fatalf("v1 disk: %+v %v", d.CrossChecks, d.Notes)
	}
}

// TestStoreBytesCrossCheck: store bytes against stored tokens times the bytes per stored
// token the capacity math uses.
func TestStoreBytesCrossCheck(t *testing.T) {
	a := &capacity.Assessment{Capacity: record.Capacity{CanProveReload: capacity.Yes, Setup: capacity.Setup{StoreBytesPerToken: 2048, StoreBytesSource: "scenario"}}}
	e := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 16, Setup: a,
		Counters: window(gpuHits, 256.0, extHits, 5728.0),
		Offload:  OffloadEvidence{StoreBytes: f(6000 * 2048), StoreTokens: f(6000)}}
	if d := Decide(e); !checkNamed(t, d, CheckStoreBytes).Agrees {
		t.Fatalf("agreeing: %+v", d.CrossChecks)
	}
	e.Offload.StoreBytes = f(6000 * 4096)
	d := Decide(e)
	if c := checkNamed(t, d, CheckStoreBytes); c.Agrees || !strings.Contains(strings.Join(d.Notes, " "), "cross-check store_bytes_vs_stored_tokens") {
		t.Fatalf("disagreeing: %+v %v", c, d.Notes)
	}
}

// TestCountersLag: TensorRT-LLM counts a request after it ends; a window whose prompt
// counter has not caught up says nothing about the tier.
func TestCountersLag(t *testing.T) {
	e := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), SharedPrefixTokens: 256, BlockSize: 32,
		Engine:   Engine{CountersLag: "the collector lags"},
		Counters: window(metrics.PromptTokens, 0.0, gpuHits, 0.0, extHits, 0.0)}
	if d := Decide(e); d.Verdict != TierUnknown || !contains(d.Notes, "the collector lags") {
		t.Fatalf("lagging: %s (%s) %v", d.Verdict, d.Reason, d.Notes)
	}
	e.Counters = window(metrics.PromptTokens, 6000.0, gpuHits, 256.0, extHits, 5728.0, load, 1e6)
	e.Engine.LoadBytesCaveat = "onboard bytes also move on resume"
	d := Decide(e)
	if d.Verdict != CPUReload || !contains(d.Notes, "onboard bytes also move on resume") {
		t.Fatalf("caught up: %s (%s) %v", d.Verdict, d.Reason, d.Notes)
	}
}

// TestSlotQuantizedCounter: llama.cpp's counters above 10^6 move in steps of 10 tokens; the
// cached-token counter is then no count of one request, and usage decides without a false
// disagreement.
func TestSlotQuantizedCounter(t *testing.T) {
	w := window(metrics.PromptTokensCached, 1250.0)
	w.Resolution = map[metrics.Counter]float64{metrics.PromptTokensCached: 10}
	e := Evidence{PromptTokens: i(1300), CachedPromptTokens: i(1244), Engine: Engine{BySlot: true},
		Slot: &SlotEvidence{CommonPrefix: i(256), Slots: 1, Tolerance: 16}, Counters: w}
	d := Decide(e)
	notes := strings.Join(d.Notes, " ")
	if d.Verdict != CPUReload || strings.Contains(notes, "but usage reports") || !strings.Contains(notes, "6 significant digits") || !checkNamed(t, d, CheckCachedCounter).Agrees {
		t.Fatalf("quantized: %s %v", d.Verdict, d.Notes)
	}
	w.Resolution = nil
	if d := Decide(e); !strings.Contains(strings.Join(d.Notes, " "), "the cached-tokens counter moved by 1250 but usage reports 1244") {
		t.Fatalf("exact counter off by 6: %v", d.Notes)
	}
}

// TestTierUnknownWithOnboardBytes: TensorRT-LLM without a tier split: onboard bytes are
// named as a sign of a reload with their caveat, never as its proof.
func TestTierUnknownWithOnboardBytes(t *testing.T) {
	e := Evidence{PromptTokens: i(6000), CachedPromptTokens: i(5984), BlockSize: 32,
		Engine:   Engine{TierUnknown: "no tier split", LoadBytesCaveat: "onboard bytes also move on resume"},
		Counters: window(metrics.PromptTokensCached, 5984.0, load, 1e6)}
	d := Decide(e)
	if d.Verdict != TierUnknown || !contains(d.Notes, "onboard bytes also move on resume") || !strings.Contains(strings.Join(d.Notes, " "), "1000000 bytes were onboarded host->GPU") {
		t.Fatalf("%s %v", d.Verdict, d.Notes)
	}
}

package sim

import "testing"

// TestStoreThresholdCountsLookupsAfterGPUHits: with store_threshold 2 a block counts only
// when the connector looks it up, after the GPU prefix hits (vLLM's connector), not each
// time it is offered for a store: a prompt the GPU keeps serving stores only its last block,
// the one block past the hits; once the GPU has dropped it, a second lookup stores the rest.
func TestStoreThresholdCountsLookupsAfterGPUHits(t *testing.T) {
	p := engineProfile(t, 64, 256)
	p.StoreThreshold = 2
	e := NewEngine(p)
	a := syntheticPrompt(0, 320) // 20 blocks, 19 of them hittable
	checkPrefill(t, "first", serve(t, e, a), PrefillResult{Tokens: 320, ComputedTokens: 320})
	for i := 0; i < 2; i++ {
		// Block 19 is looked up a second time and stored once; the 19 GPU hits never count.
		want := PrefillResult{Tokens: 320, GPUHitTokens: 304, ComputedTokens: 16}
		if i == 0 {
			want.StoredBytes = 16 * testStoreBytes
		}
		checkPrefill(t, "on the GPU", serve(t, e, a), want)
	}
	if c := e.Counters(); c.StoresSkipped != 20+2*19 {
		t.Errorf("stores skipped %d, want 20 then 19 GPU hits twice", c.StoresSkipped)
	}
	for seed := uint64(1); seed <= 4; seed++ {
		serve(t, e, syntheticPrompt(seed, 320)) // evicts a from the GPU, each stored nothing
	}
	checkPrefill(t, "evicted", serve(t, e, a), PrefillResult{Tokens: 320, ComputedTokens: 320, StoredBytes: 19 * 16 * testStoreBytes})
	for seed := uint64(5); seed <= 8; seed++ {
		serve(t, e, syntheticPrompt(seed, 320))
	}
	checkPrefill(t, "reloaded", serve(t, e, a), PrefillResult{Tokens: 320, ExternalHitTokens: 304, ComputedTokens: 16, LoadedBytes: 304 * testLoadBytes})
}

// TestReuseTrackerDropsLeastRecent: the count table holds maxTrackerSize hashes; a new one
// drops the least recently looked up with its count.
func TestReuseTrackerDropsLeastRecent(t *testing.T) {
	tr := newReuseTracker()
	tr.lookup([]uint64{1, 1})
	for h := uint64(2); h <= maxTrackerSize; h++ {
		tr.lookup([]uint64{h})
	}
	tr.lookup([]uint64{1}) // 1 is now the most recent, 2 the least
	tr.lookup([]uint64{maxTrackerSize + 1})
	if tr.count(1) != 3 || tr.count(2) != 0 || tr.count(3) != 1 || tr.count(maxTrackerSize+1) != 1 || len(tr.entries) != maxTrackerSize {
		t.Errorf("counts 1:%d 2:%d 3:%d new:%d, %d entries", tr.count(1), tr.count(2), tr.count(3), tr.count(maxTrackerSize+1), len(tr.entries))
	}
}

package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// TestDecideByRequestTier: the response's own tier split decides; counters that disagree are
// named in the notes and change nothing.
func TestDecideByRequestTier(t *testing.T) {
	base := Evidence{PromptTokens: i(100000), CachedPromptTokens: i(99984), SharedPrefixTokens: 8000, BlockSize: 16,
		RequestTier: &TierTokens{Device: 7984, Host: 92000}, Counters: window()}
	agree := base
	agree.Counters = window(gpuHits, 7984.0, extHits, 92000.0, metrics.ReloadTokens, 92000.0)
	r := Decide(agree)
	if r.Verdict != CPUReload || r.DecidedBy != ByRequestTier || !strings.Contains(r.Reason, "92000 tokens moved host->GPU") {
		t.Fatalf("agreeing: %s by %s: %s", r.Verdict, r.DecidedBy, r.Reason)
	}
	if strings.Contains(strings.Join(r.Notes, " "), "disagree") {
		t.Fatalf("agreeing counters noted as disagreeing: %v", r.Notes)
	}

	// The load-back counter says nothing moved: still a reload by the request's word, and
	// the disagreement is in the notes with both numbers.
	off := agree
	off.Counters = window(gpuHits, 7984.0, extHits, 40000.0, metrics.ReloadTokens, 0.0)
	r = Decide(off)
	notes := strings.Join(r.Notes, " | ")
	if r.Verdict != CPUReload || !strings.Contains(notes, "load-back (host->GPU) counter moved by 0 but the response reports 92000 host") ||
		!strings.Contains(notes, "host cached-token counter moved by 40000") {
		t.Fatalf("disagreeing: %s: %v", r.Verdict, r.Notes)
	}
	if r.SetupValid != "yes" || !strings.Contains(r.SetupReason, "the response reports 92000 cached tokens from the host tier") {
		t.Fatalf("setup from the request's tiers: %s (%s)", r.SetupValid, r.SetupReason)
	}

	// Old servers: no cache_source split, the request alone decides.
	bare := base
	bare.RequestTier = &TierTokens{Device: 99984}
	if r := Decide(bare); r.Verdict != GPUHit {
		t.Fatalf("device only: %s: %s", r.Verdict, r.Reason)
	}
}

// TestReloadCounterCrossCheck: KVBM's onboarded tokens confirm a counter-decided reload, or
// are noted when they disagree; disk onboards are named.
func TestReloadCounterCrossCheck(t *testing.T) {
	e := Evidence{PromptTokens: i(50000), BlockSize: 16, Counters: window(gpuHits, 0.0, extHits, 49984.0, metrics.ReloadTokens, 49984.0)}
	if r := Decide(e); r.Verdict != CPUReload || !strings.Contains(r.Reason, "49984 tokens moved host->GPU") || len(r.Notes) != 0 {
		t.Fatalf("agreeing: %s %s %v", r.Verdict, r.Reason, r.Notes)
	}
	e.Counters = window(gpuHits, 0.0, extHits, 49984.0, metrics.ReloadTokens, 0.0, metrics.DiskReloadTokens, 160.0)
	r := Decide(e)
	notes := strings.Join(r.Notes, " | ")
	if r.Verdict != CPUReload || !strings.Contains(notes, "reload counter did not move while 49984 external hits") || !strings.Contains(notes, "160 tokens were onboarded from the disk tier") {
		t.Fatalf("stuck counter: %s %v", r.Verdict, r.Notes)
	}
}

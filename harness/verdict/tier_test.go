package verdict

import (
	"strings"
	"testing"
)

// TestDecideByRequestTier: the response's own tier split decides; counters that disagree are
// named in the notes and change nothing.
func TestDecideByRequestTier(t *testing.T) {
	base := Evidence{PromptTokens: i(100000), CachedPromptTokens: i(99984), SharedPrefixTokens: 8000, BlockSize: 16, CountersValid: true,
		RequestTier: &TierTokens{Device: 7984, Host: 92000}}
	agree := base
	agree.GPUHitsDelta, agree.ExternalHitsDelta, agree.ReloadTokensDelta = f(7984), f(92000), f(92000)
	r := Decide(agree)
	if r.Verdict != CPUReload || !strings.Contains(r.Reason, "92000 tokens moved host->GPU") {
		t.Fatalf("agreeing: %s: %s", r.Verdict, r.Reason)
	}
	if strings.Contains(strings.Join(r.Notes, " "), "disagree") {
		t.Fatalf("agreeing counters noted as disagreeing: %v", r.Notes)
	}

	// The load-back counter says nothing moved: still a reload by the request's word, and
	// the disagreement is in the notes with both numbers.
	off := agree
	off.ReloadTokensDelta, off.ExternalHitsDelta = f(0), f(40000)
	r = Decide(off)
	notes := strings.Join(r.Notes, " | ")
	if r.Verdict != CPUReload || !strings.Contains(notes, "load-back (host->GPU) counter moved by 0 but the response reports 92000 host") ||
		!strings.Contains(notes, "host cached-token counter moved by 40000") {
		t.Fatalf("disagreeing: %s: %v", r.Verdict, r.Notes)
	}
	// The record keeps the counters as read, not the request's numbers put in their place.
	if *r.Evidence.ExternalHitsDelta != 40000 || r.Evidence.RequestTier.Host != 92000 {
		t.Fatalf("evidence rewritten: %+v", r.Evidence)
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
	e := Evidence{PromptTokens: i(50000), GPUHitsDelta: f(0), ExternalHitsDelta: f(49984), ReloadTokensDelta: f(49984), BlockSize: 16, CountersValid: true}
	if r := Decide(e); r.Verdict != CPUReload || !strings.Contains(r.Reason, "49984 tokens moved host->GPU") || len(r.Notes) != 0 {
		t.Fatalf("agreeing: %s %s %v", r.Verdict, r.Reason, r.Notes)
	}
	e.ReloadTokensDelta, e.DiskReloadTokensDelta = f(0), f(160)
	r := Decide(e)
	notes := strings.Join(r.Notes, " | ")
	if r.Verdict != CPUReload || !strings.Contains(notes, "reload counter did not move while 49984 external hits") || !strings.Contains(notes, "160 tokens were onboarded from the disk tier") {
		t.Fatalf("stuck counter: %s %v", r.Verdict, r.Notes)
	}
}

package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

func TestDecideBySlot(t *testing.T) {
	// Facts measured on llama-server with -np 1: six 6025-token prompts sharing 818 tokens,
	// then prompt 0 again.
	slot := func(cached int, common *int, slots int) Evidence {
		return Evidence{PromptTokens: i(6025), CachedPromptTokens: i(cached), Engine: Engine{BySlot: true},
			Slot: &SlotEvidence{CommonPrefix: common, Slots: slots, Tolerance: 16}}
	}
	cases := []struct {
		name    string
		e       Evidence
		verdict Verdict
		reason  string
	}{
		{"RAM tier restores the replay", slot(6024, i(818), 1), CPUReload, "5206 cached tokens"},
		{"no RAM tier: the shared prefix only", slot(818, i(818), 1), Recompute, "only the 818-token common prefix"},
		{"same prompt again: live slot", slot(6024, i(6025), 1), GPUHit, "live slot hit"},
		{"half restored", slot(3000, i(818), 1), Partial, "cover only 49.8%"},
		{"several slots", slot(6024, i(818), 4), TierUnknown, "4 slots"},
		{"no token ids", slot(6024, nil, 1), TierUnknown, "token ids"},
		{"failed", Evidence{Failed: true, Failure: "stream cut", Engine: Engine{BySlot: true}}, Invalid, "stream cut"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := Decide(c.e)
			if r.Verdict != c.verdict || !strings.Contains(r.Reason, c.reason) {
				t.Fatalf("got %s (%s), want %s with %q", r.Verdict, r.Reason, c.verdict, c.reason)
			}
		})
	}
	r := Decide(slot(6024, i(818), 1))
	if r.Slot == nil || *r.Slot.LiveTokens != 818 || *r.Slot.HostTokens != 5206 || r.Sentence() != "The replay was restored from the host-RAM prompt cache." {
		t.Fatalf("attribution %+v: %s", r.Slot, r.Sentence())
	}
	// The cached-tokens counter cross-checks usage.
	e := slot(6024, i(818), 1)
	e.Counters = window(metrics.PromptTokensCached, 6000.0)
	if r := Decide(e); !contains(r.Notes, "the cached-tokens counter moved by 6000 but usage reports 6024") {
		t.Fatalf("notes %v", r.Notes)
	}
}

// TestDecideBySlotSaysWhyPrefixUnknown: when no single request preceded the replay, the
// reason says so instead of blaming the token ids.
func TestDecideBySlotSaysWhyPrefixUnknown(t *testing.T) {
	r := Decide(Evidence{PromptTokens: i(300), CachedPromptTokens: i(296), Engine: Engine{BySlot: true},
		Slot: &SlotEvidence{Slots: 1, NoCommonPrefix: "no single request was sent just before the replay"}})
	if r.Verdict != TierUnknown || !strings.Contains(r.Reason, "no single request") || strings.Contains(r.Reason, "token ids") {
		t.Fatalf("%s: %s", r.Verdict, r.Reason)
	}
}

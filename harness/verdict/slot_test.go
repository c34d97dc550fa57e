package verdict

import (
	"strings"
	"testing"
)

func TestDecideBySlot(t *testing.T) {
	// Facts measured on llama-server with -np 1 (issue 6): six 6025-token prompts sharing
	// 818 tokens, then prompt 0 again.
	cases := []struct {
		name    string
		e       SlotEvidence
		verdict string
		reason  string
	}{
		{"RAM tier restores the replay", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(6024), CommonPrefix: i(818), Slots: 1, Tolerance: 16}, CPUReload, "5206 cached tokens"},
		{"no RAM tier: the shared prefix only", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(818), CommonPrefix: i(818), Slots: 1, Tolerance: 16}, Recompute, "only the 818-token common prefix"},
		{"same prompt again: live slot", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(6024), CommonPrefix: i(6025), Slots: 1, Tolerance: 16}, GPUHit, "live slot hit"},
		{"half restored", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(3000), CommonPrefix: i(818), Slots: 1, Tolerance: 16}, Partial, "cover only 49.8%"},
		{"several slots", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(6024), CommonPrefix: i(818), Slots: 4, Tolerance: 16}, TierUnknown, "4 slots"},
		{"no token ids", SlotEvidence{PromptTokens: i(6025), CachedPromptTokens: i(6024), Slots: 1}, TierUnknown, "token ids"},
		{"failed", SlotEvidence{RequestFailed: true, RequestFailure: "stream cut"}, Invalid, "stream cut"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := DecideBySlot(c.e)
			if r.Verdict != c.verdict || !strings.Contains(r.Reason, c.reason) {
				t.Fatalf("got %s (%s), want %s with %q", r.Verdict, r.Reason, c.verdict, c.reason)
			}
		})
	}
}

// TestDecideBySlotSaysWhyPrefixUnknown: when no single request preceded the replay, the
// reason says so instead of blaming the token ids.
func TestDecideBySlotSaysWhyPrefixUnknown(t *testing.T) {
	p, c := 300, 296
	r := DecideBySlot(SlotEvidence{PromptTokens: &p, CachedPromptTokens: &c, Slots: 1,
		NoCommonPrefix: "no single request was sent just before the replay"})
	if r.Verdict != TierUnknown || !strings.Contains(r.Reason, "no single request") || strings.Contains(r.Reason, "token ids") {
		t.Fatalf("%s: %s", r.Verdict, r.Reason)
	}
}

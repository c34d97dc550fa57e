package capacity

import (
	"strings"
	"testing"
)

// TestAssessSingleSlot is the llama.cpp run (-np 1 -c 16384 --cache-ram 512, five
// ~2,500-token prompts sharing 400, then prompt 0 again) and its variations: the live slot
// holds only the last prompt, so validity rests on the host tier alone.
func TestAssessSingleSlot(t *testing.T) {
	ram := Setup{Topology: SingleSlot, Slots: 1, GPUKVTokens: 16384, CPUOffloadGiB: 0.5, HostTierUnit: "MiB", StoreBytesPerToken: 523, StoreBytesSource: "scenario"}
	five := Sequence{Tokens: []int{2511, 2498, 2503, 2490, 2505}, SharedPrefix: 400, Counting: "measured"}
	last := five
	last.Target = 4
	noCache, tiny, two := ram, ram, ram
	noCache.CPUOffloadGiB = 0
	tiny.CPUOffloadGiB = 4.0 / 1024 // 4 MiB: about 8,000 tokens of state
	two.Slots = 2
	cases := []struct {
		name                           string
		setup                          Setup
		seq                            Sequence
		pressure, larger, holds, prove Answer
		conclusion                     string
	}{
		{"RAM-tier reload", ram, five, Yes, Yes, Yes, Yes, "a valid host-tier reload setup"},
		{"replayed prompt still live", ram, last, No, Yes, Yes, No, "stayed in the live slot"},
		{"no host cache", noCache, five, Yes, No, No, No, "No host prompt cache"},
		{"host tier overflows", tiny, five, Yes, No, No, No, "overflowed the 4 MiB host tier"},
		{"two slots", two, five, Unknown, Yes, Yes, Unknown, "2 slots"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Assess(c.setup, c.seq)
			if a.EvictionPressure != c.pressure || a.TierLargerThanGPU != c.larger || a.TierHoldsSequence != c.holds || a.CanProveReload != c.prove {
				t.Fatalf("pressure %s larger %s holds %s prove %s; findings %q", a.EvictionPressure, a.TierLargerThanGPU, a.TierHoldsSequence, a.CanProveReload, a.Findings)
			}
			if got := a.Conclusion(); !strings.Contains(got, c.conclusion) {
				t.Fatalf("conclusion %q lacks %q", got, c.conclusion)
			}
			// The shared-pool sentence that contradicted a confirmed reload must not appear.
			if strings.Contains(a.Conclusion(), "GPU KV pool") {
				t.Fatalf("single-slot conclusion speaks of a shared GPU pool: %q", a.Conclusion())
			}
			if c.prove != Yes && len(a.Reasons()) == 0 && c.prove == No {
				t.Fatalf("no reasons for %s", c.prove)
			}
		})
	}
	if got := Assess(ram, five).HostTokensNeeded; got != 2511+2498+2503+2490+2505 {
		t.Fatalf("host tokens needed %d: each prompt is saved whole", got)
	}
	// The same figures on a shared pool read as "fits in the pool": the topology decides.
	shared := ram
	shared.Topology = SharedPool
	if a := Assess(shared, five); a.EvictionPressure != No {
		t.Fatalf("shared pool: pressure %s", a.EvictionPressure)
	}
}

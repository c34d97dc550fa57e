package capacity

import (
	"strings"
	"testing"
)

func TestAssessSeedStudies(t *testing.T) {
	seed16 := Setup{GPUKVTokens: 506283, CPUOffloadGiB: 16, StoreBytesPerToken: 20790, StoreBytesSource: "scenario"}
	seed8 := Setup{GPUKVTokens: 503468, CPUOffloadGiB: 8, StoreBytesPerToken: 20790, StoreBytesSource: "scenario"}
	six := func(n int) []int { return []int{n, n, n, n, n, n} }
	cases := []struct {
		name                           string
		setup                          Setup
		seq                            Sequence
		unique                         int
		pressure, larger, holds, prove Answer
		finding                        string
	}{
		{"seed 001 as measured", seed16, Sequence{Tokens: six(113674), SharedPrefix: 8000, Counting: "measured"},
			8000 + 6*105674, Yes, Yes, Yes, Yes, "a valid eviction-reload setup"},
		{"seed 001 counted exactly overflows the tier", seed16, Sequence{Tokens: six(150000), SharedPrefix: 8000, Counting: "server"},
			860000, Yes, Yes, No, No, "are evicted from the CPU tier"},
		{"seed 001 planned by estimate may fit", seed16, Sequence{Tokens: six(150000), SharedPrefix: 8000, Counting: "estimate"},
			860000, Yes, Yes, Unknown, Unknown, "known once it counts them"},
		{"offload8 control", seed8, Sequence{Tokens: []int{70000, 80000, 100000}, Nested: true, SharedPrefix: 8000, Counting: "estimate"},
			100000, No, No, Yes, No, "not a valid GPU-eviction reload setup"},
		{"unknown bytes per token", Setup{GPUKVTokens: 1000, CPUOffloadGiB: 1}, Sequence{Tokens: []int{800, 800}, SharedPrefix: 100},
			1500, Yes, Unknown, Unknown, Unknown, "cannot be compared"},
		{"no tier", Setup{GPUKVTokens: 1000, StoreBytesPerToken: 10}, Sequence{Tokens: []int{800, 800}},
			1600, Yes, No, No, No, "No CPU offload tier"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := Assess(c.setup, c.seq)
			if a.UniqueTokens != c.unique || a.EvictionPressure != c.pressure || a.TierLargerThanGPU != c.larger ||
				a.TierHoldsSequence != c.holds || a.CanProveReload != c.prove {
				t.Fatalf("got unique %d pressure %s larger %s holds %s prove %s", a.UniqueTokens, a.EvictionPressure, a.TierLargerThanGPU, a.TierHoldsSequence, a.CanProveReload)
			}
			if !strings.Contains(strings.Join(a.Findings, " "), c.finding) {
				t.Fatalf("findings %q lack %q", a.Findings, c.finding)
			}
		})
	}
	// The 16 GiB tier at seed 001's stored bytes per token holds ~826k tokens, the 8 GiB ~413k.
	if got := Assess(seed16, Sequence{Tokens: []int{1}}).CPUTierTokens; got != 826352 {
		t.Fatalf("16 GiB tier tokens %v", got)
	}
	if got := Assess(seed8, Sequence{Tokens: []int{1}}).CPUTierTokens; got != 413176 {
		t.Fatalf("8 GiB tier tokens %v", got)
	}
}

// TestHostTierInTokens: a server that reports its host tier in tokens (SGLang's
// hicache_host_total_tokens) needs no bytes per token for the comparison with the GPU pool.
func TestHostTierInTokens(t *testing.T) {
	s := Resolve(SharedPool, "GiB", Figures{Source: "scenario", GPUKVTokens: 4096},
		Figures{Source: "server (sglang:hicache_host_total_tokens)", HostTierTokens: 8192})
	a := Assess(s, Sequence{Tokens: []int{1500, 1500, 1500, 1500}, SharedPrefix: 256, Counting: "measured"})
	if a.CPUTierTokens != 8192 || a.TierLargerThanGPU != Yes || a.TierHoldsSequence != Yes || a.CanProveReload != Yes {
		t.Fatalf("%+v", a)
	}
	if c := a.Conclusion(); !strings.Contains(c, "host tier of 8,192 tokens (server (sglang:hicache_host_total_tokens))") {
		t.Fatalf("conclusion %q", c)
	}
	small := Resolve(SharedPool, "GiB", Figures{Source: "scenario", GPUKVTokens: 4096}, Figures{Source: "server", HostTierTokens: 2048})
	if a := Assess(small, Sequence{Tokens: []int{1500, 1500, 1500, 1500}, SharedPrefix: 256, Counting: "measured"}); a.TierLargerThanGPU != No || !strings.Contains(a.Conclusion(), "smaller than") {
		t.Fatalf("small tier %+v: %s", a, a.Conclusion())
	}
}

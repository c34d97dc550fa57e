package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// disagreements are d's counters_disagree findings.
func disagreements(d Decision) []string {
	var out []string
	for _, g := range d.Diagnosis {
		if g.Cause == DiagCountersDisagree {
			out = append(out, g.Detail)
		}
	}
	return out
}

// TestConservation: seed 001's replay adds up, its tiers and its load bytes; each way the
// parts can fail to make the whole is a counters_disagree finding naming both sides, and the
// verdict is left as the rules decided it.
func TestConservation(t *testing.T) {
	seed := Evidence{PromptTokens: i(113674), CachedPromptTokens: i(113408), SharedPrefixTokens: 8000, BlockSize: 16, LoadBytesPerToken: 8833,
		Counters: window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0, metrics.PromptTokensLocalCompute, 266.0)}
	d := Decide(seed)
	s := d.TierSplit
	if d.Verdict != CPUReload || s == nil || s.AddsUp == nil || !*s.AddsUp || *s.Sum != 113674 || *s.Host != 113408 || *s.GPU != 0 ||
		*s.Recomputed != 266 || s.Disk != nil || s.Remote != nil || len(disagreements(d)) != 0 {
		t.Fatalf("seed 001: %s %+v %v", d.Verdict, s, d.Diagnosis)
	}

	for name, tc := range map[string]struct {
		e     Evidence
		sides []string
	}{
		// The computed-token counter says far more was computed than usage left uncached.
		"recomputed": {func() Evidence {
			e := seed
			e.Counters = window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0, metrics.PromptTokensLocalCompute, 60000.0)
			return e
		}(), []string{"recomputed 60000 (the computed-prompt-token counter) = 173408", "usage's 113674 prompt tokens"}},
		// A tenth of the bytes for the same tokens.
		"load bytes": {func() Evidence {
			e := seed
			e.Counters = window(gpuHits, 0.0, extHits, 113408.0, load, 100172160.0, metrics.PromptTokensLocalCompute, 266.0)
			return e
		}(), []string{"100172160 bytes loaded", "113408 reloaded tokens x 8833 bytes per token"}},
		// KVBM's disk onboards exceed every non-GPU hit vLLM counted.
		"disk beyond external": {func() Evidence {
			e := seed
			e.LoadBytesPerToken = 0
			e.Counters = window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0, metrics.PromptTokensLocalCompute, 266.0, metrics.DiskStagedTokens, 150000.0)
			return e
		}(), []string{"the disk and remote tiers' 150000 tokens", "the 113408 tokens of every tier outside GPU memory"}},
		// SGLang's own split is the hits; its prompt-token counter moved by twice the prompt.
		"request tiers": {Evidence{PromptTokens: i(100000), CachedPromptTokens: i(99984), SharedPrefixTokens: 8000, BlockSize: 16,
			RequestTier: &TierTokens{Device: 7984, Host: 72000, Storage: 20000, StorageBackend: "file"},
			Counters:    window(metrics.PromptTokens, 200000.0, metrics.PromptTokensCached, 99984.0)},
			[]string{"GPU 7984 + host 72000 + disk 20000 + remote absent + recomputed 100016", "usage's 100000 prompt tokens"}},
	} {
		t.Run(name, func(t *testing.T) {
			ref := Decide(tc.e)
			found := disagreements(ref)
			if len(found) != 1 {
				t.Fatalf("findings %v (verdict %s: %s)", found, ref.Verdict, ref.Reason)
			}
			for _, s := range tc.sides {
				if !strings.Contains(found[0], s) {
					t.Errorf("finding %q lacks %q", found[0], s)
				}
			}
			if !strings.Contains(strings.Join(ref.Notes, " "), "disagree") {
				t.Errorf("no note: %v", ref.Notes)
			}
		})
	}

	// The verdict stands: the stuck computed-token counter does not turn a reload into
	// anything else.
	e := seed
	e.Counters = window(gpuHits, 0.0, extHits, 113408.0, load, 1001721600.0, metrics.PromptTokensLocalCompute, 60000.0)
	if d := Decide(e); d.Verdict != CPUReload || d.TierSplit.AddsUp == nil || *d.TierSplit.AddsUp {
		t.Fatalf("%s %+v", d.Verdict, d.TierSplit)
	}
	// Without a GPU hit counter the parts cannot be summed: the split says so, no finding.
	e.Counters = window(extHits, 113408.0, load, 1001721600.0)
	e.LoadBytesPerToken = 0
	if d := Decide(e); d.TierSplit != nil && d.TierSplit.AddsUp != nil || len(disagreements(d)) != 0 {
		t.Fatalf("no GPU counter: %+v %v", d.TierSplit, d.Diagnosis)
	}
}

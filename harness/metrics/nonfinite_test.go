package metrics_test

import (
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

func present(v float64, source string) Reading {
	return Reading{Value: v, Present: true, Source: source}
}

// TestNonFiniteIsUnreadable: a counter served as NaN or +Inf is neither present nor 0, also
// when summed with another URL.
func TestNonFiniteIsUnreadable(t *testing.T) {
	prof := mustProfile(t, "vllm")
	good := "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total 500\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 40\n"
	for _, v := range []string{"NaN", "+Inf", "-Inf"} {
		bad := "# TYPE vllm:prefix_cache_hits_total counter\nvllm:prefix_cache_hits_total " + v + "\n# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 80\n"
		after := prof.Snapshot(mustParse(t, bad, "after"))
		r := after.Counters[GPUPrefixHits]
		if r.Present || r.Value != 0 || r.Unreadable != v || r.Source != "vllm:prefix_cache_hits_total" || r.Ptr() != nil {
			t.Errorf("%s: reading %+v, want unreadable %s, not present", v, r, v)
		}
		if p := after.Counters[PromptTokens]; !p.Present || p.Value != 80 {
			t.Errorf("%s: prompt tokens %+v, want 80", v, p)
		}
		sum := prof.Snapshot(mustParse(t, good, "a"), mustParse(t, bad, "b")).Counters[GPUPrefixHits]
		if sum.Present || sum.Unreadable != v {
			t.Errorf("%s: summed reading %+v, want unreadable", v, sum)
		}
	}
}

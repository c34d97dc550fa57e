package sim

import (
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// cached is usage's cached prompt tokens, 0 when the details are left out.
func cached(u *openai.Usage) int {
	if u.PromptTokensDetails == nil {
		return 0
	}
	return u.PromptTokensDetails.CachedTokens
}

// perEngine reads a counter family's value for each engine label 0..n-1.
func perEngine(t *testing.T, s *Server, name string, n int) []float64 {
	t.Helper()
	fams := metrics(t, s)
	out := make([]float64, n)
	for i := range n {
		out[i] = metricSum(fams, name, "engine", string(rune('0'+i)))
	}
	return out
}

// TestRoundRobinReplicasHaveOwnCaches: with two replicas routed in turn, the same prompt sent
// twice lands on the other replica, which never saw it and computes it all; the third time
// it is back on the first replica and hits its GPU cache. /metrics shows each replica's
// counters under its own engine label.
func TestRoundRobinReplicasHaveOwnCaches(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.DataParallel, p.Router = 2, RouterRoundRobin })
	prompt := proseOfTokens(1500, 7)
	first := chat(t, s, prompt, 4)
	second := chat(t, s, prompt, 4)
	third := chat(t, s, prompt, 4)
	if cached(first) != 0 || cached(second) != 0 {
		t.Fatalf("cached tokens %d then %d: the second request should have reached the other replica's empty cache",
			cached(first), cached(second))
	}
	if got := cached(third); got < third.PromptTokens-s.Profile().BlockSize {
		t.Fatalf("third request cached %d of %d: it should hit the first replica's GPU cache", got, third.PromptTokens)
	}
	prompts := perEngine(t, s, "vllm:prompt_tokens_total", 2)
	if prompts[0] != float64(2*first.PromptTokens) || prompts[1] != float64(first.PromptTokens) {
		t.Fatalf("prompt tokens per engine %v, want %d and %d", prompts, 2*first.PromptTokens, first.PromptTokens)
	}
	hits := perEngine(t, s, "vllm:prefix_cache_hits_total", 2)
	if hits[1] != 0 || hits[0] != float64(cached(third)) {
		t.Fatalf("prefix hits per engine %v", hits)
	}
	// Each replica reports its own full pool.
	if got := perEngine(t, s, "vllm:cache_config_info", 2); got[0] != 1 || got[1] != 1 {
		t.Fatalf("cache_config_info series per engine %v", got)
	}
	raw := rawMetrics(t, s)
	if strings.Count(raw, "# TYPE vllm:prompt_tokens_total counter") != 1 ||
		strings.Count(raw, `num_gpu_blocks="256"`) != 2 {
		t.Fatalf("families are not merged, or pools not per replica:\n%s", raw)
	}
}

// TestPrefixAffinityFollowsCache: the router sends a prompt back to the replica holding its
// prefix, so every repeat hits; an unrelated prompt goes to the idle replica in turn.
func TestPrefixAffinityFollowsCache(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.DataParallel, p.Router = 2, RouterPrefixAffinity })
	a, b := proseOfTokens(1500, 7), proseOfTokens(1500, 8)
	first := chat(t, s, a, 4)
	chat(t, s, b, 4)
	for i := range 3 {
		u := chat(t, s, a, 4)
		if cached(u) < u.PromptTokens-s.Profile().BlockSize {
			t.Fatalf("repeat %d cached %d of %d: affinity should route it to the replica holding it", i, cached(u), u.PromptTokens)
		}
	}
	prompts := perEngine(t, s, "vllm:prompt_tokens_total", 2)
	if prompts[0] != float64(4*first.PromptTokens) || prompts[1] == 0 {
		t.Fatalf("prompt tokens per engine %v: want prompt a (%d tokens) four times on engine 0, b on engine 1", prompts, first.PromptTokens)
	}
}

func TestDataParallelValidation(t *testing.T) {
	for _, c := range []struct {
		name string
		set  func(*Profile)
		want string
	}{
		{"router", func(p *Profile) { p.DataParallel, p.Router = 2, "random" }, `router "random" must be one of`},
		{"both", func(p *Profile) { p.DataParallel, p.DataParallelEngines = 2, 2 }, "cannot both be above 1"},
		{"negative", func(p *Profile) { p.DataParallel = -1 }, "data_parallel -1 must be >= 1"},
	} {
		p, err := LoadProfile("tiny")
		if err != nil {
			t.Fatal(err)
		}
		c.set(&p)
		if err := p.Validate(); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s: %v, want %q", c.name, err, c.want)
		}
	}
}

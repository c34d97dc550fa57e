package trace

import (
	"fmt"
	"math"
	"strings"
	"testing"
	"time"
)

func generateText(t testing.TB, cfg GeneratorConfig) string {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if n, err := WriteJSONL(&b, g); err != nil || n != cfg.Requests {
		t.Fatalf("wrote %d of %d requests: %v", n, cfg.Requests, err)
	}
	return b.String()
}

func smallConfig(seed uint64) GeneratorConfig {
	cfg := DefaultGeneratorConfig()
	cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = seed, 300, 1.0/32, 16
	return cfg
}

func TestGeneratorIsDeterministic(t *testing.T) {
	a, b := generateText(t, smallConfig(7)), generateText(t, smallConfig(7))
	if a != b {
		t.Fatal("one seed gave two traces")
	}
	if generateText(t, smallConfig(8)) == a {
		t.Fatal("two seeds gave one trace")
	}
}

// TestGeneratedTraceShape reads a generated trace back and checks the structure the
// generator promises: valid lines in arrival order, follow-up turns that repeat an earlier
// request's whole blocks, system prompts shared across conversations, ids numbered in order
// of first appearance.
func TestGeneratedTraceShape(t *testing.T) {
	cfg := smallConfig(3)
	cfg.ThinkTime = 5 * time.Second // conversations under way within the 90 s the trace spans
	reqs, err := readAll(t, generateText(t, cfg), cfg.BlockTokens)
	if err != nil {
		t.Fatal(err)
	}
	if len(reqs) != cfg.Requests || reqs[0].Timestamp != 0 {
		t.Fatalf("%d requests, first at %s", len(reqs), reqs[0].Timestamp)
	}
	bt := cfg.BlockTokens
	seen := map[string]bool{}  // whole-block id prefixes of every earlier request
	firsts := map[uint64]int{} // first block id -> requests opening with it
	followUps, next := 0, uint64(0)
	systemBlocks := int(float64(cfg.SystemPromptTokens)*cfg.Scale) / bt
	for i, r := range reqs {
		if len(r.HashIDs) != r.Blocks(bt) {
			t.Fatalf("request %d names %d of its %d blocks", i, len(r.HashIDs), r.Blocks(bt))
		}
		for _, id := range r.HashIDs {
			if id > next {
				t.Fatalf("request %d: id %d before id %d", i, id, next)
			}
			if id == next {
				next++
			}
		}
		firsts[r.HashIDs[0]]++
		// A follow-up's prefix of whole blocks is an earlier request's whole blocks.
		for n := len(r.HashIDs) - 1; n > systemBlocks; n-- {
			if seen[key(r.HashIDs[:n])] {
				followUps++
				break
			}
		}
		whole := r.HashIDs[:r.InputLength/bt]
		for n := 1; n <= len(whole); n++ {
			seen[key(whole[:n])] = true
		}
	}
	if followUps < cfg.Requests*35/100 {
		t.Errorf("%d of %d requests extend an earlier one, want about half (turns %g)", followUps, cfg.Requests, cfg.Turns)
	}
	shared, top := 0, 0
	for _, n := range firsts {
		if n > 1 {
			shared += n
		}
		top = max(top, n)
	}
	if len(firsts) > cfg.SystemPrompts || shared < cfg.Requests*9/10 || top < cfg.Requests/5 {
		t.Errorf("first blocks %v: want at most %d system prompts, shared, the first the most used", firsts, cfg.SystemPrompts)
	}
}

func key(ids []uint64) string { return fmt.Sprint(ids) }

// TestDefaultShapeResemblesTheConversationTrace: at full scale the default trace has about
// 12k input tokens per request, the configured rate, and a prefix reuse that an unbounded
// cache turns into a hit rate in the public trace's range (about half).
func TestDefaultShapeResemblesTheConversationTrace(t *testing.T) {
	if testing.Short() {
		t.Skip("12k requests")
	}
	cfg := DefaultGeneratorConfig()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	a, err := Analyze(g, Config{BlockTokens: cfg.BlockTokens})
	if err != nil {
		t.Fatal(err)
	}
	mean := float64(a.PromptTokens) / float64(a.Requests)
	if a.Requests != 12031 || mean < 11000 || mean > 13000 {
		t.Errorf("%d requests of %.0f tokens on average, want 12031 of about 12k", a.Requests, mean)
	}
	if a.MaxHitRate < 0.4 || a.MaxHitRate > 0.65 {
		t.Errorf("unbounded hit rate %.3f, want about half", a.MaxHitRate)
	}
	g, _ = NewGenerator(cfg)
	var req Request
	for g.Next(&req) == nil {
	}
	if hours := req.Timestamp.Hours(); hours < 0.9 || hours > 1.1 {
		t.Errorf("the last request arrives at %s, want about an hour", req.Timestamp)
	}
}

func TestGeneratorScaleKeepsBlocks(t *testing.T) {
	full := DefaultGeneratorConfig()
	full.Requests = 500
	small := full
	small.Scale, small.BlockTokens = 1.0/32, 16
	a, err := Analyze(mustGenerator(t, full), Config{BlockTokens: full.BlockTokens})
	if err != nil {
		t.Fatal(err)
	}
	b, err := Analyze(mustGenerator(t, small), Config{BlockTokens: small.BlockTokens})
	if err != nil {
		t.Fatal(err)
	}
	ratio := float64(b.PromptTokens) / float64(a.PromptTokens)
	if ratio < 0.03 || ratio > 0.033 || abs(a.MaxHitRate-b.MaxHitRate) > 0.02 {
		t.Errorf("scaled 1/32: prompt tokens x%.4f, hit rates %.3f vs %.3f", ratio, b.MaxHitRate, a.MaxHitRate)
	}
}

func abs(x float64) float64 { return max(x, -x) }

func mustGenerator(t *testing.T, cfg GeneratorConfig) *Generator {
	t.Helper()
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return g
}

func TestGeneratorConfigErrors(t *testing.T) {
	bad := []func(*GeneratorConfig){
		func(c *GeneratorConfig) { c.Requests = 0 },
		func(c *GeneratorConfig) { c.Rate = 0 },
		func(c *GeneratorConfig) { c.BlockTokens = 0 },
		func(c *GeneratorConfig) { c.Scale = -1 },
		func(c *GeneratorConfig) { c.Turns = 0.5 },
		func(c *GeneratorConfig) { c.FirstTurn.Sigma = -1 },
		func(c *GeneratorConfig) { c.MaxInputTokens = 0 },
		func(c *GeneratorConfig) { c.ThinkTime = -1 },
		func(c *GeneratorConfig) { c.Scale = math.NaN() },
	}
	for i, mutate := range bad {
		cfg := DefaultGeneratorConfig()
		mutate(&cfg)
		if _, err := NewGenerator(cfg); err == nil {
			t.Errorf("case %d: %+v accepted", i, cfg)
		}
	}
}

// TestGeneratorBoundsItsLengths: a scale or a mean that makes prompts larger than any
// scenario sends is refused up front, not met with an out-of-memory crash or an int overflow
// that turns 1e20 tokens into 1.
func TestGeneratorBoundsItsLengths(t *testing.T) {
	for _, tc := range []struct {
		mutate func(*GeneratorConfig)
		want   string
	}{
		{func(c *GeneratorConfig) { c.Scale = 1e9 }, "max input tokens 131072 times scale 1e+09 is 1.31072e+14 tokens, above the largest prompt of 10000000"},
		{func(c *GeneratorConfig) { c.FirstTurn.Mean = 1e20 }, "first turn length mean 1e+20 times scale 1 is 1e+20 tokens, above the largest prompt of 10000000"},
		{func(c *GeneratorConfig) { c.Output.Mean = 1e15 }, "output length mean 1e+15"},
	} {
		cfg := DefaultGeneratorConfig()
		tc.mutate(&cfg)
		if _, err := NewGenerator(cfg); err == nil || !strings.Contains(err.Error(), tc.want) {
			t.Errorf("%+v: %v, want %q", cfg, err, tc.want)
		}
	}
	// The largest allowed mean still draws lengths near it, capped at the prompt cap.
	cfg := DefaultGeneratorConfig()
	cfg.Requests, cfg.FirstTurn.Mean, cfg.Turns, cfg.MaxInputTokens, cfg.BlockTokens = 3, MaxGeneratedInputTokens, 1, MaxGeneratedInputTokens, 1<<16
	g, err := NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var req Request
	for g.Next(&req) == nil {
		if req.InputLength < MaxGeneratedInputTokens/100 || req.InputLength > MaxGeneratedInputTokens {
			t.Errorf("input length %d, want near and at most %d", req.InputLength, MaxGeneratedInputTokens)
		}
	}
}

// TestGeneratorWithoutSystemPrompts: with no system prompt and one turn, no two requests
// share a block, so an unbounded cache hits nothing.
func TestGeneratorWithoutSystemPrompts(t *testing.T) {
	cfg := smallConfig(5)
	cfg.SystemPrompts, cfg.Turns = 0, 1
	a, err := Analyze(mustGenerator(t, cfg), Config{BlockTokens: cfg.BlockTokens})
	if err != nil {
		t.Fatal(err)
	}
	if a.MaxHitTokens != 0 || a.DistinctBlocks != a.WholeBlocks {
		t.Errorf("max hits %d, %d distinct of %d blocks: want no reuse", a.MaxHitTokens, a.DistinctBlocks, a.WholeBlocks)
	}
	cfg.SystemPrompts = 1
	a, _ = Analyze(mustGenerator(t, cfg), Config{BlockTokens: cfg.BlockTokens})
	// One system prompt of 1536/32 = 48 tokens, 3 blocks of 16; every request but the first
	// hits those 3 (its prompt is at least one token longer) and nothing else.
	if want := int64(cfg.Requests-1) * 48; a.MaxHitTokens != want {
		t.Errorf("one shared system prompt: max hits %d, want %d", a.MaxHitTokens, want)
	}
}

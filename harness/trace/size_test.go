package trace

import (
	"flag"
	"strings"
	"testing"
)

func sizeText(t *testing.T, text string, cfg SizeConfig) *SizeReport {
	t.Helper()
	r, err := Size(NewReader(strings.NewReader(text), "t.jsonl", cfg.BlockTokens), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func policy(t *testing.T, s string) Policy {
	t.Helper()
	p, err := ParsePolicy(s)
	if err != nil {
		t.Fatal(err)
	}
	return p
}

// TestSizeOnePassMatchesDirect: the one pass gives, at every size, what a simulation of that
// size alone gives: for vllm the two-tier model of trace analyze (its own code), for every
// policy Size with that one size (so the sizes of a pass do not leak into each other).
func TestSizeOnePassMatchesDirect(t *testing.T) {
	hosts := []int64{0, 8, 40, 96, 200, 800, 3000, 1 << 20}
	for seed := range uint64(3) {
		cfg := DefaultGeneratorConfig()
		cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = seed, 300, 1.0/64, 8
		cfg.Turns = 1 + float64(seed)
		text := generateText(t, cfg)
		for _, output := range []bool{false, true} {
			for _, p := range []string{"vllm", "vllm:store_threshold=2", "vllm:store_threshold=3,max_tracker_size=50", "sglang-write-through", "sglang-write-through-selective", "sglang-write-back"} {
				r := sizeText(t, text, SizeConfig{BlockTokens: 8, GPUTokens: 80, HostTokens: hosts, PoolHoldsOutput: output, Policy: policy(t, p)})
				var anyHost bool
				for i, h := range hosts {
					got := r.Sizes[i]
					anyHost = anyHost || got.HostHitTokens > 0
					alone := sizeText(t, text, SizeConfig{BlockTokens: 8, GPUTokens: 80, HostTokens: []int64{h}, PoolHoldsOutput: output, Policy: policy(t, p)}).Sizes[0]
					if got.IdealShares != alone.IdealShares {
						t.Errorf("seed %d %s output %v host %d: one pass %+v, alone %+v", seed, p, output, h, got.IdealShares, alone.IdealShares)
					}
					if got.GPUHitTokens+got.HostHitTokens+got.RecomputeTokens != r.PromptTokens {
						t.Errorf("seed %d %s host %d: shares do not add up", seed, p, h)
					}
					if p != "vllm" {
						continue
					}
					a := analyzeText(t, text, Config{BlockTokens: 8, Tiers: &Tiers{GPUTokens: 80, HostTokens: h, PoolHoldsOutput: output}})
					if got.IdealShares != a.Tiers.IdealShares {
						t.Errorf("seed %d output %v host %d: trace size %+v, trace analyze %+v", seed, output, h, got.IdealShares, a.Tiers.IdealShares)
					}
				}
				if !anyHost {
					t.Errorf("seed %d %s: no size hit the host tier: the trace does not exercise it", seed, p)
				}
			}
		}
	}
}

// TestSGLangWriteThroughShortcut: a write-through write that finds the least recent host
// block on the GPU gives up (every host block is then on the GPU); walking past all of them
// gives the same shares.
func TestSGLangWriteThroughShortcut(t *testing.T) {
	hosts := []int64{8, 40, 96, 200, 800}
	for seed := range uint64(3) {
		cfg := DefaultGeneratorConfig()
		cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = seed, 300, 1.0/64, 8
		cfg.Turns = 1 + float64(seed)
		text := generateText(t, cfg)
		for _, output := range []bool{false, true} {
			for _, p := range []string{"sglang-write-through", "sglang-write-through-selective"} {
				c := SizeConfig{BlockTokens: 8, GPUTokens: 200, HostTokens: hosts, PoolHoldsOutput: output, Policy: policy(t, p)}
				short := sizeText(t, text, c)
				c.walkAll = true
				all := sizeText(t, text, c)
				for i := range hosts {
					if short.Sizes[i].IdealShares != all.Sizes[i].IdealShares {
						t.Errorf("seed %d %s output %v host %d: shortcut %+v, full walk %+v", seed, p, output, hosts[i], short.Sizes[i].IdealShares, all.Sizes[i].IdealShares)
					}
				}
			}
		}
	}
}

// Blocks of 4 tokens, as in TestTwoTiersByHand: kA is the block whose prefix is id A. A
// request of 5 tokens has one whole block, which it may hit.
func TestPoliciesByHand(t *testing.T) {
	fourSingles := jsonl([]int{5, 1, 2}, []int{5, 3, 4}, []int{5, 5, 6}, []int{5, 1, 2})
	cases := []struct {
		name, policy, trace                string
		gpu, host                          int64 // tokens
		gpuHit, hostHit, recompute, stored int64
	}{
		{
			// r1 stores nothing (k1, k12 looked up once); r2 looks them up again and stores
			// both; r3 loads both.
			name: "store_threshold 2 stores on the second lookup", policy: "vllm:store_threshold=2",
			trace: jsonl([]int{9, 1, 2, 3}, []int{9, 1, 2, 3}, []int{9, 1, 2, 3}), gpu: 0, host: 16,
			gpuHit: 0, hostHit: 8, recompute: 19, stored: 8,
		},
		{
			// Without the filter r1 stores both and r2, r3 load them.
			name: "vllm stores on first sight", policy: "vllm",
			trace: jsonl([]int{9, 1, 2, 3}, []int{9, 1, 2, 3}, []int{9, 1, 2, 3}), gpu: 0, host: 16,
			gpuHit: 0, hostHit: 16, recompute: 11, stored: 8,
		},
		{
			// The GPU (2 blocks) serves r2 and r3 whole: the connector looks nothing up, so
			// k1 and k12 stay at one lookup and are never stored.
			name: "store_threshold never counts what the GPU serves", policy: "vllm:store_threshold=2",
			trace: jsonl([]int{9, 1, 2, 3}, []int{9, 1, 2, 3}, []int{9, 1, 2, 3}), gpu: 8, host: 16,
			gpuHit: 16, hostHit: 0, recompute: 11, stored: 0,
		},
		{
			// GPU 2 blocks, host 1. r1 writes k1. r2 cannot write k3: the only host block, k1,
			// is still on the GPU. r3 evicts k1 from the GPU, so k5 replaces it on the host.
			// r4 cannot write k1: k5 is on the GPU. 2 blocks written.
			name: "sglang evicts from the host only blocks the GPU dropped", policy: "sglang-write-through",
			trace: fourSingles, gpu: 8, host: 4,
			gpuHit: 0, hostHit: 0, recompute: 20, stored: 8,
		},
		{
			// The same trace under vllm: every request's block is stored, evicting the last.
			name: "vllm evicts the least recent host block", policy: "vllm",
			trace: fourSingles, gpu: 8, host: 4,
			gpuHit: 0, hostHit: 0, recompute: 20, stored: 16,
		},
		{
			// One output token: each request is inserted once. GPU 1 block, host 2. r1
			// inserts k1 (count 1); r2 hits it on the GPU (count 2): written. r3's k3
			// (count 1) is not. r4 loads k1 from the host.
			name: "write_through_selective writes on the second hit", policy: "sglang-write-through-selective",
			trace: oneToken(jsonl([]int{5, 1, 2}, []int{5, 1, 2}, []int{5, 3, 4}, []int{5, 1, 2})), gpu: 4, host: 8,
			gpuHit: 4, hostHit: 4, recompute: 12, stored: 4,
		},
		{
			// 8 output tokens: each request is inserted after its prefill and at its finish,
			// so r1 already writes k1 and r3 writes k3.
			name: "write_through_selective counts both inserts of a request", policy: "sglang-write-through-selective",
			trace: jsonl([]int{5, 1, 2}, []int{5, 1, 2}, []int{5, 3, 4}, []int{5, 1, 2}), gpu: 4, host: 8,
			gpuHit: 4, hostHit: 4, recompute: 12, stored: 8,
		},
		{
			// GPU 1 block, host 2: nothing is written until r2 evicts k1 from the GPU; r3
			// loads k1 and evicts k3, which is written then.
			name: "write_back writes on GPU eviction", policy: "sglang-write-back",
			trace: jsonl([]int{5, 1, 2}, []int{5, 3, 4}, []int{5, 1, 2}), gpu: 4, host: 8,
			gpuHit: 0, hostHit: 4, recompute: 11, stored: 8,
		},
		{
			// A block the GPU never evicts is never written.
			name: "write_back keeps what the GPU holds", policy: "sglang-write-back",
			trace: jsonl([]int{5, 1, 2}, []int{5, 1, 2}), gpu: 4, host: 8,
			gpuHit: 4, hostHit: 0, recompute: 6, stored: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			r := sizeText(t, c.trace, SizeConfig{BlockTokens: 4, GPUTokens: c.gpu, HostTokens: []int64{c.host}, Policy: policy(t, c.policy)})
			s := r.Sizes[0]
			if s.GPUHitTokens != c.gpuHit || s.HostHitTokens != c.hostHit || s.RecomputeTokens != c.recompute || s.StoredTokens != c.stored {
				t.Errorf("gpu %d host %d recompute %d stored %d; want %d %d %d %d", s.GPUHitTokens, s.HostHitTokens, s.RecomputeTokens, s.StoredTokens,
					c.gpuHit, c.hostHit, c.recompute, c.stored)
			}
		})
	}
}

// oneToken makes every request of a jsonl trace ask for one output token.
func oneToken(text string) string {
	return strings.ReplaceAll(text, `"output_length": 8`, `"output_length": 1`)
}

func TestKnee(t *testing.T) {
	r := &SizeReport{}
	shares := map[int64]float64{0: 0, 10: 0.10, 20: 0.20, 40: 0.205, 80: 0.21, 160: 0.25, 320: 0.252}
	for _, b := range []int64{0, 10, 20, 40} {
		r.Sizes = append(r.Sizes, TierSize{HostTokens: 100 * b, HostBlocks: b})
		r.Sizes[len(r.Sizes)-1].HostShare = shares[b]
	}
	doubled := func(s TierSize) float64 { return shares[2*s.HostBlocks] }
	// 10 -> 20 adds 10 points; 20 -> 40 half a point; 40 -> 80 half a point.
	if k := r.knee(doubled); k == nil || k.HostTokens != 2000 || k.DoubledHostShare != 0.205 {
		t.Errorf("knee %+v, want 2000 tokens", k)
	}
	// With 80 listed, 80 -> 160 adds 4 points: no listed size has only small steps above it.
	r.Sizes = append(r.Sizes, TierSize{HostTokens: 8000, HostBlocks: 80})
	r.Sizes[len(r.Sizes)-1].HostShare = 0.21
	if k := r.knee(doubled); k != nil {
		t.Errorf("knee %+v, want none", k)
	}
}

func TestParsePolicy(t *testing.T) {
	for _, s := range []string{"vllm", "vllm:store_threshold=2", "vllm:store_threshold=3,max_tracker_size=10", "sglang-write-through", "sglang-write-through-selective", "sglang-write-back", "llamacpp", "llamacpp:slots=4,kv_unified=1"} {
		if p, err := ParsePolicy(s); err != nil || p.String() != s {
			t.Errorf("%s: %v, reads back as %q", s, err, p.String())
		}
	}
	for _, s := range []string{"lmcache", "vllm:store_threshold", "vllm:store_threshold=-1", "sglang-write-through:x=1", "sglang-write-back:store_threshold=2", "vllm:max_tracker_size=0", "llamacpp:store_threshold=2", "llamacpp:slots=0", "llamacpp:kv_unified=2"} {
		if _, err := ParsePolicy(s); err == nil {
			t.Errorf("%s: accepted", s)
		}
	}
}

func TestSizeFlags(t *testing.T) {
	parse := func(args ...string) (SizeConfig, error) {
		fs := flag.NewFlagSet("size", flag.ContinueOnError)
		get := RegisterSizeFlags(fs)
		if err := fs.Parse(args); err != nil {
			return SizeConfig{}, err
		}
		cfg, _, err := get()
		return cfg, err
	}
	cfg, err := parse("--gpu-tokens", "1e6", "--bytes-per-token", "131072", "--host", "0,1e7,8GiB,512MiB")
	if err != nil {
		t.Fatal(err)
	}
	want := []int64{0, 1e7, 8 << 30 / 131072, 512 << 20 / 131072}
	if len(cfg.HostTokens) != len(want) || cfg.Policy.Name != PolicyVLLM {
		t.Fatalf("%+v", cfg)
	}
	for i := range want {
		if cfg.HostTokens[i] != want[i] {
			t.Errorf("host %d: %d tokens, want %d", i, cfg.HostTokens[i], want[i])
		}
	}
	for _, bad := range [][]string{
		{"--host", "1e7"},                                  // no --gpu-tokens
		{"--gpu-tokens", "1e6", "--host", "8GiB"},          // bytes without --bytes-per-token
		{"--gpu-tokens", "1e6", "--host", "8GB"},           // not a unit
		{"--gpu-tokens", "1e6", "--policy", "vllm:x=1"},    // a parameter vllm does not take
		{"--gpu-tokens", "1e6", "--bytes-per-token", "-1"}, // negative
	} {
		if _, err := parse(bad...); err == nil {
			t.Errorf("%v: accepted", bad)
		}
	}
}

package trace

import (
	"fmt"
	"math/rand/v2"
	"strings"
	"testing"
)

// jsonl writes requests as trace lines, one second apart; each is {input_length, ids...}.
func jsonl(reqs ...[]int) string {
	var b strings.Builder
	for i, r := range reqs {
		ids := make([]string, len(r)-1)
		for j, id := range r[1:] {
			ids[j] = fmt.Sprint(id)
		}
		fmt.Fprintf(&b, `{"timestamp": %d, "input_length": %d, "output_length": 8, "hash_ids": [%s]}`+"\n", 1000*i, r[0], strings.Join(ids, ", "))
	}
	return b.String()
}

func analyzeText(t *testing.T, text string, cfg Config) *Analysis {
	t.Helper()
	a, err := Analyze(NewReader(strings.NewReader(text), "t.jsonl", cfg.BlockTokens), cfg)
	if err != nil {
		t.Fatal(err)
	}
	return a
}

// The traces below use blocks of 4 tokens. kA is the block whose prefix is id A, kAB the one
// whose prefix is ids A then B, and so on. A request of n tokens has n/4 whole blocks and can
// hit at most (n-1)/4 of them (the block with its last token is always computed). After a
// request its blocks are most recent, its first block the most recent of all.
func TestIdealHitRatesByHand(t *testing.T) {
	cases := []struct {
		name       string
		trace      string
		capacities []int64 // tokens
		hits       []int64 // hit tokens per capacity
		maxHits    int64
		prompt     int64
	}{
		{
			// r1: 8 tokens = blocks k1, k12, none hits. r2 the same: k1 hits, k12 holds the
			// last token. 4 hit tokens of 16. Capacity 0 holds nothing; 1 block holds k1.
			name:       "a repeated prompt misses its last block",
			trace:      jsonl([]int{8, 1, 2}, []int{8, 1, 2}),
			capacities: []int64{0, 4, 8, 100},
			hits:       []int64{0, 4, 4, 4},
			maxHits:    4, prompt: 16,
		},
		{
			// 10 tokens = whole blocks k1, k12 plus 2 tokens of block 3 (never cached); both
			// whole blocks can hit: 8 hit tokens of 20. r1 leaves k1 most recent, k12 second:
			// a 1-block cache keeps k1 only, so r2 hits k1 and misses k12 (depth 1).
			name:       "a partial block is never a hit",
			trace:      jsonl([]int{10, 1, 2, 3}, []int{10, 1, 2, 3}),
			capacities: []int64{4, 8, 7},
			hits:       []int64{4, 8, 4}, // 7 tokens hold one whole block
			maxHits:    8, prompt: 20,
		},
		{
			// r1: k0, k01 (9 tokens: 1 token partial). r2: k0 hits (depth 0), k03 is new.
			// Recency after r2: k0, k03, k01. r3 (r1's next turn): k0 depth 0, k01 depth 2,
			// k015 new. With 1 or 2 blocks only k0 hits; with 3 blocks k0 and k01 do.
			// Hits: r2 4, r3 4 (cap 1, 2) or 8 (cap 3+); prompt 9+9+14 = 32.
			name:       "shared system prompt and a follow-up turn",
			trace:      jsonl([]int{9, 0, 1, 2}, []int{9, 0, 3, 4}, []int{14, 0, 1, 5, 6}),
			capacities: []int64{0, 4, 8, 12, 1000},
			hits:       []int64{0, 8, 8, 12, 12},
			maxHits:    12, prompt: 32,
		},
		{
			// r2 names ids 2 and 3 like r1 but after another first block: k92 is not k12,
			// so nothing after r2's first miss hits, whatever is cached. r3 repeats r1: r2's
			// three blocks pushed k1 to depth 3 and k12 to depth 4, so k1 hits from 4 blocks
			// on and k12 from 5 (k123 holds the last token).
			name:       "hits are a prefix and blocks are named by their prefix",
			trace:      jsonl([]int{12, 1, 2, 3}, []int{12, 9, 2, 3}, []int{12, 1, 2, 3}),
			capacities: []int64{8, 12, 16, 20, 24},
			hits:       []int64{0, 0, 4, 8, 8},
			maxHits:    8, prompt: 36,
		},
		{
			// r1 names one of its 3 whole blocks: k7, then two private blocks. r2 names the
			// same one id: k7 hits, its private blocks are its own.
			name:       "blocks a request leaves unnamed are private",
			trace:      jsonl([]int{13, 7}, []int{13, 7}),
			capacities: []int64{100},
			hits:       []int64{4},
			maxHits:    4, prompt: 26,
		},
		{
			// 5 blocks then a 1-block request: the first request's blocks k1..k12345 leave
			// k1 most recent and k12345 least; r2 (k8) pushes them down by one. r3 repeats r1:
			// depths k1 1, k12 2, k123 3, k1234 4; prefix hits need capacity > depth.
			name:       "prefix depth decides each capacity",
			trace:      jsonl([]int{20, 1, 2, 3, 4, 5}, []int{4, 8}, []int{20, 1, 2, 3, 4, 5}),
			capacities: []int64{4, 8, 12, 16, 20, 24},
			hits:       []int64{0, 4, 8, 12, 16, 16},
			maxHits:    16, prompt: 44,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := analyzeText(t, c.trace, Config{BlockTokens: 4, CapacityTokens: c.capacities})
			if a.PromptTokens != c.prompt || a.MaxHitTokens != c.maxHits {
				t.Errorf("prompt %d, max hits %d; want %d, %d", a.PromptTokens, a.MaxHitTokens, c.prompt, c.maxHits)
			}
			if want := float64(c.maxHits) / float64(c.prompt); a.MaxHitRate != want {
				t.Errorf("max hit rate %g, want %g", a.MaxHitRate, want)
			}
			for i, got := range a.Capacities {
				if got.CapacityTokens != c.capacities[i] || got.HitTokens != c.hits[i] || got.HitRate != float64(c.hits[i])/float64(c.prompt) {
					t.Errorf("capacity %d: %+v, want %d hit tokens", c.capacities[i], got, c.hits[i])
				}
			}
		})
	}
}

// TestTwoTiersByHand walks the two-tier model (TierShares) through small traces.
func TestTwoTiersByHand(t *testing.T) {
	system := jsonl([]int{9, 0, 1, 2}, []int{9, 0, 3, 4}, []int{14, 0, 1, 5, 6})
	cases := []struct {
		name                    string
		trace                   string
		gpu, host               int64 // tokens
		output                  bool  // the GPU pool holds each request's partial block and output
		gpuHit, hostHit, recomp int64
		stored                  int64
	}{
		{
			// r1: nothing hits; host stores k0, k01 (touched after: k0 first); GPU (1 block)
			// keeps k0. r2: GPU hits k0; host has no k03: stores k03 (k0 is there), so k01, the
			// least recent, goes. r3: GPU hits k0; the host lost k01, so nothing loads; it
			// stores k01, k015 and must evict both others. GPU 8, host 0, stored 5 blocks.
			name:  "a host tier of 2 blocks serves nothing",
			trace: system, gpu: 4, host: 8,
			gpuHit: 8, hostHit: 0, recomp: 24, stored: 20,
		},
		{
			// With 4 host blocks nothing is evicted: r3 hits k0 on GPU and loads k01 from
			// the host, then stores only k015 (the blocks after the loaded ones).
			name:  "a host tier of 4 blocks reloads the follow-up's prefix",
			trace: system, gpu: 4, host: 16,
			gpuHit: 8, hostHit: 4, recomp: 20, stored: 16,
		},
		{
			// No host tier: the GPU share is the single-tier hit rate of 1 block (8 of 32).
			name:  "no host tier",
			trace: system, gpu: 4, host: 0,
			gpuHit: 8, hostHit: 0, recomp: 24, stored: 0,
		},
		{
			// No GPU cache: r1 stores its 4 whole blocks; r2 loads the 3 it may hit.
			name:  "everything from the host",
			trace: jsonl([]int{16, 1, 2, 3, 4}, []int{16, 1, 2, 3, 4}), gpu: 0, host: 16,
			gpuHit: 0, hostHit: 12, recomp: 20, stored: 16,
		},
		{
			// 4 blocks to store do not fit a 2-block tier: the connector stores none of them.
			name:  "a request larger than the host tier stores nothing",
			trace: jsonl([]int{16, 1, 2, 3, 4}, []int{16, 1, 2, 3, 4}), gpu: 0, host: 8,
			gpuHit: 0, hostHit: 0, recomp: 32, stored: 0,
		},
		{
			// r1 (11 tokens: k1, k12) stores both and touches them after, k1 last: k1 is the
			// host's most recent. r2 (k5) stores k5, evicting the least recent, k12. r3
			// repeats r1: the GPU (1 block) holds k5, so the host loads k1, misses k12, and
			// stores k12 (after the loaded block), evicting k5. Had the store left k12 most
			// recent (no touch after it), r2 would have evicted k1 and r3 loaded nothing.
			name:  "host LRU order after a store",
			trace: jsonl([]int{11, 1, 2, 3}, []int{4, 5}, []int{11, 1, 2, 3}), gpu: 4, host: 8,
			gpuHit: 0, hostHit: 4, recomp: 22, stored: 16,
		},
		{
			// A 4-block prompt pool: r2's two new blocks push out r1's scratch, and r3 (r1
			// again) hits k1: 4 of 24 tokens.
			name:  "a pool of prompt blocks only",
			trace: jsonl([]int{8, 1, 2}, []int{8, 3, 4}, []int{8, 1, 2}), gpu: 16, host: 0,
			gpuHit: 4, hostHit: 0, recomp: 20, stored: 0,
		},
		{
			// The same pool holding each request's output (8 tokens: 2 blocks) too: r1 leaves
			// k1, k12 and 2 output blocks, the pool full; r2 takes 2 output and 2 prompt blocks
			// and so evicts all of r1's. r3 hits nothing.
			name:  "a pool that also holds the output",
			trace: jsonl([]int{8, 1, 2}, []int{8, 3, 4}, []int{8, 1, 2}), gpu: 16, host: 0, output: true,
			gpuHit: 0, hostHit: 0, recomp: 24, stored: 0,
		},
		{
			// 10 tokens: k1, k12, a partial block; with 8 output tokens ceil(18/4) = 5 blocks,
			// 3 of them scratch. A 6-block pool keeps r1's prompt blocks through r2's (4 tokens
			// + 8 output = 3 blocks: k5, 2 scratch) and r3 hits both.
			name:  "a partial block and the output take the pool's room first",
			trace: jsonl([]int{10, 1, 2, 3}, []int{4, 5}, []int{10, 1, 2, 3}), gpu: 24, host: 0, output: true,
			gpuHit: 8, hostHit: 0, recomp: 16, stored: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			a := analyzeText(t, c.trace, Config{BlockTokens: 4, Tiers: &Tiers{GPUTokens: c.gpu, HostTokens: c.host, PoolHoldsOutput: c.output}})
			s := a.Tiers
			if s.GPUHitTokens != c.gpuHit || s.HostHitTokens != c.hostHit || s.RecomputeTokens != c.recomp || s.StoredTokens != c.stored {
				t.Errorf("gpu %d host %d recompute %d stored %d; want %d %d %d %d", s.GPUHitTokens, s.HostHitTokens, s.RecomputeTokens, s.StoredTokens,
					c.gpuHit, c.hostHit, c.recomp, c.stored)
			}
			if s.GPUHitTokens+s.HostHitTokens+s.RecomputeTokens != a.PromptTokens {
				t.Errorf("shares do not add up to the prompt tokens")
			}
			p := float64(a.PromptTokens)
			if s.GPUShare != float64(c.gpuHit)/p || s.HostShare != float64(c.hostHit)/p || s.RecomputeShare != float64(c.recomp)/p {
				t.Errorf("shares %+v", s)
			}
		})
	}
}

// TestStackDistanceMatchesDirectLRU: the one-pass stack-distance hit rates equal a direct
// LRU simulation at each capacity (the two-tier model's GPU tier, with no host tier), on
// generated traces with reuse.
func TestStackDistanceMatchesDirectLRU(t *testing.T) {
	for seed := range uint64(4) {
		cfg := DefaultGeneratorConfig()
		cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = seed, 400, 1.0/64, 8
		cfg.Turns = 1 + float64(seed)
		text := generateText(t, cfg)
		capacities := []int64{0, 8, 40, 200, 800, 3000, 1 << 20}
		a := analyzeText(t, text, Config{BlockTokens: 8, CapacityTokens: capacities})
		for i, c := range capacities {
			direct := analyzeText(t, text, Config{BlockTokens: 8, Tiers: &Tiers{GPUTokens: c}})
			if a.Capacities[i].HitTokens != direct.Tiers.GPUHitTokens {
				t.Errorf("seed %d capacity %d: stack distance %d hit tokens, direct LRU %d", seed, c, a.Capacities[i].HitTokens, direct.Tiers.GPUHitTokens)
			}
		}
		if a.Capacities[len(capacities)-1].HitTokens != a.MaxHitTokens || a.MaxHitTokens == 0 {
			t.Errorf("seed %d: a capacity above the trace's blocks hits %d, unbounded %d", seed, a.Capacities[len(capacities)-1].HitTokens, a.MaxHitTokens)
		}
		for i := 1; i < len(capacities); i++ {
			if a.Capacities[i].HitTokens < a.Capacities[i-1].HitTokens {
				t.Errorf("seed %d: hits fall from capacity %d to %d", seed, capacities[i-1], capacities[i])
			}
		}
	}
}

func TestAnalyzeRejects(t *testing.T) {
	if _, err := Analyze(NewReader(strings.NewReader(jsonl([]int{4, 1})), "t", 4), Config{CapacityTokens: []int64{-1}}); err == nil {
		t.Error("a negative capacity is accepted")
	}
	if _, err := Analyze(NewReader(strings.NewReader(jsonl([]int{4, 1})), "t", 4), Config{Tiers: &Tiers{GPUTokens: -4}}); err == nil {
		t.Error("a negative tier is accepted")
	}
}

// TestRecencyStackDepths checks depths against a plain list, across compactions.
func TestRecencyStackDepths(t *testing.T) {
	rng := rand.New(rand.NewPCG(1, 2))
	s := newRecencyStack()
	var list []uint64 // most recent first
	for step := range 30000 {
		k := 1 + rng.Uint64N(uint64(50+step/100)) // a slowly growing key space
		want := -1
		for i, x := range list {
			if x == k {
				want = i
				break
			}
		}
		if got := s.depth(k); got != want {
			t.Fatalf("step %d key %d: depth %d, want %d", step, k, got, want)
		}
		s.access(k)
		if want >= 0 {
			list = append(list[:want], list[want+1:]...)
		}
		list = append([]uint64{k}, list...)
	}
}

// TestLRUSet checks the set against a plain list.
func TestLRUSet(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	const capacity = 37
	l := newLRUSet(capacity)
	var list []uint64 // most recent first
	index := func(k uint64) int {
		for i, x := range list {
			if x == k {
				return i
			}
		}
		return -1
	}
	for step := range 20000 {
		k := 1 + rng.Uint64N(60)
		if l.contains(k) != (index(k) >= 0) {
			t.Fatalf("step %d: contains(%d) disagrees", step, k)
		}
		switch rng.IntN(4) {
		case 0:
			l.touch(k)
			if i := index(k); i >= 0 {
				list = append([]uint64{k}, append(list[:i:i], list[i+1:]...)...)
			}
		case 1:
			n := rng.IntN(3)
			l.evict(n)
			list = list[:max(0, len(list)-n)]
		default:
			l.add(k)
			if i := index(k); i >= 0 {
				list = append(list[:i:i], list[i+1:]...)
			}
			list = append([]uint64{k}, list...)
			if len(list) > capacity {
				list = list[:capacity]
			}
		}
		if l.len() != len(list) {
			t.Fatalf("step %d: %d keys, want %d", step, l.len(), len(list))
		}
	}
	for _, k := range list {
		if !l.contains(k) {
			t.Fatalf("lost key %d", k)
		}
	}
}

// TestKeyTable checks the table against a map through inserts and removals.
func TestKeyTable(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	tb := newKeyTable()
	want := map[uint64]int32{}
	for step := range 50000 {
		// Keys with the same high bits collide on purpose: long probe runs to shift.
		k := (rng.Uint64N(8) << 60) | 1 + rng.Uint64N(3000)
		if rng.IntN(3) == 0 {
			tb.remove(k)
			delete(want, k)
		} else {
			tb.set(k, int32(step))
			want[k] = int32(step)
		}
		if tb.count != len(want) {
			t.Fatalf("step %d: %d keys, want %d", step, tb.count, len(want))
		}
	}
	for k, v := range want {
		if got, ok := tb.get(k); !ok || got != v {
			t.Fatalf("key %d: %d %v, want %d", k, got, ok, v)
		}
	}
}

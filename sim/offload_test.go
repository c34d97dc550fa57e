package sim

import "testing"

// blocksPrompt is a prompt of whole 16-token blocks, one per id: prompts whose ids agree up
// to some block share their tokens up to there.
func blocksPrompt(ids ...uint64) []int32 {
	var p []int32
	for _, id := range ids {
		p = append(p, syntheticPrompt(1000+id, 16)...)
	}
	return p
}

// cpuOrder lists the CPU tier's blocks as prefix-block numbers of prompt, most recent first:
// block i of prompt is i, a block of another prompt -1.
func cpuOrder(e *Engine, prompt []int32) []int {
	hashes, _ := BlockHashes(prompt, e.p.BlockSize)
	index := map[uint64]int{}
	for i, h := range hashes {
		index[h] = i
	}
	var out []int
	for s := e.cpu.next[0]; s != 0; s = e.cpu.next[s] {
		i, ok := index[e.cpu.hash[s]]
		if !ok {
			i = -1
		}
		out = append(out, i)
	}
	return out
}

func equalInts(a, b []int) bool {
	if len(a) != len(b) {
		return false
	}
	for i := range a {
		if a[i] != b[i] {
			return false
		}
	}
	return true
}

// TestCPUTierFollowsTheOffloadingConnector holds the CPU tier to vLLM's offloading connector
// (docs/traces.md, "Two tiers"): a store leaves the request's first block the most recent, a
// GPU hit refreshes the request's blocks in the tier too, a request that loaded nothing
// offers all its blocks (GPU hits included), and a store larger than the tier is skipped
// whole and counted as an allocation failure.
func TestCPUTierFollowsTheOffloadingConnector(t *testing.T) {
	t.Run("a store touches the request's blocks, its first the most recent", func(t *testing.T) {
		e := NewEngine(engineProfile(t, 64, 8))
		p := blocksPrompt(1, 2, 3, 4)
		serve(t, e, p)
		if got := cpuOrder(e, p); !equalInts(got, []int{0, 1, 2, 3}) {
			t.Errorf("tier order %v, want the first block most recent", got)
		}
	})
	t.Run("a GPU hit refreshes the tier", func(t *testing.T) {
		e := NewEngine(engineProfile(t, 64, 8))
		a, b := blocksPrompt(1, 2), blocksPrompt(3, 4)
		serve(t, e, a)
		serve(t, e, b) // the tier: b's blocks, then a's
		r := serve(t, e, a)
		if r.GPUHitTokens != 16 || r.ExternalHitTokens != 0 || r.StoredBytes != 0 {
			t.Fatalf("repeat of a: %+v, want a GPU hit and nothing stored", r)
		}
		if got := cpuOrder(e, a); !equalInts(got, []int{0, 1, -1, -1}) {
			t.Errorf("tier order %v: a GPU hit must make a's blocks the most recent", got)
		}
	})
	t.Run("nothing loaded: GPU hits are offered too", func(t *testing.T) {
		// A 2-block tier holds b's blocks after b; a's first block is still on the GPU.
		e := NewEngine(engineProfile(t, 64, 2))
		a, b := blocksPrompt(1, 2), blocksPrompt(3, 4)
		serve(t, e, a)
		serve(t, e, b)
		r := serve(t, e, a)
		if r.GPUHitTokens != 16 || r.StoredBytes != 2*16*testStoreBytes {
			t.Fatalf("repeat of a: %+v, want a GPU hit and both blocks stored again", r)
		}
		if got := cpuOrder(e, a); !equalInts(got, []int{0, 1}) {
			t.Errorf("tier order %v", got)
		}
	})
	t.Run("loaded: only the blocks after the loaded ones are offered", func(t *testing.T) {
		// a's 3 blocks in a 6-block tier; the GPU (4 blocks) keeps only a's first (the most
		// recent of its blocks) through b and c. The follow-up hits it on the GPU, loads a's
		// second block and stores its own 2 new ones, not the GPU hit.
		e := NewEngine(engineProfile(t, 4, 6))
		a := blocksPrompt(1, 2, 3)
		serve(t, e, a)
		serve(t, e, blocksPrompt(4, 5))
		serve(t, e, blocksPrompt(6))
		r := serve(t, e, append(blocksPrompt(1, 2), blocksPrompt(7, 8)...))
		if r.GPUHitTokens != 16 || r.ExternalHitTokens != 16 || r.StoredBytes != 2*16*testStoreBytes {
			t.Fatalf("follow-up of a: %+v, want 1 GPU hit, 1 block loaded and the 2 after them stored", r)
		}
	})
	t.Run("a store larger than the tier stores nothing", func(t *testing.T) {
		e := NewEngine(engineProfile(t, 64, 3))
		small := blocksPrompt(1, 2)
		serve(t, e, small)
		r := serve(t, e, blocksPrompt(3, 4, 5, 6))
		if r.StoredBytes != 0 {
			t.Errorf("4 blocks for a 3-block tier: %d bytes stored, want none", r.StoredBytes)
		}
		c := e.Counters()
		if c.AllocationFailures != 1 || c.CPUBlocksUsed != 2 {
			t.Errorf("allocation failures %d, tier holds %d blocks; want 1 and the first prompt's 2", c.AllocationFailures, c.CPUBlocksUsed)
		}
		if got := cpuOrder(e, small); !equalInts(got, []int{0, 1}) {
			t.Errorf("the skipped store evicted something: tier order %v", got)
		}
	})
}

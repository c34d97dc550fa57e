package sim

import (
	"context"
	"errors"
	"testing"
	"time"
)

const (
	testStoreBytes = 100 // per token stored
	testLoadBytes  = 50  // per token loaded
)

// engineProfile is a small profile with exact geometry: 16-token blocks, gpuBlocks on the
// GPU, cpuBlocks in the CPU tier, 1000 prefill tokens/s and no overhead at speed 1.
func engineProfile(t testing.TB, gpuBlocks, cpuBlocks int) Profile {
	t.Helper()
	p := defaultProfile()
	p.Name = "engine-test"
	p.Model = "test/model"
	p.BlockSize = 16
	p.NumGPUBlocks = gpuBlocks
	p.MaxModelLen = gpuBlocks * 16
	p.StoreBytesPerToken = testStoreBytes
	p.LoadBytesPerToken = testLoadBytes
	p.CPUOffloadGiB = float64(cpuBlocks*16*testStoreBytes) / (1 << 30)
	p.PrefillTokensPerSecond = 1000
	p.DecodeTokensPerSecond = 100
	p.CPUToGPUBytesPerSecond = 1e6
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	if got := p.CPUBlocks(); got != cpuBlocks {
		t.Fatalf("CPU tier has %d blocks, want %d", got, cpuBlocks)
	}
	return p
}

// syntheticPrompt returns n token ids unique to seed.
func syntheticPrompt(seed uint64, n int) []int32 {
	ids := make([]int32, n)
	for i := range ids {
		ids[i] = int32(mix64(seed<<32|uint64(i)) % VocabSize)
	}
	return ids
}

// serve admits prompt, generates nothing and finishes it, returning the prefill.
func serve(t *testing.T, e *Engine, prompt []int32) PrefillResult {
	t.Helper()
	s, err := e.Submit(prompt)
	if err != nil {
		t.Fatal(err)
	}
	r := admitted(t, e, s)
	e.Finish(s, FinishStop)
	return r
}

func admitted(t *testing.T, e *Engine, s *Sequence) PrefillResult {
	t.Helper()
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Second)
	defer cancel()
	r, err := e.WaitAdmitted(ctx, s)
	if err != nil {
		t.Fatalf("sequence %d not admitted: %v", s.ID, err)
	}
	return r
}

func checkPrefill(t *testing.T, what string, got, want PrefillResult) {
	t.Helper()
	got.Duration, want.Duration = 0, 0
	if got != want {
		t.Errorf("%s:\n got %+v\nwant %+v", what, got, want)
	}
}

func TestRepeatedPromptHitsGPU(t *testing.T) {
	e := NewEngine(engineProfile(t, 64, 256))
	a := syntheticPrompt(1, 320) // 20 full blocks

	checkPrefill(t, "cold", serve(t, e, a), PrefillResult{
		Tokens: 320, ComputedTokens: 320, StoredBytes: 320 * testStoreBytes,
	})
	// The last token is always computed: hits stop at (320-1)/16 = 19 blocks. The 20th block
	// is recomputed, and already stored, so nothing more is written.
	checkPrefill(t, "repeat", serve(t, e, a), PrefillResult{
		Tokens: 320, GPUHitTokens: 304, ComputedTokens: 16,
	})
	c := e.Counters()
	want := Counters{
		PrefixCacheQueries: 640, PrefixCacheHits: 304,
		ExternalPrefixCacheQueries: 320 + 16, ExternalPrefixCacheHits: 0,
		PromptTokens: 640, PromptTokensLocalCompute: 336, PromptTokensLocalCacheHit: 304,
		PromptTokensCached: 304, GPUToCPUBytes: 32000, RequestsStop: 2,
	}
	checkCounterTotals(t, c, want)
	if c.GPUToCPUSize.Count != 1 || c.CPUToGPUSize.Count != 0 {
		t.Errorf("transfers: %d stores, %d loads; want 1, 0", c.GPUToCPUSize.Count, c.CPUToGPUSize.Count)
	}
	if c.Running != 0 || c.KVCacheUsage != 0 || c.GPUBlocksCached != 20 {
		t.Errorf("idle engine: running %d, usage %g, cached blocks %d; want 0, 0, 20", c.Running, c.KVCacheUsage, c.GPUBlocksCached)
	}
}

// checkCounterTotals compares the scalar totals of got with want.
func checkCounterTotals(t *testing.T, got, want Counters) {
	t.Helper()
	type field struct {
		name      string
		got, want int64
	}
	for _, f := range []field{
		{"prefix queries", got.PrefixCacheQueries, want.PrefixCacheQueries},
		{"prefix hits", got.PrefixCacheHits, want.PrefixCacheHits},
		{"external queries", got.ExternalPrefixCacheQueries, want.ExternalPrefixCacheQueries},
		{"external hits", got.ExternalPrefixCacheHits, want.ExternalPrefixCacheHits},
		{"prompt tokens", got.PromptTokens, want.PromptTokens},
		{"local compute", got.PromptTokensLocalCompute, want.PromptTokensLocalCompute},
		{"local cache hit", got.PromptTokensLocalCacheHit, want.PromptTokensLocalCacheHit},
		{"external kv transfer", got.PromptTokensExternalKVTransfer, want.PromptTokensExternalKVTransfer},
		{"cached", got.PromptTokensCached, want.PromptTokensCached},
		{"GPU_to_CPU bytes", got.GPUToCPUBytes, want.GPUToCPUBytes},
		{"CPU_to_GPU bytes", got.CPUToGPUBytes, want.CPUToGPUBytes},
		{"generation tokens", got.GenerationTokens, want.GenerationTokens},
		{"preemptions", got.Preemptions, want.Preemptions},
		{"stop", got.RequestsStop, want.RequestsStop},
	} {
		if f.got != f.want {
			t.Errorf("%s = %d, want %d", f.name, f.got, f.want)
		}
	}
}

// evictionSequence serves prompt 0, then four other 20-block prompts (100 blocks through a
// 64-block pool, so prompt 0 leaves the GPU), then prompt 0 again, returning the replay.
func evictionSequence(t *testing.T, e *Engine) PrefillResult {
	t.Helper()
	serve(t, e, syntheticPrompt(0, 320))
	for seed := uint64(1); seed <= 4; seed++ {
		serve(t, e, syntheticPrompt(seed, 320))
	}
	return serve(t, e, syntheticPrompt(0, 320))
}

func TestEvictedPromptReloadsFromCPU(t *testing.T) {
	e := NewEngine(engineProfile(t, 64, 256))
	replay := evictionSequence(t, e)
	// 19 blocks come back from the CPU tier; the 20th is computed (and already stored).
	checkPrefill(t, "replay", replay, PrefillResult{
		Tokens: 320, ExternalHitTokens: 304, ComputedTokens: 16, LoadedBytes: 304 * testLoadBytes,
	})
	c := e.Counters()
	if c.CPUToGPUBytes != int64(c.ExternalPrefixCacheHits)*testLoadBytes || c.ExternalPrefixCacheHits != 304 {
		t.Errorf("load bytes %d for %d external hits, want hits x %d", c.CPUToGPUBytes, c.ExternalPrefixCacheHits, testLoadBytes)
	}
	if c.GPUToCPUBytes != 5*320*testStoreBytes {
		t.Errorf("store bytes %d, want five prompts written through: %d", c.GPUToCPUBytes, 5*320*testStoreBytes)
	}
	// Load time is bytes over bandwidth at speed 1 without jitter.
	if want := float64(304*testLoadBytes) / 1e6; c.CPUToGPUSeconds < want*0.999 || c.CPUToGPUSeconds > want*1.001 {
		t.Errorf("load seconds %g, want %g", c.CPUToGPUSeconds, want)
	}
}

func TestSmallCPUTierNeverReloads(t *testing.T) {
	// A CPU tier of 32 blocks is half the 64-block GPU pool: it only mirrors recent blocks.
	t.Run("evicted replay recomputes", func(t *testing.T) {
		e := NewEngine(engineProfile(t, 64, 32))
		checkPrefill(t, "replay", evictionSequence(t, e), PrefillResult{
			Tokens: 320, ComputedTokens: 320, StoredBytes: 320 * testStoreBytes,
		})
		if c := e.Counters(); c.CPUToGPUBytes != 0 || c.ExternalPrefixCacheHits != 0 {
			t.Errorf("reload with a small tier: %d bytes, %d hits", c.CPUToGPUBytes, c.ExternalPrefixCacheHits)
		}
	})
	t.Run("recent replay hits GPU", func(t *testing.T) {
		e := NewEngine(engineProfile(t, 64, 32))
		serve(t, e, syntheticPrompt(0, 320))
		serve(t, e, syntheticPrompt(1, 320))
		// A store touches the prompt's blocks first block last, so prompt 1's 20 blocks
		// evicted prompt 0's last 8 and the tier kept its first 12. Nothing loads, so the
		// connector offers all 20 blocks, GPU hits included, and writes the 8 it lacks.
		checkPrefill(t, "replay", serve(t, e, syntheticPrompt(0, 320)), PrefillResult{
			Tokens: 320, GPUHitTokens: 304, ComputedTokens: 16, StoredBytes: 8 * 16 * testStoreBytes,
		})
		if c := e.Counters(); c.CPUToGPUBytes != 0 {
			t.Errorf("reload with a small tier: %d bytes", c.CPUToGPUBytes)
		}
	})
}

func TestGPUHitThenCPUContinuation(t *testing.T) {
	// Prompt 0 and prompt 1 share 10 blocks. After prompt 0 is evicted from the GPU but the
	// shared prefix stays (prompt 1 keeps touching it), a replay hits the prefix on the GPU
	// and loads the rest from the CPU tier.
	e := NewEngine(engineProfile(t, 64, 256))
	shared := syntheticPrompt(100, 160)
	withPrefix := func(seed uint64) []int32 { return append(append([]int32{}, shared...), syntheticPrompt(seed, 160)...) }
	serve(t, e, withPrefix(0))
	for seed := uint64(1); seed <= 6; seed++ {
		serve(t, e, withPrefix(seed))
	}
	checkPrefill(t, "replay", serve(t, e, withPrefix(0)), PrefillResult{
		Tokens: 320, GPUHitTokens: 160, ExternalHitTokens: 144, ComputedTokens: 16, LoadedBytes: 144 * testLoadBytes,
	})
}

func TestWaitingAndUsage(t *testing.T) {
	e := NewEngine(engineProfile(t, 8, 16))
	big, err := e.Submit(syntheticPrompt(1, 100)) // 7 blocks
	if err != nil {
		t.Fatal(err)
	}
	admitted(t, e, big)
	small, err := e.Submit(syntheticPrompt(2, 40)) // 3 blocks: only 1 free
	if err != nil {
		t.Fatal(err)
	}
	c := e.Counters()
	if c.Running != 1 || c.Waiting != 1 || c.KVCacheUsage != 7.0/8 {
		t.Fatalf("running %d waiting %d usage %g, want 1 1 0.875", c.Running, c.Waiting, c.KVCacheUsage)
	}
	e.Finish(big, FinishStop)
	admitted(t, e, small)
	if c := e.Counters(); c.Running != 1 || c.Waiting != 0 || c.KVCacheUsage != 3.0/8 {
		t.Fatalf("after finish: running %d waiting %d usage %g, want 1 0 0.375", c.Running, c.Waiting, c.KVCacheUsage)
	}
	e.Finish(small, FinishLength)
	if _, err := e.Submit(syntheticPrompt(3, 8*16+1)); !errors.Is(err, ErrExceedsKVCapacity) {
		t.Errorf("oversized prompt: err %v, want ErrExceedsKVCapacity", err)
	}
}

func TestDecodeGrowthPreempts(t *testing.T) {
	e := NewEngine(engineProfile(t, 8, 16))
	a, _ := e.Submit(syntheticPrompt(1, 64)) // 4 blocks
	b, _ := e.Submit(syntheticPrompt(2, 64)) // 4 blocks: the pool is full
	admitted(t, e, a)
	admitted(t, e, b)
	// a's first output token needs a fifth block: b, admitted last, is preempted.
	if !e.AppendToken(a) {
		t.Fatal("a was preempted")
	}
	if e.AppendToken(b) {
		t.Fatal("b kept running in a full pool")
	}
	c := e.Counters()
	if c.Preemptions != 1 || c.Running != 1 || c.Waiting != 1 || c.GenerationTokens != 1 {
		t.Fatalf("preemptions %d running %d waiting %d generated %d, want 1 1 1 1", c.Preemptions, c.Running, c.Waiting, c.GenerationTokens)
	}
	e.Finish(a, FinishStop)
	// b's last block was evicted for a's growth; its first three are still cached.
	again := admitted(t, e, b)
	checkPrefill(t, "readmission", again, PrefillResult{
		Tokens: 64, GPUHitTokens: 48, ComputedTokens: 16, Readmission: true,
	})
	if !e.AppendToken(b) {
		t.Fatal("readmitted b cannot generate")
	}
	e.Finish(b, FinishStop)
	c = e.Counters()
	// Prompt tokens are counted once per request, prefix queries once per admission.
	if c.PromptTokens != 128 || c.PrefixCacheQueries != 192 || c.GenerationTokens != 2 {
		t.Errorf("prompt tokens %d, queries %d, generated %d; want 128, 192, 2", c.PromptTokens, c.PrefixCacheQueries, c.GenerationTokens)
	}
	checkBySource(t, c)
}

func checkBySource(t *testing.T, c Counters) {
	t.Helper()
	if sum := c.PromptTokensLocalCompute + c.PromptTokensLocalCacheHit + c.PromptTokensExternalKVTransfer; sum != c.PromptTokens {
		t.Errorf("by-source sum %d != prompt tokens %d", sum, c.PromptTokens)
	}
	if c.PromptTokensCached != c.PromptTokensLocalCacheHit+c.PromptTokensExternalKVTransfer {
		t.Errorf("cached %d != local %d + external %d", c.PromptTokensCached, c.PromptTokensLocalCacheHit, c.PromptTokensExternalKVTransfer)
	}
}

func TestCountersOnlyGrowUntilRestart(t *testing.T) {
	e := NewEngine(engineProfile(t, 32, 48))
	monotone := func(c Counters) []int64 {
		return []int64{c.PrefixCacheQueries, c.PrefixCacheHits, c.ExternalPrefixCacheQueries,
			c.ExternalPrefixCacheHits, c.PromptTokens, c.PromptTokensLocalCompute,
			c.PromptTokensLocalCacheHit, c.PromptTokensExternalKVTransfer, c.PromptTokensCached,
			c.GenerationTokens, c.Preemptions, c.RequestsStop, c.GPUToCPUBytes, c.CPUToGPUBytes}
	}
	previous := monotone(e.Counters())
	var prompt []int32
	step := func(i int) {
		// Seeds repeat after four other prompts (reload or recompute); every fourth request
		// repeats the one before (GPU hit).
		if i%4 != 3 {
			prompt = syntheticPrompt(uint64(i*7%5), 48+i*37%200)
		}
		s, err := e.Submit(prompt)
		if err != nil {
			t.Fatal(err)
		}
		admitted(t, e, s)
		for range i % 20 {
			e.AppendToken(s)
		}
		e.Finish(s, FinishStop)
		now := monotone(e.Counters())
		for k := range now {
			if now[k] < previous[k] {
				t.Fatalf("step %d: counter %d went from %d to %d", i, k, previous[k], now[k])
			}
		}
		previous = now
		checkBySource(t, e.Counters())
	}
	for i := range 40 {
		step(i)
	}
	if c := e.Counters(); c.ExternalPrefixCacheHits == 0 || c.PrefixCacheHits == 0 {
		t.Fatalf("sequence never reloaded (%d) or hit (%d): the test proves little", c.ExternalPrefixCacheHits, c.PrefixCacheHits)
	}
	e.Restart()
	c := e.Counters()
	checkCounterTotals(t, c, Counters{})
	if c.GPUBlocksCached != 0 || c.CPUBlocksUsed != 0 {
		t.Errorf("restart left %d GPU and %d CPU blocks cached", c.GPUBlocksCached, c.CPUBlocksUsed)
	}
	previous = monotone(c)
	for i := range 10 {
		step(i)
	}
}

func TestRestartFailsWaitersAndOrphansRunners(t *testing.T) {
	e := NewEngine(engineProfile(t, 8, 16))
	running, _ := e.Submit(syntheticPrompt(1, 100))
	waiting, _ := e.Submit(syntheticPrompt(2, 100))
	admitted(t, e, running)
	e.Restart()
	if _, err := e.WaitAdmitted(context.Background(), waiting); !errors.Is(err, ErrRestarted) {
		t.Errorf("waiter: err %v, want ErrRestarted", err)
	}
	if !e.AppendToken(running) {
		t.Error("orphan stopped generating")
	}
	e.Finish(running, FinishStop)
	c := e.Counters()
	if c.GenerationTokens != 0 || c.RequestsStop != 0 || c.Running != 0 {
		t.Errorf("orphan touched new counters: %+v", c)
	}
}

func TestPrefillDuration(t *testing.T) {
	p := engineProfile(t, 64, 256)
	p.RequestOverhead = 10 * time.Millisecond
	p.PrefillSlowdownPer100k = 1
	p.Speed = 2
	e := NewEngine(p)
	r := serve(t, e, syntheticPrompt(1, 320))
	// (10 ms + 320 tokens / 1000 tok/s * (1 + 160/100000)) / 2
	want := time.Duration((0.010 + 0.320*(1+160.0/100000)) / 2 * float64(time.Second))
	if d := r.Duration - want; d < -time.Microsecond || d > time.Microsecond {
		t.Errorf("cold prefill %v, want %v", r.Duration, want)
	}
}

func TestJitterIsDeterministicAndBounded(t *testing.T) {
	seen := map[float64]bool{}
	for i := uint64(1); i <= 200; i++ {
		f := jitterFactor(7, i, 0.2)
		if f < 0.8 || f > 1.2 {
			t.Fatalf("factor %g outside [0.8, 1.2]", f)
		}
		if f != jitterFactor(7, i, 0.2) {
			t.Fatal("factor not deterministic")
		}
		seen[f] = true
	}
	if len(seen) < 190 {
		t.Errorf("only %d distinct factors in 200 draws", len(seen))
	}
	if jitterFactor(7, 1, 0) != 1 {
		t.Error("zero jitter is not 1")
	}
}

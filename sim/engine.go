package sim

import (
	"context"
	"errors"
	"fmt"
	"slices"
	"sync"
	"time"
)

// ErrExceedsKVCapacity is returned for a prompt whose blocks could never fit the GPU pool.
var ErrExceedsKVCapacity = errors.New("prompt needs more KV blocks than the GPU pool holds")

// ErrRestarted is returned to a request that was waiting when the engine restarted.
var ErrRestarted = errors.New("engine restarted")

// FinishReason is the finished_reason label of vllm:request_success_total.
type FinishReason string

const (
	FinishStop   FinishReason = "stop"
	FinishLength FinishReason = "length"
	FinishAbort  FinishReason = "abort"
)

// PrefillResult is how one admission of a sequence was served.
type PrefillResult struct {
	// Tokens is the number of tokens scheduled: the prompt, plus the output so far when
	// a preempted sequence is readmitted.
	Tokens            int
	GPUHitTokens      int // local prefix-cache hits
	ExternalHitTokens int // loaded from the CPU tier
	ComputedTokens    int
	StoredBytes       int64 // GPU_to_CPU, written through for newly computed blocks
	LoadedBytes       int64 // CPU_to_GPU
	// Duration is the wall time until the first token: overhead, load and compute, with
	// jitter, divided by the speed factor.
	Duration time.Duration
	// Readmission marks a prefill after preemption.
	Readmission bool
}

type sequenceState uint8

const (
	stateWaiting sequenceState = iota
	stateRunning
	stateFinished
)

// Sequence is one request inside the engine.
type Sequence struct {
	// ID numbers the engine's sequences from 1; jitter is drawn from it.
	ID uint64
	// Digest is a hash of all prompt tokens; per-prompt draws (output lengths) use it.
	Digest uint64
	// InterTokenDelay is the wall time between output tokens, jitter and speed applied.
	InterTokenDelay time.Duration

	generation  uint64 // the engine generation it belongs to; a restart orphans it
	output      uint64 // what the output is drawn from (outputDigest), fixed at admission
	promptLen   int
	hashes      []uint64 // chained hashes of the prompt's full blocks
	blocks      []int32
	numTokens   int
	state       sequenceState
	preempted   bool // preempted since the caller last waited for admission
	admitted    chan struct{}
	firstResult PrefillResult
	lastResult  PrefillResult
	jitter      float64
}

// PromptTokens is the prompt's length.
func (s *Sequence) PromptTokens() int { return s.promptLen }

// Engine is the KV-cache model: a GPU block pool with prefix caching and an LRU free queue
// (vLLM's block pool), a write-through LRU CPU tier, FCFS admission with a waiting queue,
// preemption on decode growth, and the counters vLLM exports. Safe for concurrent use.
type Engine struct {
	mu         sync.Mutex
	p          Profile
	pool       gpuPool
	cpu        cpuTier
	lookups    *reuseTracker   // block hash -> times looked up, for store_threshold
	corrupt    map[uint64]bool // GPU blocks filled by a corrupted reload (fidelity.go)
	stores     int             // store attempts, for allocation_fail_every_nth_store
	toStore    []uint64        // storeToCPU's scratch
	running    []*Sequence     // in admission order; the last is preempted first
	waiting    []*Sequence
	counters   Counters
	compute    computeTimeline
	generation uint64
	nextID     uint64
}

// NewEngine returns an idle engine for p, which must be valid (see Profile.Validate).
func NewEngine(p Profile) *Engine {
	e := &Engine{p: p}
	e.reset()
	return e
}

func (e *Engine) reset() {
	e.pool = newGPUPool(e.p.NumGPUBlocks)
	e.cpu = newCPUTier(e.p.CPUBlocks())
	e.lookups, e.stores = newReuseTracker(), 0
	e.corrupt = map[uint64]bool{}
	e.running, e.waiting = nil, nil
	e.counters = newCounters()
	e.compute = computeTimeline{}
	e.generation++
}

// Submit queues a prompt and admits it at once when its blocks fit. The caller waits with
// WaitAdmitted, then reports tokens with AppendToken and ends with Finish.
func (e *Engine) Submit(prompt []int32) (*Sequence, error) {
	return e.SubmitWith(prompt, SubmitOptions{})
}

// SubmitWith is Submit with per-request cache settings (a cache salt).
func (e *Engine) SubmitWith(prompt []int32, o SubmitOptions) (*Sequence, error) {
	if len(prompt) == 0 {
		return nil, errors.New("empty prompt")
	}
	bs := e.p.BlockSize
	if blocks := (len(prompt) + bs - 1) / bs; blocks > e.p.NumGPUBlocks {
		return nil, fmt.Errorf("%w: %d blocks, pool %d", ErrExceedsKVCapacity, blocks, e.p.NumGPUBlocks)
	}
	hashes, digest := chainHashes(prompt, bs, saltSeed(o.CacheSalt))
	s := &Sequence{
		Digest:    digest,
		promptLen: len(prompt),
		hashes:    hashes,
		numTokens: len(prompt),
		admitted:  make(chan struct{}, 1),
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	e.nextID++
	s.ID = e.nextID
	s.generation = e.generation
	s.jitter = jitterFactor(e.p.JitterSeed, s.ID, e.p.JitterFraction)
	s.InterTokenDelay = scaledDuration(1/e.p.DecodeTokensPerSecond, s.jitter, e.p.Speed)
	s.blocks = make([]int32, 0, (len(prompt)+bs-1)/bs+1)
	e.waiting = append(e.waiting, s)
	e.schedule()
	return s, nil
}

// WaitAdmitted blocks until s is (re)admitted and returns how that prefill was served.
func (e *Engine) WaitAdmitted(ctx context.Context, s *Sequence) (PrefillResult, error) {
	select {
	case <-s.admitted:
	case <-ctx.Done():
		return PrefillResult{}, ctx.Err()
	}
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.state == stateFinished {
		return PrefillResult{}, ErrRestarted
	}
	s.preempted = false
	return s.lastResult, nil
}

// AppendToken records one generated token of a running sequence, taking a new block when
// it crosses a block boundary. When the pool has no free block the most recently admitted
// running sequence is preempted (possibly s itself). It returns false when s has been
// preempted: the token was not generated and the caller must WaitAdmitted again.
// A sequence orphaned by a restart keeps streaming without touching the new counters.
func (e *Engine) AppendToken(s *Sequence) bool {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.generation != e.generation || s.state == stateFinished {
		return true
	}
	if s.preempted || s.state != stateRunning {
		return false
	}
	if s.numTokens+1 > len(s.blocks)*e.p.BlockSize {
		for e.pool.freeLen == 0 {
			victim := e.running[len(e.running)-1]
			e.preempt(victim)
			if victim == s {
				if len(e.running) == 0 {
					e.schedule()
				}
				return false
			}
		}
		b := e.pool.allocate()
		s.blocks = append(s.blocks, b)
	}
	s.numTokens++
	e.counters.GenerationTokens++
	return true
}

// Finish ends s (running or waiting), frees its blocks, counts it under reason and
// admits waiting sequences that now fit.
func (e *Engine) Finish(s *Sequence, reason FinishReason) {
	e.mu.Lock()
	defer e.mu.Unlock()
	if s.generation != e.generation || s.state == stateFinished {
		return
	}
	switch s.state {
	case stateRunning:
		e.releaseBlocks(s)
		e.running = removeSequence(e.running, s)
	case stateWaiting:
		e.waiting = removeSequence(e.waiting, s)
	}
	s.state = stateFinished
	switch reason {
	case FinishStop:
		e.counters.RequestsStop++
	case FinishLength:
		e.counters.RequestsLength++
	default:
		e.counters.RequestsAbort++
	}
	e.schedule()
}

// InterTokenDelay is seq's time between output tokens, read under the engine's lock: a
// readmission after preemption recomputes it while the sequence's generation runs.
func (e *Engine) InterTokenDelay(seq *Sequence) time.Duration {
	e.mu.Lock()
	defer e.mu.Unlock()
	return seq.InterTokenDelay
}

// ObserveLatency records one request's client-visible timings in the histograms.
func (e *Engine) ObserveLatency(ttft, e2e time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counters.TimeToFirstToken.observe(ttft.Seconds())
	e.counters.E2ERequestLatency.observe(e2e.Seconds())
}

// ObserveInterTokenLatency records one gap between output tokens.
func (e *Engine) ObserveInterTokenLatency(d time.Duration) {
	e.mu.Lock()
	defer e.mu.Unlock()
	e.counters.InterTokenLatency.observe(d.Seconds())
}

// Restart simulates a server restart: counters go to zero, both caches empty, waiting
// requests fail with ErrRestarted and running ones become orphans.
func (e *Engine) Restart() {
	e.mu.Lock()
	defer e.mu.Unlock()
	for _, s := range e.waiting {
		s.state = stateFinished
		signal(s.admitted)
	}
	e.reset()
}

// Counters returns a snapshot of the engine's counters and gauges.
func (e *Engine) Counters() Counters {
	e.mu.Lock()
	defer e.mu.Unlock()
	c := e.counters.clone()
	c.Running = len(e.running)
	c.Waiting = len(e.waiting)
	c.GPUBlocksInUse = e.pool.size - e.pool.freeLen
	c.GPUBlocksCached = e.pool.cached.count
	c.CPUBlocksUsed = e.cpu.used
	c.GPUEvictedBlocks = e.pool.evicted
	c.KVCacheUsage = float64(c.GPUBlocksInUse) / float64(e.pool.size)
	return c
}

// schedule admits waiting sequences in order until the first that does not fit.
func (e *Engine) schedule() {
	for len(e.waiting) > 0 && e.tryAdmit(e.waiting[0]) {
		e.waiting[0] = nil
		e.waiting = e.waiting[1:]
	}
}

// tryAdmit allocates s's blocks if they fit: longest GPU prefix hit, then the CPU tier for
// the following blocks, then new blocks for the rest. Hits stop at (tokens-1) rounded down
// to whole blocks because the last token is always computed. The CPU tier is kept as vLLM's
// offloading connector keeps it (see storeToCPU).
func (e *Engine) tryAdmit(s *Sequence) bool {
	bs := e.p.BlockSize
	total := (s.numTokens + bs - 1) / bs
	maxHit := min((s.numTokens-1)/bs, len(s.hashes))
	gpuHit, reclaimed := 0, 0
	for ; gpuHit < maxHit; gpuHit++ {
		b, ok := e.pool.cached.get(s.hashes[gpuHit])
		if !ok {
			break
		}
		if e.pool.refs[b] == 0 {
			reclaimed++
		}
	}
	// The connector's lookup first touches every block of the request the tier holds, GPU
	// hits included (OffloadingConnectorScheduler.get_num_new_matched_tokens), then looks up
	// the whole blocks after the GPU hits, none when the GPU hit them all; store_threshold
	// counts only those, at every admission attempt, as vLLM's scheduler asks the connector
	// each step a request waits with nothing computed (docs/domain.md, store_threshold).
	e.cpu.touchAll(s.hashes)
	if e.p.StoreThreshold >= 2 && gpuHit < len(s.hashes) {
		e.lookups.lookup(s.hashes[gpuHit:])
	}
	cpuHit := 0
	for gpuHit+cpuHit < maxHit && e.cpu.contains(s.hashes[gpuHit+cpuHit]) {
		cpuHit++
	}
	if total-gpuHit > e.pool.freeLen-reclaimed {
		return false
	}

	s.blocks = s.blocks[:0]
	for i := 0; i < gpuHit; i++ {
		b, _ := e.pool.cached.get(s.hashes[i])
		e.pool.ref(b)
		s.blocks = append(s.blocks, b)
	}
	for i := gpuHit; i < total; i++ {
		b := e.pool.allocate()
		s.blocks = append(s.blocks, b)
		if i >= len(s.hashes) {
			continue // a partial prompt block or recomputed output is not cached
		}
		h := s.hashes[i]
		e.pool.register(b, h)
		if i < gpuHit+cpuHit {
			e.noteLoaded(h)
		} else {
			e.noteComputed(h)
		}
	}
	storedBlocks := 0
	if e.cpu.capacity > 0 {
		from := 0
		if cpuHit > 0 {
			from = gpuHit + cpuHit
		}
		storedBlocks = e.storeToCPU(s.hashes[from:], s.hashes)
	}

	c := &e.counters
	r := PrefillResult{
		Tokens:            s.numTokens,
		GPUHitTokens:      gpuHit * bs,
		ExternalHitTokens: cpuHit * bs,
		StoredBytes:       int64(storedBlocks*bs) * e.p.StoreBytesPerToken,
		LoadedBytes:       int64(cpuHit*bs) * e.p.LoadBytesPerToken,
		Readmission:       s.state == stateWaiting && s.firstResult.Tokens > 0,
	}
	r.ComputedTokens = r.Tokens - r.GPUHitTokens - r.ExternalHitTokens
	c.PrefixCacheQueries += int64(r.Tokens)
	c.PrefixCacheHits += int64(r.GPUHitTokens)
	if e.cpu.capacity > 0 {
		c.ExternalPrefixCacheQueries += int64(r.Tokens - r.GPUHitTokens)
		c.ExternalPrefixCacheHits += int64(r.ExternalHitTokens)
	}
	loadSeconds := 0.0
	if r.LoadedBytes > 0 {
		loadSeconds = float64(r.LoadedBytes) / e.p.CPUToGPUBytesPerSecond * s.jitter / e.p.Speed
		c.CPUToGPUBytes += r.LoadedBytes
		c.CPUToGPUSeconds += loadSeconds
		c.CPUToGPUSize.observe(float64(r.LoadedBytes))
	}
	if r.StoredBytes > 0 {
		c.GPUToCPUBytes += r.StoredBytes
		c.GPUToCPUSeconds += float64(r.StoredBytes) / e.p.GPUToCPUBytesPerSecond * s.jitter / e.p.Speed
		c.GPUToCPUSize.observe(float64(r.StoredBytes))
	}
	if !r.Readmission {
		c.PromptTokens += int64(s.promptLen)
		c.PromptTokensLocalCacheHit += int64(r.GPUHitTokens)
		c.PromptTokensExternalKVTransfer += int64(r.ExternalHitTokens)
		c.PromptTokensLocalCompute += int64(s.promptLen - r.GPUHitTokens - r.ExternalHitTokens)
		c.PromptTokensCached += int64(r.GPUHitTokens + r.ExternalHitTokens)
		if r.GPUHitTokens+r.ExternalHitTokens == s.promptLen-1 {
			c.FullyCachedPrompts++ // all but the last token, which always runs
		}
	}
	r.Duration = e.prefillDuration(time.Duration(loadSeconds*float64(time.Second))+e.reloadLatency(cpuHit > 0, s.jitter),
		scaledDuration(e.prefillSeconds(r.GPUHitTokens+r.ExternalHitTokens, r.Tokens)+e.p.RequestOverhead.Seconds(), s.jitter, e.p.Speed))
	s.InterTokenDelay = e.decodeDelay(scaledDuration(1/e.p.DecodeTokensPerSecond, s.jitter, e.p.Speed))

	if !r.Readmission {
		s.firstResult = r
		s.output = e.outputDigest(s)
	}
	s.lastResult = r
	s.state = stateRunning
	e.running = append(e.running, s)
	signal(s.admitted)
	return true
}

// prefillSeconds is the unscaled time to compute tokens from..to-1 of a context, each
// token slowed by the context before it.
func (e *Engine) prefillSeconds(from, to int) float64 {
	n := float64(to - from)
	meanContext := float64(from+to) / 2
	return n / e.p.PrefillTokensPerSecond * (1 + e.p.PrefillSlowdownPer100k*meanContext/100000)
}

// preempt frees a running sequence's blocks and puts it at the head of the waiting queue;
// its cached blocks stay hashed, so readmission hits what was not evicted meanwhile.
func (e *Engine) preempt(s *Sequence) {
	e.releaseBlocks(s)
	e.running = removeSequence(e.running, s)
	s.state = stateWaiting
	s.preempted = true
	e.waiting = slices.Insert(e.waiting, 0, s)
	e.counters.Preemptions++
}

// releaseBlocks returns s's blocks to the free queue, last block first, so a request's
// tail is evicted before its head (shared prefixes survive longest), as vLLM does.
func (e *Engine) releaseBlocks(s *Sequence) {
	for i := len(s.blocks) - 1; i >= 0; i-- {
		e.pool.release(s.blocks[i])
	}
	s.blocks = s.blocks[:0]
}

func removeSequence(list []*Sequence, s *Sequence) []*Sequence {
	if i := slices.Index(list, s); i >= 0 {
		return slices.Delete(list, i, i+1)
	}
	return list
}

func signal(ch chan struct{}) {
	select {
	case ch <- struct{}{}:
	default:
	}
}

func scaledDuration(seconds, jitter, speed float64) time.Duration {
	return time.Duration(seconds * jitter / speed * float64(time.Second))
}

// jitterFactor draws a factor in [1-fraction, 1+fraction] from (seed, request).
func jitterFactor(seed, request uint64, fraction float64) float64 {
	if fraction == 0 {
		return 1
	}
	return 1 + fraction*(2*unitFloat(mix64(seed^mix64(request)))-1)
}

// unitFloat maps a hash to [0, 1).
func unitFloat(h uint64) float64 { return float64(h>>11) / (1 << 53) }

// mix64 is splitmix64's finalizer: a cheap, well-spread 64-bit hash step.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// chainSeed starts the block hash chain of an unsalted prompt.
const chainSeed = uint64(0x6b7662656e6368) // "kvbench"

// BlockHashes returns the chained hashes of tokens' full blocks (each covers its tokens
// and its parent's hash) and a digest of all tokens, the partial last block included.
func BlockHashes(tokens []int32, blockSize int) (hashes []uint64, digest uint64) {
	return chainHashes(tokens, blockSize, chainSeed)
}

// chainHashes is BlockHashes from seed (a salted chain, fidelity.go); the digest is always
// the unsalted one: it stands for what the tokens compute, not where they are kept.
func chainHashes(tokens []int32, blockSize int, seed uint64) (hashes []uint64, digest uint64) {
	hashes = make([]uint64, 0, len(tokens)/blockSize)
	h := seed
	full := len(tokens) / blockSize * blockSize
	for start := 0; start < full; start += blockSize {
		for _, t := range tokens[start : start+blockSize] {
			h = (h ^ uint64(uint32(t))) * 0x100000001b3
		}
		h = mix64(h)
		if h == 0 {
			h = 1 // 0 marks an empty slot and an uncached block
		}
		hashes = append(hashes, h)
	}
	for _, t := range tokens[full:] {
		h = (h ^ uint64(uint32(t))) * 0x100000001b3
	}
	digest = mix64(h ^ uint64(len(tokens)))
	if seed != chainSeed {
		_, digest = chainHashes(tokens, blockSize, chainSeed)
	}
	return hashes, digest
}

// gpuPool is vLLM's block pool: refcounted blocks, a hash -> block map of cached full
// blocks, and a free queue (refcount 0) evicted from the head, LRU first.
type gpuPool struct {
	size       int
	hash       []uint64 // 0 when the block caches nothing
	refs       []int32
	prev, next []int32 // free queue links; index size is the sentinel
	freeLen    int
	cached     blockTable
	// evicted counts cached blocks dropped to make room (SGLang's evicted_tokens, in blocks).
	evicted int64
}

func newGPUPool(n int) gpuPool {
	p := gpuPool{
		size:   n,
		hash:   make([]uint64, n),
		refs:   make([]int32, n),
		prev:   make([]int32, n+1),
		next:   make([]int32, n+1),
		cached: newBlockTable(n),
	}
	p.next[n], p.prev[n] = int32(n), int32(n)
	for b := 0; b < n; b++ {
		p.pushTail(int32(b))
	}
	return p
}

func (p *gpuPool) pushTail(b int32) {
	s := int32(p.size)
	last := p.prev[s]
	p.next[last], p.prev[b] = b, last
	p.next[b], p.prev[s] = s, b
	p.freeLen++
}

func (p *gpuPool) unlink(b int32) {
	p.next[p.prev[b]] = p.next[b]
	p.prev[p.next[b]] = p.prev[b]
	p.freeLen--
}

// allocate takes the head of the free queue, evicting what it cached, with refcount 1.
func (p *gpuPool) allocate() int32 {
	b := p.next[p.size]
	p.unlink(b)
	if h := p.hash[b]; h != 0 {
		p.cached.remove(h) // hash is set only on the block that holds the table entry
		p.hash[b] = 0
		p.evicted++
	}
	p.refs[b] = 1
	return b
}

// register caches b under h unless another block already holds h.
func (p *gpuPool) register(b int32, h uint64) {
	if p.cached.insert(h, b) {
		p.hash[b] = h
	}
}

func (p *gpuPool) ref(b int32) {
	if p.refs[b] == 0 {
		p.unlink(b)
	}
	p.refs[b]++
}

func (p *gpuPool) release(b int32) {
	p.refs[b]--
	if p.refs[b] == 0 {
		p.pushTail(b)
	}
}

// admitStore applies the store filters to a block offered to the CPU tier: the
// store_threshold reuse filter (the block's lookups so far, this request's included; a block
// already in the tier is skipped too, as vLLM filters before its manager), then injected
// allocation failures. It counts what it refuses.
func (e *Engine) admitStore(h uint64) bool {
	if e.p.StoreThreshold >= 2 && e.lookups.count(h) < e.p.StoreThreshold {
		e.counters.StoresSkipped++
		return false
	}
	if n := e.p.AllocationFailEveryNthStore; n > 0 && !e.cpu.contains(h) {
		e.stores++
		if e.stores%n == 0 {
			e.counters.AllocationFailures++
			return false
		}
	}
	return true
}

// storeToCPU writes a request's blocks offered to the CPU tier, as vLLM's offloading
// connector stores them (vllm-project/vllm@7368908, offloading_connector.py
// _get_reqs_to_store, and @3a04cf8 vllm/v1/kv_offload/lru_manager.py prepare_store): the
// offered blocks are the request's whole blocks from the first when nothing was loaded, else
// those after the loaded ones; the ones the tier lacks (and the store filters pass) are
// stored, evicting the least recently used, unless they are more than the tier holds: then
// none is (the manager cannot make room, counted as an allocation failure). After a store
// all the request's blocks are touched, so its first block is the most recent. It returns
// the blocks stored.
func (e *Engine) storeToCPU(offered, all []uint64) int {
	toStore := e.toStore[:0]
	for _, h := range offered {
		if e.admitStore(h) && !e.cpu.contains(h) {
			toStore = append(toStore, h)
		}
	}
	e.toStore = toStore
	switch n := len(toStore); {
	case n == 0:
		return 0
	case n > e.cpu.capacity:
		e.counters.AllocationFailures++
		return 0
	}
	for _, h := range toStore {
		e.cpu.store(h)
	}
	e.cpu.touchAll(all)
	return len(toStore)
}

// cpuTier is the offload tier: capacity blocks, LRU, keyed by block hash.
type cpuTier struct {
	capacity   int
	used       int
	slot       blockTable
	hash       []uint64
	prev, next []int32 // recency list, most recent after the sentinel at index 0
}

func newCPUTier(capacity int) cpuTier {
	return cpuTier{
		capacity: capacity,
		slot:     newBlockTable(0),
		hash:     []uint64{0},
		prev:     []int32{0},
		next:     []int32{0},
	}
}

func (c *cpuTier) contains(h uint64) bool {
	_, ok := c.slot.find(h)
	return ok
}

func (c *cpuTier) unlink(s int32) {
	c.next[c.prev[s]] = c.next[s]
	c.prev[c.next[s]] = c.prev[s]
}

func (c *cpuTier) pushFront(s int32) {
	first := c.next[0]
	c.prev[s], c.next[s] = 0, first
	c.prev[first], c.next[0] = s, s
}

func (c *cpuTier) touch(h uint64) {
	if s, ok := c.slot.get(h); ok {
		c.unlink(s)
		c.pushFront(s)
	}
}

// touchAll makes the blocks of hashes the tier holds the most recently used, the last first,
// so the first ends the most recent (LRUOffloadingManager.touch walks them in reverse).
func (c *cpuTier) touchAll(hashes []uint64) {
	if c.capacity == 0 {
		return
	}
	for i := len(hashes) - 1; i >= 0; i-- {
		c.touch(hashes[i])
	}
}

// store writes h to the tier, evicting the least recently used block when full. It
// returns false (and only refreshes recency) when h is already there.
func (c *cpuTier) store(h uint64) bool {
	if s, ok := c.slot.get(h); ok {
		c.unlink(s)
		c.pushFront(s)
		return false
	}
	var s int32
	if c.used < c.capacity {
		c.used++
		s = int32(len(c.hash))
		c.hash = append(c.hash, h)
		c.prev = append(c.prev, 0)
		c.next = append(c.next, 0)
	} else {
		s = c.prev[0]
		c.unlink(s)
		c.slot.remove(c.hash[s])
		c.hash[s] = h
	}
	c.slot.insert(h, s)
	c.pushFront(s)
	return true
}

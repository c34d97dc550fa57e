package trace

import (
	"fmt"
	"strconv"
	"strings"
)

// Host-tier policies: which blocks an engine writes to its host tier, and when. Each is read
// from the engine's code (docs/traces.md, "Host-tier policies").
const (
	// PolicyVLLM is vLLM's native OffloadingConnector with its LRU manager (TierShares), and
	// with store_threshold its FilterReusedOffloadingManager.
	PolicyVLLM = "vllm"
	// PolicySGLangWriteThrough is SGLang HiCache's write_through: a block is written to the
	// host when it enters the radix tree.
	PolicySGLangWriteThrough = "sglang-write-through"
	// PolicySGLangWriteThroughSelective is write_through_selective: written once hit twice.
	PolicySGLangWriteThroughSelective = "sglang-write-through-selective"
	// PolicySGLangWriteBack is write_back: written when the GPU evicts it.
	PolicySGLangWriteBack = "sglang-write-back"
	// PolicyLlamaCpp is llama.cpp server's host prompt cache (--cache-ram) behind one slot
	// (-np 1): whole slot states saved when the slot is reused, restored by longest prefix.
	PolicyLlamaCpp = "llamacpp"
)

// vLLM's FilterReusedOffloadingManager default tracker size (max_tracker_size).
const defaultTrackerSize = 64_000

// Policy is a host tier's write policy and its parameters.
type Policy struct {
	Name string
	// StoreThreshold (vllm): a block is stored only once looked up this many times; below 2
	// there is no filter, as in vLLM.
	StoreThreshold int
	// TrackerSize (vllm, StoreThreshold >= 2): the entries of the LRU table counting lookups.
	TrackerSize int
	// Slots (llamacpp): the server's -np, 1 when 0; KVUnified: --kv-unified, which -np
	// auto (4 slots) turns on.
	Slots     int
	KVUnified bool
}

// ParsePolicy reads NAME[:PARAM=V[,PARAM=V]], such as vllm:store_threshold=2.
func ParsePolicy(s string) (Policy, error) {
	name, params, _ := strings.Cut(strings.TrimSpace(s), ":")
	p := Policy{Name: name}
	var allowed []string
	switch name {
	case PolicyVLLM:
		allowed = []string{"store_threshold", "max_tracker_size"}
		p.TrackerSize = defaultTrackerSize
	case PolicyLlamaCpp:
		allowed = []string{"slots", "kv_unified"}
		p.Slots = 1
	case PolicySGLangWriteThrough, PolicySGLangWriteThroughSelective, PolicySGLangWriteBack:
	default:
		return p, fmt.Errorf("unknown policy %q (%s, %s, %s, %s or %s)", name, PolicyVLLM, PolicySGLangWriteThrough, PolicySGLangWriteThroughSelective, PolicySGLangWriteBack, PolicyLlamaCpp)
	}
	if params == "" {
		return p, nil
	}
	for _, kv := range strings.Split(params, ",") {
		k, v, ok := strings.Cut(kv, "=")
		n, err := strconv.Atoi(v)
		if !ok || err != nil || n < 0 {
			return p, fmt.Errorf("policy %s: %q is not PARAM=N (a whole number >= 0)", name, kv)
		}
		switch {
		case k == "store_threshold" && name == PolicyVLLM:
			p.StoreThreshold = n
		case k == "max_tracker_size" && name == PolicyVLLM && n >= 1:
			p.TrackerSize = n
		case k == "slots" && name == PolicyLlamaCpp && n >= 1:
			p.Slots = n
		case k == "kv_unified" && name == PolicyLlamaCpp && n <= 1:
			p.KVUnified = n == 1
		default:
			if len(allowed) == 0 {
				return p, fmt.Errorf("policy %s takes no parameters", name)
			}
			return p, fmt.Errorf("policy %s: bad parameter %q (it takes %s; max_tracker_size and slots >= 1, kv_unified 0 or 1)", name, kv, strings.Join(allowed, ", "))
		}
	}
	return p, nil
}

// String is the policy as ParsePolicy reads it, parameters that differ from the defaults
// included.
func (p Policy) String() string {
	var params []string
	if p.StoreThreshold >= 2 {
		params = append(params, "store_threshold="+strconv.Itoa(p.StoreThreshold))
		if p.TrackerSize != defaultTrackerSize {
			params = append(params, "max_tracker_size="+strconv.Itoa(p.TrackerSize))
		}
	}
	if p.Slots > 1 {
		params = append(params, "slots="+strconv.Itoa(p.Slots))
	}
	if p.KVUnified {
		params = append(params, "kv_unified=1")
	}
	if len(params) == 0 {
		return p.Name
	}
	return p.Name + ":" + strings.Join(params, ",")
}

// hostTier is one host tier of a policy, fed request by request: lookup before the request's
// blocks enter the GPU tier, settle after.
type hostTier interface {
	// lookup returns how many blocks after the g GPU hits the host tier serves (capped at
	// hittable).
	lookup(keys []uint64, hittable, g int) int
	// settle runs once the request's blocks are in the GPU tier, told what changed there and
	// how many times the engine inserts the request into its cache.
	settle(keys []uint64, inserts int32, moved *gpuMoves, gpu *lruSet)
	storedBlocks() int64
}

func newHostTier(p Policy, blocks int64, counter *lookupCounter) hostTier {
	lru := newLRUSet(int(blocks))
	switch p.Name {
	case PolicySGLangWriteThrough:
		return &sglangHost{lru: lru, threshold: 1, hits: newKeyTable()}
	case PolicySGLangWriteThroughSelective:
		return &sglangHost{lru: lru, threshold: 2, hits: newKeyTable()}
	case PolicySGLangWriteBack:
		return &sglangHost{lru: lru, writeBack: true, hits: newKeyTable()}
	}
	return &vllmHost{lru: lru, counter: counter, threshold: int32(p.StoreThreshold)}
}

// lookupCounter is FilterReusedOffloadingManager's count of lookups: each block the
// connector asks for (those after the GPU hits: vllm-project/vllm@0072b0b
// kv_connector/v1/offloading/scheduler.py get_num_new_matched_tokens) counted in an LRU table
// of TrackerSize entries, the least recent entry and its count dropped when full; stores only
// read it (docs/domain.md, section 7, store_threshold). Once per request: vLLM asks again each
// step a request waits for room. It depends on the GPU tier only, so one serves every
// host-tier size of a pass.
type lookupCounter struct {
	counts  map[uint64]int32
	tracker *lruSet // recency of counts' keys
}

func newLookupCounter(p Policy) *lookupCounter {
	if p.Name != PolicyVLLM || p.StoreThreshold < 2 {
		return nil // no filter
	}
	c := &lookupCounter{counts: map[uint64]int32{}, tracker: newLRUSet(p.TrackerSize)}
	c.tracker.onEvict = func(k uint64) { delete(c.counts, k) }
	return c
}

// lookup counts the blocks after the g GPU hits; the connector looks up nothing when the GPU
// hit every whole block.
func (c *lookupCounter) lookup(keys []uint64, g int) {
	if g >= len(keys) {
		return
	}
	for _, k := range keys[g:] {
		if !c.tracker.touch(k) {
			c.tracker.add(k)
		}
		c.counts[k]++
	}
}

// vllmHost is TierShares' host tier; with a lookupCounter, FilterReusedOffloadingManager's
// filter: a block is stored only once counted threshold times.
type vllmHost struct {
	lru       *lruSet
	counter   *lookupCounter // nil: no filter
	threshold int32
	toStore   []uint64
	stored    int64
}

func (h *vllmHost) lookup(keys []uint64, hittable, g int) int {
	touchAll(h.lru, keys)
	c := 0
	for g+c < hittable && h.lru.contains(keys[g+c]) {
		c++
	}
	from := 0
	if c > 0 {
		from = g + c
	}
	h.toStore = h.toStore[:0]
	for _, k := range keys[from:] {
		if !h.lru.contains(k) && (h.counter == nil || h.counter.counts[k] >= h.threshold) {
			h.toStore = append(h.toStore, k)
		}
	}
	if n := len(h.toStore); n > 0 && n <= h.lru.capacity {
		h.lru.evict(h.lru.len() + n - h.lru.capacity)
		for _, k := range h.toStore {
			h.lru.add(k)
		}
		touchAll(h.lru, keys)
		h.stored += int64(n)
	}
	return c
}

func (h *vllmHost) settle([]uint64, int32, *gpuMoves, *lruSet) {}
func (h *vllmHost) storedBlocks() int64                        { return h.stored }

// sglangHost is HiRadixCache's host tier at block granularity. A block is written to the
// host when its hit count (raised each time a request inserts it while it is on the GPU)
// reaches threshold, or, write-back, when the GPU evicts it. Room is made by evicting the
// least recent host block that is not on the GPU (evict_host evicts only nodes the device
// dropped); when there is none the write fails. A block in neither tier loses its count (its
// tree node is deleted).
type sglangHost struct {
	lru       *lruSet
	threshold int32
	writeBack bool
	hits      keyTable // hit counts of the blocks in either tier (write-through)
	stored    int64
	// onGPU counts the host blocks also on the GPU: when it is all of them a write fails
	// without walking the tier.
	onGPU int
	// walkAll walks the tier even then (a test holds the count to it).
	walkAll bool
}

func (h *sglangHost) lookup(keys []uint64, hittable, g int) int {
	c := 0
	for g+c < hittable && h.lru.contains(keys[g+c]) {
		c++
	}
	touchAll(h.lru, keys) // match and insert refresh every node on the request's path
	return c
}

func (h *sglangHost) settle(keys []uint64, inserts int32, moved *gpuMoves, gpu *lruSet) {
	for _, c := range moved.changed {
		if h.lru.contains(c.key) {
			h.onGPU += c.delta
		}
	}
	for _, k := range moved.evicted {
		if h.lru.contains(k) || gpu.contains(k) {
			continue // backed up (only the device copy goes), or back on the GPU already
		}
		if h.writeBack {
			h.write(k, gpu)
		} else if h.counting() {
			h.hits.remove(k)
		}
	}
	if h.writeBack {
		return
	}
	wrote := false
	for _, k := range keys {
		if h.lru.contains(k) {
			if h.counting() {
				n, _ := h.hits.get(k)
				h.hits.set(k, n+inserts)
			}
			continue
		}
		n := inserts
		if h.counting() {
			n0, _ := h.hits.get(k)
			n += n0
			h.hits.set(k, n)
		}
		if n >= h.threshold {
			wrote = h.write(k, gpu) || wrote
		}
	}
	if wrote {
		touchAll(h.lru, keys) // the request's path shares one access time, its first block last evicted
	}
}

// write stores k, evicting the least recent host block not on the GPU when the tier is
// full; false when it cannot.
func (h *sglangHost) write(k uint64, gpu *lruSet) bool {
	if h.lru.capacity <= 0 {
		return false
	}
	if h.lru.len() >= h.lru.capacity {
		if h.onGPU >= h.lru.len() && !h.walkAll {
			return false
		}
		old, ok := h.lru.evictOldestExcept(gpu.contains)
		if !ok {
			return false
		}
		if h.counting() {
			h.hits.remove(old) // in neither tier now
		}
	}
	h.lru.add(k)
	if gpu.contains(k) {
		h.onGPU++
	}
	h.stored++
	return true
}

func (h *sglangHost) storedBlocks() int64 { return h.stored }

// counting reports whether hit counts matter: not when one insert reaches the threshold
// (write_through), nor for write_back.
func (h *sglangHost) counting() bool { return !h.writeBack && h.threshold > 1 }

// touchAll refreshes the request's blocks present in l, last first, so that its first block
// ends the most recent.
func touchAll(l *lruSet, keys []uint64) {
	for i := len(keys) - 1; i >= 0; i-- {
		l.touch(keys[i])
	}
}

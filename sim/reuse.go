package sim

import "container/list"

// maxTrackerSize is vLLM's default max_tracker_size: the entries of the store_threshold
// lookup count.
const maxTrackerSize = 64_000

// reuseTracker is vLLM's store_threshold count (vllm-project/vllm@067f263
// vllm/v1/kv_offload/reuse_manager.py, FilterReusedOffloadingManager; BlockReuseTracker
// @944208b): lookup counts each block hash the connector looks up, in an LRU table of
// maxTrackerSize entries whose least recent entry and its count are dropped when full, and
// a store passes only blocks counted at least store_threshold times. Only lookups count: a
// store reads the count and leaves it and its recency alone.
type reuseTracker struct {
	entries map[uint64]*list.Element // value: *reuseEntry
	order   list.List                // most recent first
}

type reuseEntry struct {
	hash  uint64
	count int
}

func newReuseTracker() *reuseTracker {
	return &reuseTracker{entries: map[uint64]*list.Element{}}
}

// lookup counts each of hashes once.
func (t *reuseTracker) lookup(hashes []uint64) {
	for _, h := range hashes {
		if el, ok := t.entries[h]; ok {
			el.Value.(*reuseEntry).count++
			t.order.MoveToFront(el)
			continue
		}
		if len(t.entries) >= maxTrackerSize {
			oldest := t.order.Back()
			delete(t.entries, oldest.Value.(*reuseEntry).hash)
			t.order.Remove(oldest)
		}
		t.entries[h] = t.order.PushFront(&reuseEntry{hash: h, count: 1})
	}
}

// count is how many times h was looked up since it entered the table.
func (t *reuseTracker) count(h uint64) int {
	if el, ok := t.entries[h]; ok {
		return el.Value.(*reuseEntry).count
	}
	return 0
}

package trace

// lruSet is a set of block keys with a capacity, least recently used evicted first, every
// operation O(1). Key 0 is reserved (blockKeys never makes it).
type lruSet struct {
	capacity   int
	slot       keyTable
	key        []uint64 // slot -> key; slot 0 is the recency list's sentinel
	prev, next []int32  // recency list: next[0] is the most recent, prev[0] the least
	free       []int32  // slots freed by evict
	// onEvict, when set, is told each key evict drops.
	onEvict func(k uint64)
}

func newLRUSet(capacity int) *lruSet {
	return &lruSet{
		capacity: capacity,
		slot:     newKeyTable(),
		key:      []uint64{0},
		prev:     []int32{0},
		next:     []int32{0},
	}
}

func (l *lruSet) len() int { return l.slot.count }

func (l *lruSet) contains(k uint64) bool {
	_, ok := l.slot.find(k)
	return ok
}

func (l *lruSet) unlink(s int32) {
	l.next[l.prev[s]] = l.next[s]
	l.prev[l.next[s]] = l.prev[s]
}

func (l *lruSet) pushFront(s int32) {
	first := l.next[0]
	l.prev[s], l.next[s] = 0, first
	l.prev[first], l.next[0] = s, s
}

// touch makes k the most recently used key when present, and reports whether it was.
func (l *lruSet) touch(k uint64) bool {
	s, ok := l.slot.get(k)
	if ok {
		l.unlink(s)
		l.pushFront(s)
	}
	return ok
}

// add makes k the most recently used key, evicting the least recently used one when the set
// is full. A set of capacity 0 holds nothing.
func (l *lruSet) add(k uint64) {
	if l.capacity <= 0 || l.touch(k) {
		return
	}
	if l.slot.count >= l.capacity {
		l.evict(1)
	}
	var s int32
	if n := len(l.free); n > 0 {
		s = l.free[n-1]
		l.free = l.free[:n-1]
	} else {
		s = int32(len(l.key))
		l.key = append(l.key, 0)
		l.prev = append(l.prev, 0)
		l.next = append(l.next, 0)
	}
	l.key[s] = k
	l.slot.set(k, s)
	l.pushFront(s)
}

// evict drops the n least recently used keys (fewer when the set holds fewer).
func (l *lruSet) evict(n int) {
	for ; n > 0 && l.slot.count > 0; n-- {
		s := l.prev[0]
		l.unlink(s)
		k := l.key[s]
		l.slot.remove(k)
		l.key[s] = 0
		l.free = append(l.free, s)
		if l.onEvict != nil {
			l.onEvict(k)
		}
	}
}

// evictOldestExcept drops the least recently used key for which keep is false and returns
// it; false when every key is kept.
func (l *lruSet) evictOldestExcept(keep func(k uint64) bool) (uint64, bool) {
	for s := l.prev[0]; s != 0; s = l.prev[s] {
		k := l.key[s]
		if keep(k) {
			continue
		}
		l.unlink(s)
		l.slot.remove(k)
		l.key[s] = 0
		l.free = append(l.free, s)
		return k, true
	}
	return 0, false
}

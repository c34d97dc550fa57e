package trace

// recencyStack gives each key's LRU stack depth: how many distinct keys were accessed since
// its last access. An LRU cache of C keys holds exactly the keys of depth < C (LRU's
// inclusion property), so one pass over an access sequence answers every capacity at once
// (Mattson et al., 1970). Every access gets the next time slot; a Fenwick tree over the
// slots counts the slots that still hold some key's latest access, so a depth costs
// O(log slots). Slots are compacted when at most half of them are live, so memory follows
// the number of distinct keys, not the number of accesses.
type recencyStack struct {
	pos  keyTable // key -> slot of its latest access
	keys []uint64 // slot -> key, 0 once that key was accessed again
	tree []int32  // Fenwick tree over slots (1-based): live slots
	next int32    // the next free slot
}

func newRecencyStack() *recencyStack {
	const initial = 1 << 12
	return &recencyStack{
		pos:  newKeyTable(),
		keys: make([]uint64, initial),
		tree: make([]int32, initial+1),
	}
}

// depth returns k's stack depth (0: the most recently accessed key), or -1 when k was never
// accessed.
func (s *recencyStack) depth(k uint64) int {
	p, ok := s.pos.get(k)
	if !ok {
		return -1
	}
	// Live slots after p are the keys accessed since k.
	return s.pos.count - s.prefix(int(p)+1)
}

// access records an access to k, making it the most recent key.
func (s *recencyStack) access(k uint64) {
	if p, ok := s.pos.get(k); ok {
		s.keys[p] = 0
		s.add(int(p)+1, -1)
	}
	if int(s.next) == len(s.keys) {
		s.makeRoom()
	}
	p := s.next
	s.next++
	s.keys[p] = k
	s.pos.set(k, p)
	s.add(int(p)+1, 1)
}

// makeRoom compacts the live slots to the front, growing the arrays when more than half
// of them are live, and rebuilds the tree.
func (s *recencyStack) makeRoom() {
	live := s.pos.count
	if live*2 > len(s.keys) {
		grown := make([]uint64, 2*len(s.keys))
		copy(grown, s.keys)
		s.keys = grown
		s.tree = make([]int32, len(s.keys)+1)
	}
	j := int32(0)
	for i := int32(0); i < s.next; i++ {
		if k := s.keys[i]; k != 0 {
			s.keys[i] = 0
			s.keys[j] = k
			s.pos.set(k, j)
			j++
		}
	}
	s.next = j
	// The first j slots are live: tree[i] counts the live slots in (i-lowbit(i), i].
	for i := 1; i < len(s.tree); i++ {
		lo := i - i&-i
		s.tree[i] = int32(max(0, min(i, int(j))-lo))
	}
}

func (s *recencyStack) add(i int, delta int32) {
	for ; i < len(s.tree); i += i & -i {
		s.tree[i] += delta
	}
}

// prefix counts the live slots among the first i.
func (s *recencyStack) prefix(i int) int {
	n := int32(0)
	for ; i > 0; i -= i & -i {
		n += s.tree[i]
	}
	return int(n)
}

package trace

// keyTable maps non-zero block keys to int32 values: open addressing with linear probing,
// deletion by shifting the rest of a probe run back (no tombstones, so an LRU that deletes a
// key per insert keeps short probes). Block keys are already well mixed, so their high bits
// index directly. It grows at half full and never shrinks.
type keyTable struct {
	keys  []uint64 // 0: an empty slot
	vals  []int32
	shift uint // 64 - log2(len(keys))
	count int
}

func newKeyTable() keyTable {
	const bits = 10
	return keyTable{keys: make([]uint64, 1<<bits), vals: make([]int32, 1<<bits), shift: 64 - bits}
}

func (t *keyTable) home(k uint64) int { return int(k >> t.shift) }

// find returns k's slot and whether k is there; when absent, the slot k would take.
func (t *keyTable) find(k uint64) (int, bool) {
	mask := len(t.keys) - 1
	for i := t.home(k); ; i = (i + 1) & mask {
		switch t.keys[i] {
		case k:
			return i, true
		case 0:
			return i, false
		}
	}
}

func (t *keyTable) get(k uint64) (int32, bool) {
	i, ok := t.find(k)
	return t.vals[i], ok
}

// set maps k to v.
func (t *keyTable) set(k uint64, v int32) {
	i, ok := t.find(k)
	t.vals[i] = v
	if ok {
		return
	}
	t.keys[i] = k
	t.count++
	if 2*t.count > len(t.keys) {
		t.grow()
	}
}

func (t *keyTable) grow() {
	old := *t
	n := 2 * len(old.keys)
	*t = keyTable{keys: make([]uint64, n), vals: make([]int32, n), shift: old.shift - 1}
	for i, k := range old.keys {
		if k != 0 {
			j, _ := t.find(k)
			t.keys[j], t.vals[j] = k, old.vals[i]
			t.count++
		}
	}
}

// remove deletes k. The entries after it in its probe run move back into the hole when
// their home is not between the hole and where they sit, so every key stays reachable.
func (t *keyTable) remove(k uint64) {
	hole, ok := t.find(k)
	if !ok {
		return
	}
	mask := len(t.keys) - 1
	for j := (hole + 1) & mask; t.keys[j] != 0; j = (j + 1) & mask {
		// distance from home to j, and from the hole to j, along the probe direction
		if (j-t.home(t.keys[j]))&mask >= (j-hole)&mask {
			t.keys[hole], t.vals[hole] = t.keys[j], t.vals[j]
			hole = j
		}
	}
	t.keys[hole], t.vals[hole] = 0, 0
	t.count--
}

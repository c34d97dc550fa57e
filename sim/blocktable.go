package sim

// blockTable maps non-zero block hashes to int32 slots with open addressing and linear
// probing. Block hashes are already well mixed, so the low bits index directly; it does a
// third of the work of a Go map on the per-block hot path of a 150k-token request.
type blockTable struct {
	keys  []uint64 // 0 marks an empty slot
	vals  []int32
	count int
}

func newBlockTable(expected int) blockTable {
	n := 1024
	for n < 2*expected {
		n *= 2
	}
	return blockTable{keys: make([]uint64, n), vals: make([]int32, n)}
}

func (t *blockTable) mask() uint64 { return uint64(len(t.keys) - 1) }

// find returns h's slot index and whether h is present; when absent, the index is where
// h would go.
func (t *blockTable) find(h uint64) (int, bool) {
	m := t.mask()
	for i := h & m; ; i = (i + 1) & m {
		switch t.keys[i] {
		case h:
			return int(i), true
		case 0:
			return int(i), false
		}
	}
}

func (t *blockTable) get(h uint64) (int32, bool) {
	i, ok := t.find(h)
	return t.vals[i], ok
}

// insert adds h -> v unless h is present; it reports whether it added.
func (t *blockTable) insert(h uint64, v int32) bool {
	i, ok := t.find(h)
	if ok {
		return false
	}
	t.keys[i], t.vals[i] = h, v
	t.count++
	if 2*t.count > len(t.keys) {
		t.grow()
	}
	return true
}

func (t *blockTable) grow() {
	old := *t
	*t = blockTable{keys: make([]uint64, 2*len(old.keys)), vals: make([]int32, 2*len(old.keys))}
	for i, k := range old.keys {
		if k != 0 {
			t.insert(k, old.vals[i])
		}
	}
}

// remove deletes h, shifting later entries of its probe run back so lookups stay correct
// without tombstones.
func (t *blockTable) remove(h uint64) {
	i, ok := t.find(h)
	if !ok {
		return
	}
	m := t.mask()
	for j := (uint64(i) + 1) & m; t.keys[j] != 0; j = (j + 1) & m {
		home := t.keys[j] & m
		// Move j into the hole at i when its home position is not in (i, j] cyclically.
		if (j > uint64(i) && (home <= uint64(i) || home > j)) || (j < uint64(i) && home <= uint64(i) && home > j) {
			t.keys[i], t.vals[i] = t.keys[j], t.vals[j]
			i = int(j)
		}
	}
	t.keys[i], t.vals[i] = 0, 0
	t.count--
}

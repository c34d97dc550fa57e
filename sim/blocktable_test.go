package sim

import "testing"

// TestBlockTableMatchesMap drives the table and a Go map with the same random operations
// over a small key space, so probe runs collide, wrap and shift back on removal.
func TestBlockTableMatchesMap(t *testing.T) {
	table := newBlockTable(0)
	want := map[uint64]int32{}
	for i := range 50000 {
		r := mix64(uint64(i))
		// Keys share low bits often: many land in the same probe run.
		key := (r%3000)<<20 | (r>>40)%5 | 1
		switch r >> 62 {
		case 0, 1:
			_, had := want[key]
			if added := table.insert(key, int32(i)); added == had {
				t.Fatalf("op %d: insert(%x) added=%v, map had=%v", i, key, added, had)
			}
			if !had {
				want[key] = int32(i)
			}
		case 2:
			table.remove(key)
			delete(want, key)
		default:
			got, ok := table.get(key)
			w, had := want[key]
			if ok != had || got != w {
				t.Fatalf("op %d: get(%x) = %d,%v; map %d,%v", i, key, got, ok, w, had)
			}
		}
		if table.count != len(want) {
			t.Fatalf("op %d: count %d, map %d", i, table.count, len(want))
		}
	}
	for k, v := range want {
		if got, ok := table.get(k); !ok || got != v {
			t.Fatalf("final get(%x) = %d,%v; want %d", k, got, ok, v)
		}
	}
}

package sim

import "testing"

// BenchmarkRequestBookkeeping150k measures the engine's work for one 150k-token request on
// dsv4-offload16 (hashing, lookup, allocation, eviction, write-through), tokenizing
// excluded. "cold" rotates eight prompts so each one was evicted from both tiers; "replay"
// repeats one prompt (a GPU hit).
func BenchmarkRequestBookkeeping150k(b *testing.B) {
	p, err := LoadProfile("dsv4-offload16")
	if err != nil {
		b.Fatal(err)
	}
	prompts := make([][]int32, 8)
	for i := range prompts {
		prompts[i] = syntheticPrompt(uint64(i), 150000)
	}
	run := func(b *testing.B, pick func(i int) []int32) {
		e := NewEngine(p)
		b.ReportAllocs()
		i := 0
		for b.Loop() {
			s, err := e.Submit(pick(i))
			if err != nil || s.state != stateRunning {
				b.Fatalf("request %d not admitted: %v", i, err)
			}
			e.Finish(s, FinishStop)
			i++
		}
	}
	b.Run("cold", func(b *testing.B) { run(b, func(i int) []int32 { return prompts[i%len(prompts)] }) })
	b.Run("replay", func(b *testing.B) { run(b, func(int) []int32 { return prompts[0] }) })
}

package trace

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

// llamaDirect is llama.cpp's slot and prompt cache written token by token from the server's
// code (get_available_slot, server_prompt_cache::alloc and ::load), with none of the block
// shortcuts of llamaHost: the reference the one pass is held to.
type llamaDirect struct {
	capacity   int
	unified    bool
	slots      [][]int64
	lastUsed   []int64
	cache      [][]int64
	live, host int64
	stored     int64
}

func newLlamaDirect(capacity, slots int, unified bool) *llamaDirect {
	d := &llamaDirect{capacity: capacity, unified: unified, slots: make([][]int64, slots), lastUsed: make([]int64, slots)}
	for i := range d.lastUsed {
		d.lastUsed[i] = -1
	}
	return d
}

func directLCP(a, b []int64) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func (d *llamaDirect) used() int {
	n := 0
	for _, e := range d.cache {
		n += len(e)
	}
	return n
}

func (d *llamaDirect) serve(tick int64, prompt, output []int64) {
	var ret = -1
	var fBest float32
	for i, sl := range d.slots {
		if len(sl) == 0 {
			continue
		}
		f := float32(directLCP(sl, prompt)) / float32(len(prompt))
		if f > fBest && f > 0.1 {
			fBest, ret = f, i
		}
	}
	update := false
	if ret != -1 {
		update = fBest*float32(len(prompt))/float32(len(d.slots[ret])) < 0.5
	} else {
		tLast := int64(-1)
		for i := range d.slots {
			if ret == -1 || d.lastUsed[i] <= tLast {
				tLast, ret = d.lastUsed[i], i
			}
		}
		update = true
	}
	before := directLCP(d.slots[ret], prompt)
	if update && d.capacity > 0 {
		d.save(d.slots[ret])
		d.slots[ret] = d.load(d.slots[ret], prompt)
	}
	if d.capacity > 0 {
		for i := range d.slots {
			if i != ret {
				d.save(d.slots[i])
				if d.unified {
					d.slots[i] = nil
				}
			}
		}
	}
	cached := directLCP(d.slots[ret], prompt)
	if cached == len(prompt) {
		cached--
	}
	live := min(cached, before)
	d.live += int64(live)
	d.host += int64(cached - live)
	d.slots[ret] = append(append([]int64(nil), prompt...), output...)
	d.lastUsed[ret] = tick
}

func (d *llamaDirect) save(s []int64) {
	if len(s) == 0 || len(s) > d.capacity {
		return
	}
	for _, e := range d.cache {
		if directLCP(e, s) == len(s) {
			return
		}
	}
	var kept [][]int64
	for _, e := range d.cache {
		if directLCP(e, s) != len(e) {
			kept = append(kept, e)
		}
	}
	d.cache = kept
	for len(d.cache) > 0 && d.used()+len(s) > d.capacity {
		d.cache = d.cache[1:]
	}
	d.cache = append(d.cache, s)
	d.stored += int64(len(s))
}

func (d *llamaDirect) load(slot, prompt []int64) []int64 {
	keepBest, simBest := float32(-1), float32(0)
	if len(slot) > 0 {
		n := directLCP(slot, prompt)
		keepBest, simBest = float32(n)/float32(len(slot)), float32(n)/float32(len(prompt))
	}
	best := -1
	for i, e := range d.cache {
		n := directLCP(e, prompt)
		keep, sim := float32(n)/float32(len(e)), float32(n)/float32(len(prompt))
		if keep < 0.25 {
			continue
		}
		if keepBest < keep && simBest < sim {
			keepBest, simBest, best = keep, sim, i
		}
	}
	if best < 0 {
		return slot
	}
	slot = d.cache[best]
	d.cache = append(d.cache[:best:best], d.cache[best+1:]...)
	return slot
}

// directTokens is the token ids a replay sends for req (each hash id its own block of
// distinct ids, an unnamed block its request's own) and the output the slot keeps (all but
// the last generated token), ids no prompt has.
func directTokens(req *Request, bt int, ordinal int64) (prompt, output []int64) {
	for i := range req.InputLength {
		b, j := i/bt, int64(i%bt)
		if b < len(req.HashIDs) {
			prompt = append(prompt, int64(req.HashIDs[b])*int64(bt)+j)
		} else {
			prompt = append(prompt, -(ordinal<<32|int64(b)<<8|j)-1) // unnamed: negative, unique
		}
	}
	for k := range max(req.OutputLength, 1) - 1 {
		output = append(output, 1<<62+ordinal<<20+int64(k))
	}
	return prompt, output
}

func directShares(t *testing.T, text string, bt, capacity int, p Policy) *llamaDirect {
	t.Helper()
	src := NewReader(strings.NewReader(text), "t.jsonl", bt)
	d := newLlamaDirect(capacity, max(p.Slots, 1), p.KVUnified)
	var req Request
	for n := int64(1); src.Next(&req) == nil; n++ {
		prompt, output := directTokens(&req, bt, n)
		d.serve(n, prompt, output)
	}
	return d
}

// TestLlamaCppOnePassMatchesDirect: the block-level model (one slot and cache per size in
// one pass) serves, at every size, what the token-level simulation serves.
func TestLlamaCppOnePassMatchesDirect(t *testing.T) {
	hosts := []int64{0, 50, 300, 1000, 3000, 1 << 20}
	repeats := jsonl([]int{30, 1, 2, 3, 4}, []int{30, 1, 2, 3, 4}, []int{35, 1, 2, 3, 4, 5}, []int{9, 7, 8}, []int{30, 1, 2, 3, 4},
		[]int{12, 1, 2}, []int{40, 1, 2, 3, 4, 5}, []int{9, 7, 8}, []int{3, 1}, []int{30, 1, 2, 3, 4})
	traces := map[string]string{"repeats": repeats}
	for seed := range uint64(3) {
		cfg := DefaultGeneratorConfig()
		cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = seed, 300, 1.0/64, 8
		cfg.Turns = 1 + float64(seed)
		traces["generated seed "+string(rune('0'+seed))] = generateText(t, cfg)
	}
	for name, text := range traces {
		const bt = 8
		hosts := hosts
		if name == "repeats" {
			hosts = append(hosts[:len(hosts):len(hosts)], 40, 70, 100)
		}
		for _, ps := range []string{"llamacpp", "llamacpp:slots=4,kv_unified=1", "llamacpp:slots=3"} {
			p := policy(t, ps)
			r := sizeText(t, text, SizeConfig{BlockTokens: bt, GPUTokens: 16384, HostTokens: hosts, Policy: p})
			var anyHost bool
			for i, h := range hosts {
				got := r.Sizes[i]
				d := directShares(t, text, bt, int(h), p)
				anyHost = anyHost || d.host > 0
				if got.GPUHitTokens != d.live || got.HostHitTokens != d.host || got.StoredTokens != d.stored {
					t.Errorf("%s %s host %d: one pass live %d host %d stored %d, direct %d %d %d", name, ps, h, got.GPUHitTokens, got.HostHitTokens, got.StoredTokens, d.live, d.host, d.stored)
				}
				if got.GPUHitTokens+got.HostHitTokens+got.RecomputeTokens != r.PromptTokens {
					t.Errorf("%s %s host %d: shares do not add up", name, ps, h)
				}
			}
			if !anyHost {
				t.Errorf("%s %s: no size restored anything: the trace does not exercise the cache", name, ps)
			}
		}
	}
}

// Blocks of 4 tokens; every request asks for 8 output tokens, so its slot keeps its prompt
// and 7 of them.
func TestLlamaCppByHand(t *testing.T) {
	a, b := []int{20, 1, 2, 3, 4, 5}, []int{8, 6, 7}
	c := []int{44, 1, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18} // shares 4 of its 44 tokens with A
	cases := []struct {
		name, policy                       string
		trace                              string
		host                               int64
		gpuHit, hostHit, recompute, stored int64
	}{
		{
			// B takes the slot: A (27 tokens) is saved; A again restores it (its last token
			// computed). B is saved then too.
			name: "a prompt that left the slot is restored", trace: jsonl(a, b, a), host: 100,
			gpuHit: 0, hostHit: 19, recompute: 29, stored: 42,
		},
		{
			// A's 27 tokens do not fit: never saved. B's 15 are.
			name: "a state larger than the cache is not saved", trace: jsonl(a, b, a), host: 20,
			gpuHit: 0, hostHit: 0, recompute: 48, stored: 15,
		},
		{
			// Saving B evicts A, the oldest entry.
			name: "the oldest entry makes room", trace: jsonl(a, b, a), host: 30,
			gpuHit: 0, hostHit: 0, recompute: 48, stored: 42,
		},
		{
			// A2 extends A: the slot is picked by similarity and A2 keeps 20 of its 27 tokens
			// (more than half), so A is not saved. B then saves A2, and A restores A2's state.
			name: "a slot the request keeps half of is not saved", trace: jsonl(a, []int{24, 1, 2, 3, 4, 5, 9}, b, a), host: 100,
			gpuHit: 20, hostHit: 19, recompute: 33, stored: 46,
		},
		{
			// C shares 8 tokens with A's 47-token entry: under a quarter of it, so it stays.
			name: "an entry the request keeps under a quarter of is not restored", trace: jsonl([]int{40, 1, 2, 3, 4, 5, 6, 7, 8, 9, 10}, b, []int{8, 1, 2}), host: 100,
			gpuHit: 0, hostHit: 0, recompute: 56, stored: 62,
		},
		{
			// C shares under 10% with the slot: the slot is saved, but C still reuses A's
			// first 4 tokens in it.
			name: "one slot keeps a short shared prefix", trace: jsonl(a, c), host: 100,
			gpuHit: 4, hostHit: 0, recompute: 60, stored: 27,
		},
		{
			// -np auto: C goes to an empty slot (A's is not taken under 10%), and A is
			// saved only after, as an idle slot, then cleared.
			name: "a unified KV cache sends it to an empty slot", policy: "llamacpp:slots=4,kv_unified=1", trace: jsonl(a, c), host: 100,
			gpuHit: 0, hostHit: 0, recompute: 64, stored: 27,
		},
		{
			// Two slots, no unified KV: A goes to slot 1 (the last of the never used), B to
			// slot 0 and A is saved as idle but stays; A again takes slot 1 by similarity
			// and reuses it live.
			name: "separate slots keep their state", policy: "llamacpp:slots=2", trace: jsonl(a, b, a), host: 100,
			gpuHit: 19, hostHit: 0, recompute: 29, stored: 42,
		},
		{
			// --cache-ram 0: no prompt cache.
			name: "no cache", trace: jsonl(a, b, a), host: 0,
			gpuHit: 0, hostHit: 0, recompute: 48, stored: 0,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			p := c.policy
			if p == "" {
				p = "llamacpp"
			}
			s := sizeText(t, c.trace, SizeConfig{BlockTokens: 4, GPUTokens: 16384, HostTokens: []int64{c.host}, Policy: policy(t, p)}).Sizes[0]
			if s.GPUHitTokens != c.gpuHit || s.HostHitTokens != c.hostHit || s.RecomputeTokens != c.recompute || s.StoredTokens != c.stored {
				t.Errorf("gpu %d host %d recompute %d stored %d; want %d %d %d %d", s.GPUHitTokens, s.HostHitTokens, s.RecomputeTokens, s.StoredTokens,
					c.gpuHit, c.hostHit, c.recompute, c.stored)
			}
		})
	}
}

// TestLlamaCppCaveat: the planner's sentence exists for llama.cpp only, and trace size's
// table prints it.
func TestLlamaCppCaveat(t *testing.T) {
	if PolicyCaveat(PolicyVLLM) != "" || !strings.Contains(PolicyCaveat(PolicyLlamaCpp), "one request at a time") || PolicyCaveat("llamacpp:slots=4,kv_unified=1") != PolicyCaveat(PolicyLlamaCpp) {
		t.Fatalf("caveats: vllm %q, llamacpp %q", PolicyCaveat(PolicyVLLM), PolicyCaveat(PolicyLlamaCpp))
	}
	r := sizeText(t, jsonl([]int{20, 1, 2, 3, 4, 5}), SizeConfig{BlockTokens: 4, GPUTokens: 64, HostTokens: []int64{100}, Policy: policy(t, "llamacpp")})
	var b strings.Builder
	if err := r.WriteText(&b); err != nil || !strings.Contains(b.String(), "note: "+PolicyCaveat(PolicyLlamaCpp)) {
		t.Errorf("%v:\n%s", err, b.String())
	}
}

// TestLlamaCppRefusesCurve: the curve prices GPU hits once for all sizes, which the live
// slot's share under llamacpp is not.
func TestLlamaCppRefusesCurve(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	curve, err := NewPrefillCurve("run", record.ReloadCurve{ID: "c", Points: []record.CurvePoint{
		{Tokens: 16, ReplayTTFTMS: f(1), TwinTTFTMS: f(2), Counted: true}, {Tokens: 64, ReplayTTFTMS: f(1), TwinTTFTMS: f(5), Counted: true}}})
	if err != nil {
		t.Fatal(err)
	}
	text := jsonl([]int{20, 1, 2, 3, 4, 5})
	_, err = Size(NewReader(strings.NewReader(text), "t.jsonl", 4), SizeConfig{BlockTokens: 4, GPUTokens: 64, HostTokens: []int64{100}, Policy: policy(t, "llamacpp"), Curve: curve})
	if err == nil || !strings.Contains(err.Error(), "--curve") {
		t.Errorf("llamacpp with a curve: %v", err)
	}
}

// TestSlotHistory: a request's cached tokens are the live slot's up to the prompt it shares
// with the previous request, the host cache's beyond; on a unified cache with several slots
// a request sharing 10% or less of its prompt gets an empty slot.
func TestSlotHistory(t *testing.T) {
	req := func(ids ...uint64) *Request { return &Request{InputLength: 4 * len(ids), HashIDs: ids} }
	h := SlotHistory{BlockTokens: 4}
	for i, c := range []struct {
		r                  *Request
		cached, live, host int
	}{
		{req(1, 2, 3, 4, 5), 0, 0, 0},
		{req(6, 7), 0, 0, 0},
		{req(1, 2, 3, 4, 5, 9), 19, 0, 19},         // A's state restored from the host cache
		{req(1, 2, 3, 4, 5, 9, 10), 24, 24, 0},     // the slot still held it
		{req(1, 2, 3, 4, 5, 9, 10, 11), 30, 28, 2}, // beyond the shared prefix: restored
	} {
		if live, host := h.Split(c.r, c.cached); live != c.live || host != c.host {
			t.Errorf("request %d: live %d host %d, want %d and %d", i, live, host, c.live, c.host)
		}
	}
	long := req(1, 20, 21, 22, 23, 24, 25, 26, 27, 28, 29) // shares 4 of its 44 tokens
	for _, unified := range []bool{false, true} {
		u := SlotHistory{BlockTokens: 4, Unified: unified}
		u.Split(req(1, 2, 3), 0)
		live, host := u.Split(long, 4)
		if want := map[bool]int{false: 4, true: 0}[unified]; live != want || host != 4-want {
			t.Errorf("unified %v: live %d host %d, want live %d", unified, live, host, want)
		}
	}
}

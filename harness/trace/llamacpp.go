package trace

import (
	"errors"
	"fmt"
	"io"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
)

// llama.cpp's server prompt cache, read in the llama.cpp v0.4.0 release that node-llama-cpp
// 3.21.1 bundles (docs/traces.md, "llamacpp").
const (
	// llamaSlotSimilarity is --slot-prompt-similarity's default (common/common.h).
	llamaSlotSimilarity float32 = 0.1
	// llamaKeepToSkipSave: a slot picked by similarity is saved only when the request keeps
	// less than this fraction of it (get_available_slot).
	llamaKeepToSkipSave float32 = 0.5
	// llamaMinKeep: a cached prompt is restored only when the request keeps at least this
	// fraction of it (server_prompt_cache::load, "don't trash large prompts").
	llamaMinKeep float32 = 0.25
)

// llamaSeq is a token sequence a slot or a cache entry holds: its prompt blocks' chain keys
// (the partial last block included), then, in tokens, the output it generated.
type llamaSeq struct {
	keys []uint64
	// lastTokens is the last key's block length (block tokens when whole).
	lastTokens int
	tokens     int // the prompt and the output tokens in the KV (the last sampled one never is)
	output     int // of which output
}

// llamaRequest is one request's prompt as a llamaSeq, with the output it asks for.
type llamaRequest struct {
	llamaSeq
	prompt  int // input_length
	outKept int // max(output_length, 1) - 1: the output tokens its slot keeps
}

// newLlamaRequest chains req's blocks as blockKeys does, and its partial last block on
// the same chain: its tokens are the first ones of that block (prompts.BlockBuilder).
func newLlamaRequest(dst []uint64, req *Request, bt int, ordinal uint64) llamaRequest {
	keys := blockKeys(dst[:0], req, bt, ordinal)
	last := bt
	if r := req.InputLength % bt; r > 0 {
		h := uint64(0x6b7674726163)
		if n := len(keys); n > 0 {
			h = keys[n-1]
		}
		if i := len(keys); i < len(req.HashIDs) {
			h = mix64(h ^ mix64(req.HashIDs[i]))
		} else {
			h = mix64(h ^ mix64(ordinal^0x70726976617465))
		}
		if h == 0 {
			h = 1 // as blockKeys: the key of this block when whole
		}
		keys, last = append(keys, h), r
	}
	return llamaRequest{llamaSeq: llamaSeq{keys: keys, lastTokens: last, tokens: req.InputLength}, prompt: req.InputLength, outKept: max(req.OutputLength, 1) - 1}
}

// held is what the slot holds after the request: its prompt and its output (a copy).
func (q *llamaRequest) held() *llamaSeq {
	return &llamaSeq{keys: append([]uint64(nil), q.keys...), lastTokens: q.lastTokens, tokens: q.prompt + q.outKept, output: q.outKept}
}

// commonPrefix is the tokens a and b share from their start (server_tokens::get_common_prefix):
// equal blocks, then, where one ends inside a block, what the shorter holds of it. Output
// tokens are taken to match nothing: a trace's next prompt names blocks, not the answer.
func commonPrefix(a, b *llamaSeq, bt int) int {
	if a == b {
		return a.tokens // one state, its output included
	}
	n := 0
	for i := 0; i < len(a.keys) && i < len(b.keys); i++ {
		if a.keys[i] != b.keys[i] {
			return n
		}
		la, lb := bt, bt
		if i == len(a.keys)-1 {
			la = a.lastTokens
		}
		if i == len(b.keys)-1 {
			lb = b.lastTokens
		}
		n += min(la, lb)
		if la != bt || lb != bt {
			return n
		}
	}
	return n
}

// llamaHost is one --cache-ram size's server: its slots and the host prompt cache
// (server_prompt_cache), whose entries are whole slot states in the order saved.
type llamaHost struct {
	capacity int64 // tokens; 0: no prompt cache (--cache-ram 0)
	bt       int
	slots    []llamaSlot
	unified  bool  // --kv-unified: a saved idle slot is cleared
	tick     int64 // requests so far: the slots' clock
	// queue is the entries in the order saved (evicted from the front); byFirst, the same
	// entries by their first block: an entry shares nothing with a prompt that starts
	// elsewhere, so only those are compared.
	queue    []*llamaEntry
	byFirst  map[uint64][]*llamaEntry
	gone     map[uint64]int // entries of a byFirst bucket that are gone
	used     int64
	stored   int64
	gpuHits  int64 // cached tokens within the common prefix with what their slot held
	hostHits int64 // cached tokens beyond it: restored from the cache
	// members are the sizes this server stands for, smallest (capacity) first: larger
	// sizes behave alike until a save presses the smallest (sizeLlamaCpp).
	members []int64
}

// llamaSlot is one server slot: what it holds (nil: empty) and when it was last used (-1:
// never, as t_last_used).
type llamaSlot struct {
	seq  *llamaSeq
	last int64
}

// llamaEntry is a saved slot state; gone once evicted or restored.
type llamaEntry struct {
	keys []uint64 // seq.keys, one pointer closer for the scans
	seq  *llamaSeq
	gone bool
}

func newLlamaHost(p Policy, capacity int64, bt int) *llamaHost {
	h := &llamaHost{capacity: capacity, bt: bt, unified: p.KVUnified, byFirst: map[uint64][]*llamaEntry{}, gone: map[uint64]int{}}
	h.slots = make([]llamaSlot, max(p.Slots, 1))
	for i := range h.slots {
		h.slots[i].last = -1
	}
	return h
}

// serve runs one request: slot selection (get_available_slot: the idle slot sharing the
// largest fraction of the prompt, over 10%, else the least recently used), with a cache
// update when it applies (save the slot, restore a better entry), the idle slots saved
// (--cache-idle-slots, on by default with a cache) and, with a unified KV cache, cleared;
// then the prompt's reuse of what its slot holds (n_past), and the slot left holding the
// prompt and its output. The hit within the common prefix with what the slot held is the
// live slot's; the rest was restored from the cache.
func (h *llamaHost) serve(q *llamaRequest) {
	h.tick++
	pick, update, simBest := -1, true, float32(0)
	for i, sl := range h.slots {
		if sl.seq == nil {
			continue
		}
		sim := float32(commonPrefix(sl.seq, &q.llamaSeq, h.bt)) / float32(q.prompt)
		if sim > simBest && sim > llamaSlotSimilarity {
			simBest, pick = sim, i
		}
	}
	if pick >= 0 {
		update = simBest*float32(q.prompt)/float32(h.slots[pick].seq.tokens) < llamaKeepToSkipSave
	} else {
		t := int64(-1)
		for i, sl := range h.slots {
			if pick < 0 || sl.last <= t {
				t, pick = sl.last, i
			}
		}
	}
	slot := &h.slots[pick]
	before := 0
	if slot.seq != nil {
		before = commonPrefix(slot.seq, &q.llamaSeq, h.bt)
	}
	if update && h.capacity > 0 {
		h.save(slot.seq)
		slot.seq = h.load(q, slot.seq)
	}
	if h.capacity > 0 {
		for i := range h.slots {
			if i != pick && h.slots[i].seq != nil {
				h.save(h.slots[i].seq)
				if h.unified {
					h.slots[i].seq = nil
				}
			}
		}
	}
	cached := 0
	if slot.seq != nil {
		cached = commonPrefix(slot.seq, &q.llamaSeq, h.bt)
	}
	if cached == q.prompt && cached > 0 {
		cached-- // the last prompt token is computed
	}
	live := min(cached, before)
	h.gpuHits += int64(live)
	h.hostHits += int64(cached - live)
	slot.seq, slot.last = q.held(), h.tick
}

// pressure bounds what this request's saves can need: the cache's tokens and every slot's.
func (h *llamaHost) pressure() int64 {
	n := h.used
	for _, sl := range h.slots {
		if sl.seq != nil {
			n += int64(sl.seq.tokens)
		}
	}
	return n
}

// bucket is the entries starting with block key k, in the order saved, gone ones included
// (they are pruned once they are half of it).
func (h *llamaHost) bucket(k uint64) []*llamaEntry {
	b := h.byFirst[k]
	if g := h.gone[k]; 2*g <= len(b) {
		return b
	}
	kept := b[:0]
	for _, e := range b {
		if !e.gone {
			kept = append(kept, e)
		}
	}
	clear(b[len(kept):])
	delete(h.gone, k)
	if len(kept) == 0 {
		delete(h.byFirst, k)
		return nil
	}
	h.byFirst[k] = kept
	return kept
}

func (h *llamaHost) drop(e *llamaEntry) {
	e.gone = true
	h.used -= int64(e.seq.tokens)
	h.gone[e.seq.keys[0]]++
}

// save is prompt_save and server_prompt_cache::alloc: the slot state s is added at the end
// unless an entry already holds it all or it exceeds the cache; entries it holds all are
// dropped, then the oldest until it fits.
func (h *llamaHost) save(s *llamaSeq) {
	if s == nil || s.tokens == 0 || int64(s.tokens) > h.capacity {
		return
	}
	// Outputs match nothing, so only a state without output can be held whole by another
	// (an idle slot saved again is its own entry).
	b := h.bucket(s.keys[0])
	for _, e := range b {
		if !e.gone && (e.seq == s || s.output == 0 && e.seq.tokens >= s.tokens && commonPrefix(e.seq, s, h.bt) == s.tokens) {
			return
		}
	}
	for _, e := range b {
		if !e.gone && e.seq.output == 0 && e.seq.tokens <= s.tokens && commonPrefix(e.seq, s, h.bt) == e.seq.tokens {
			h.drop(e)
		}
	}
	head := 0
	for ; head < len(h.queue) && h.used+int64(s.tokens) > h.capacity; head++ {
		if e := h.queue[head]; !e.gone {
			h.drop(e)
		}
	}
	for head < len(h.queue) && h.queue[head].gone {
		head++
	}
	if head > 0 {
		h.queue = append(h.queue[:0], h.queue[head:]...)
	}
	e := &llamaEntry{keys: s.keys, seq: s}
	h.queue = append(h.queue, e)
	h.byFirst[s.keys[0]] = append(h.byFirst[s.keys[0]], e)
	h.used += int64(s.tokens)
	h.stored += int64(s.tokens)
}

// load is server_prompt_cache::load: the entry that beats the slot (and every entry before
// it) both in the fraction of it the request keeps and in the fraction of the request it
// covers, keeping at least a quarter of it, replaces the slot's state cur and leaves the
// cache. It returns what the slot holds then.
func (h *llamaHost) load(q *llamaRequest, cur *llamaSeq) *llamaSeq {
	keepBest, simBest := float32(-1), float32(0)
	base := 0
	if cur != nil {
		base = commonPrefix(cur, &q.llamaSeq, h.bt)
		keepBest, simBest = float32(base)/float32(cur.tokens), float32(base)/float32(q.prompt)
	}
	// Only an entry sharing more than the slot's prefix can beat it (sim rises with the
	// prefix): it holds the request's block d.
	d := base / h.bt
	if d >= len(q.keys) {
		return cur
	}
	var best *llamaEntry
	for _, e := range h.bucket(q.keys[0]) {
		if e.gone || len(e.keys) <= d || e.keys[d] != q.keys[d] {
			continue
		}
		lcp := commonPrefix(e.seq, &q.llamaSeq, h.bt)
		keep, sim := float32(lcp)/float32(e.seq.tokens), float32(lcp)/float32(q.prompt)
		if keep < llamaMinKeep {
			continue
		}
		if keepBest < keep && simBest < sim {
			keepBest, simBest, best = keep, sim, e
		}
	}
	if best == nil {
		return cur
	}
	h.drop(best)
	return best.seq
}

// fork takes out of h's group the sizes a save of need tokens may press (evict or skip):
// each becomes a server of its own, a copy of h's state so far.
func (h *llamaHost) fork(need int64) []*llamaHost {
	var out []*llamaHost
	for len(h.members) > 1 && h.members[0] < need {
		c := &llamaHost{capacity: h.members[0], bt: h.bt, unified: h.unified, tick: h.tick, byFirst: map[uint64][]*llamaEntry{}, gone: map[uint64]int{}}
		c.slots = slices.Clone(h.slots)
		c.used, c.stored, c.gpuHits, c.hostHits = h.used, h.stored, h.gpuHits, h.hostHits
		for _, e := range h.queue {
			if !e.gone {
				n := &llamaEntry{keys: e.keys, seq: e.seq}
				c.queue = append(c.queue, n)
				c.byFirst[e.keys[0]] = append(c.byFirst[e.keys[0]], n)
			}
		}
		out = append(out, c)
		h.members = h.members[1:]
		h.capacity = h.members[0]
	}
	return out
}

// sizeLlamaCpp is Size for PolicyLlamaCpp, capacities in tokens. The slot's content depends
// on what was restored, so every size is a server of its own, except that sizes no save has
// yet pressed (none evicted or skipped a state) are one server until a save would.
func sizeLlamaCpp(src Source, cfg SizeConfig, r *SizeReport) (*SizeReport, error) {
	bt := r.BlockTokens
	var caps []int64
	for _, h := range cfg.HostTokens {
		caps = append(caps, h, 2*h)
	}
	caps = slices.Compact(slices.Sorted(slices.Values(caps)))
	var order []*llamaHost
	if caps[0] == 0 {
		order = append(order, newLlamaHost(cfg.Policy, 0, bt))
		caps = caps[1:]
	}
	if len(caps) > 0 {
		h := newLlamaHost(cfg.Policy, caps[0], bt)
		h.members = caps
		order = append(order, h)
	}
	var req Request
	var keys []uint64
	for {
		err := src.Next(&req)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			return nil, err
		}
		if req.InputLength <= 0 {
			return nil, fmt.Errorf("request %d: input_length %d: llama.cpp refuses an empty prompt", r.Requests+1, req.InputLength)
		}
		r.Requests++
		r.PromptTokens += int64(req.InputLength)
		q := newLlamaRequest(keys, &req, bt, uint64(r.Requests))
		keys = q.keys
		for i := 0; i < len(order); i++ { // forks join the order and serve this request too
			h := order[i]
			if need := h.pressure(); len(h.members) > 1 && need > h.capacity {
				order = append(order, h.fork(need)...)
			}
			h.serve(&q)
		}
	}
	hosts := map[int64]*llamaHost{}
	for _, h := range order {
		hosts[h.capacity] = h
		for _, c := range h.members {
			hosts[c] = h
		}
	}
	if r.Requests == 0 {
		return nil, ErrEmpty
	}
	shares := func(h *llamaHost) record.IdealShares {
		s := record.IdealShares{GPUHitTokens: h.gpuHits, HostHitTokens: h.hostHits, StoredTokens: h.stored}
		s.RecomputeTokens = r.PromptTokens - s.GPUHitTokens - s.HostHitTokens
		p := float64(r.PromptTokens)
		s.GPUShare, s.HostShare, s.RecomputeShare = float64(s.GPUHitTokens)/p, float64(s.HostHitTokens)/p, float64(s.RecomputeTokens)/p
		return s
	}
	for _, h := range cfg.HostTokens {
		r.Sizes = append(r.Sizes, TierSize{HostTokens: h, HostBytes: r.bytes(h), HostBlocks: h / int64(bt), IdealShares: shares(hosts[h])})
	}
	r.Knee = r.knee(func(t TierSize) float64 { return shares(hosts[2*t.HostTokens]).HostShare })
	return r, nil
}

// SharedPrefixTokens is the tokens the prompts of a and b (requests of one trace, blocks of
// blockTokens) share from their start when sent block-exact (docs/traces.md, section 3):
// what a single-slot server holding a's prompt can reuse for b's.
func SharedPrefixTokens(a, b *Request, blockTokens int) int {
	qa := newLlamaRequest(nil, a, blockTokens, 1)
	qb := newLlamaRequest(nil, b, blockTokens, 2) // unnamed blocks are each request's own
	return commonPrefix(&qa.llamaSeq, &qb.llamaSeq, blockTokens)
}

// PolicyCaveat is what the policy named (NAME[:PARAMS], or an engine family's name, such
// as llamacpp) leaves out that a prediction for that engine should say; "" when nothing
// beyond docs/traces.md.
func PolicyCaveat(name string) string {
	if n, _, _ := strings.Cut(name, ":"); n != PolicyLlamaCpp {
		return ""
	}
	return "llama.cpp's prompt cache is modelled for one request at a time (checked against llama-server, token for token, in kvbench's CI on -np 1 and -np auto; " +
		"-np N without --kv-unified is modelled but not checked), with the default --slot-prompt-similarity 0.1 and --cache-idle-slots, token-exact prompts and outputs " +
		"no later prompt repeats; its size in tokens is --cache-ram over the prompt state's bytes per token (the KV plus 12 bytes of cell metadata), and --cache-ram -1 " +
		"holds -c tokens; concurrent requests are not modelled"
}

// SlotHistory splits the cached prompt tokens of requests served one at a time by
// llama-server into the live slot's and the host prompt cache's, from usage and the slot's
// history (no counter splits them): of the prompt a request shares with the previous one,
// what it reused its slot still held; the rest was restored from the --cache-ram cache. On
// a unified KV cache (-np auto) with several slots the other slots are cleared, and a
// request sharing 10% or less of its prompt with the previous one (the default
// --slot-prompt-similarity) is given an empty slot: all it reuses was restored.
type SlotHistory struct {
	BlockTokens int
	Unified     bool
	prev        *Request
}

// Split splits cur's cached tokens into live and host and makes cur the slot's last prompt.
func (h *SlotHistory) Split(cur *Request, cached int) (live, host int) {
	common := 0
	if h.prev != nil {
		common = SharedPrefixTokens(h.prev, cur, h.BlockTokens)
	}
	if h.Unified && float32(common)/float32(cur.InputLength) <= 0.1 {
		common = 0
	}
	p := *cur
	p.HashIDs = slices.Clone(cur.HashIDs)
	h.prev = &p
	live = min(cached, common)
	return live, cached - live
}

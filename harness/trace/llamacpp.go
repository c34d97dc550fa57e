package trace

import (
	"errors"
	"fmt"
	"io"

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
	return &llamaSeq{keys: append([]uint64(nil), q.keys...), lastTokens: q.lastTokens, tokens: q.prompt + q.outKept}
}

// commonPrefix is the tokens a and b share from their start (server_tokens::get_common_prefix):
// equal blocks, then, where one ends inside a block, what the shorter holds of it. Output
// tokens are taken to match nothing: a trace's next prompt names blocks, not the answer.
func commonPrefix(a, b *llamaSeq, bt int) int {
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

// llamaHost is one --cache-ram size's server: the single slot (-np 1) and the host prompt
// cache (server_prompt_cache), whose entries are whole slot states in the order saved.
type llamaHost struct {
	capacity int64 // tokens; 0: no prompt cache (--cache-ram 0)
	bt       int
	slot     *llamaSeq // nil: empty
	entries  []*llamaSeq
	used     int64
	stored   int64
	gpuHits  int64 // cached tokens within the common prefix with the slot's previous prompt
	hostHits int64 // cached tokens beyond it: restored from the cache
}

// serve runs one request: slot selection (get_available_slot), with a cache update when it
// applies (save the slot, restore a better entry), then the prompt's reuse of what the slot
// holds (n_past), and the slot left holding the prompt and its output.
func (h *llamaHost) serve(q *llamaRequest) {
	before := 0
	update := true
	if h.slot != nil {
		before = commonPrefix(h.slot, &q.llamaSeq, h.bt)
		sim := float32(before) / float32(q.prompt)
		if sim > llamaSlotSimilarity {
			keep := sim * float32(q.prompt) / float32(h.slot.tokens)
			update = keep < llamaKeepToSkipSave
		}
	}
	if update && h.capacity > 0 {
		h.save()
		h.load(q)
	}
	cached := 0
	if h.slot != nil {
		cached = commonPrefix(h.slot, &q.llamaSeq, h.bt)
	}
	if cached == q.prompt && cached > 0 {
		cached-- // the last prompt token is computed
	}
	live := min(cached, before)
	h.gpuHits += int64(live)
	h.hostHits += int64(cached - live)
	h.slot = q.held()
}

// save is prompt_save and server_prompt_cache::alloc: the slot's state is added at the end
// unless an entry already holds it all or it exceeds the cache; entries it holds all are
// dropped, then the oldest until it fits.
func (h *llamaHost) save() {
	s := h.slot
	if s == nil || s.tokens == 0 || int64(s.tokens) > h.capacity {
		return
	}
	for _, e := range h.entries {
		if commonPrefix(e, s, h.bt) == s.tokens {
			return
		}
	}
	kept := h.entries[:0]
	for _, e := range h.entries {
		if commonPrefix(e, s, h.bt) == e.tokens {
			h.used -= int64(e.tokens)
			continue
		}
		kept = append(kept, e)
	}
	h.entries = kept
	drop := 0
	for drop < len(h.entries) && h.used+int64(s.tokens) > h.capacity {
		h.used -= int64(h.entries[drop].tokens)
		drop++
	}
	h.entries = append(h.entries[drop:], s)
	h.used += int64(s.tokens)
	h.stored += int64(s.tokens)
}

// load is server_prompt_cache::load: the entry that beats the slot (and every entry before
// it) both in the fraction of it the request keeps and in the fraction of the request it
// covers, keeping at least a quarter of it, replaces the slot and leaves the cache.
func (h *llamaHost) load(q *llamaRequest) {
	keepBest, simBest := float32(-1), float32(0)
	if h.slot != nil {
		lcp := commonPrefix(h.slot, &q.llamaSeq, h.bt)
		keepBest, simBest = float32(lcp)/float32(h.slot.tokens), float32(lcp)/float32(q.prompt)
	}
	best := -1
	for i, e := range h.entries {
		if e.keys[0] != q.keys[0] {
			continue // nothing in common: it cannot beat anything
		}
		lcp := commonPrefix(e, &q.llamaSeq, h.bt)
		keep, sim := float32(lcp)/float32(e.tokens), float32(lcp)/float32(q.prompt)
		if keep < llamaMinKeep {
			continue
		}
		if keepBest < keep && simBest < sim {
			keepBest, simBest, best = keep, sim, i
		}
	}
	if best < 0 {
		return
	}
	h.slot = h.entries[best]
	h.used -= int64(h.slot.tokens)
	h.entries = append(h.entries[:best], h.entries[best+1:]...)
}

// sizeLlamaCpp is Size for PolicyLlamaCpp: one server per host size (the slot's content
// depends on what was restored, so nothing is shared between sizes), capacities in tokens.
func sizeLlamaCpp(src Source, cfg SizeConfig, r *SizeReport) (*SizeReport, error) {
	bt := r.BlockTokens
	var caps []int64
	for _, h := range cfg.HostTokens {
		caps = append(caps, h, 2*h)
	}
	hosts := map[int64]*llamaHost{}
	var order []*llamaHost
	for _, c := range caps {
		if hosts[c] == nil {
			hosts[c] = &llamaHost{capacity: c, bt: bt}
			order = append(order, hosts[c])
		}
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
		for _, h := range order {
			h.serve(&q)
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

// PolicyCaveat is what the policy named (an engine family's, such as llamacpp) leaves out
// that a prediction for that engine should say; "" when nothing beyond docs/traces.md.
func PolicyCaveat(name string) string {
	if name != PolicyLlamaCpp {
		return ""
	}
	return "llama.cpp's prompt cache is modelled for one slot (-np 1) serving one request at a time, with the default --slot-prompt-similarity 0.1, " +
		"a token-exact prompt and outputs that match no later prompt; its size in tokens is --cache-ram over the prompt state's bytes per token " +
		"(the KV plus 12 bytes of cell metadata; the 64 bytes of each entry's header are left out), and --cache-ram -1 holds -c tokens; " +
		"with more slots or concurrent requests the prediction was not checked against the server"
}

package sim

import (
	"net/http"
	"time"
)

// What a reload costs and whether it gives the same answer: the engine's output at any
// temperature is a function of the KV its sequence attends to (its prompt's blocks as held
// in GPU memory), so a faithful reload reproduces the output the prompt's first computation
// gave, a cache salt changes where the blocks are kept but not what they hold, and the
// corrupt_reload fault makes every block loaded from the CPU tier hold something else.

// SubmitOptions are the per-request cache settings of a submitted prompt.
type SubmitOptions struct {
	// CacheSalt enters the first block's hash, and through the chain every block's, as
	// vLLM's cache_salt does: a salted prompt shares no block with the same tokens unsalted
	// or under another salt, in the GPU pool and in the CPU tier alike. The blocks' content
	// (and so the output) does not depend on it.
	CacheSalt string
}

// saltSeed is the hash chain's seed for salt ("" keeps the unsalted seed).
func saltSeed(salt string) uint64 {
	h := chainSeed
	if salt == "" {
		return h
	}
	for i := 0; i < len(salt); i++ {
		h = (h ^ uint64(salt[i])) * 0x100000001b3
	}
	return mix64(h ^ 0x73616c74) // "salt"
}

// noteLoaded records that the GPU block cached under h was just filled from the CPU tier:
// under corrupt_reload its content is not what was stored.
func (e *Engine) noteLoaded(h uint64) {
	if e.p.CorruptReload {
		e.corrupt[h] = true
	}
}

// noteComputed records that the GPU block cached under h was just computed, so it holds
// the prompt's true KV whatever an earlier load left under that hash.
func (e *Engine) noteComputed(h uint64) {
	delete(e.corrupt, h)
}

// outputDigest is what s's output is drawn from: the digest of its prompt when every block
// it attends to holds that prompt's true KV, another value when one of them was corrupted
// on its way back from the CPU tier.
func (e *Engine) outputDigest(s *Sequence) uint64 {
	for _, h := range s.hashes {
		if e.corrupt[h] {
			return mix64(s.Digest ^ h ^ 0x636f7272) // "corr"
		}
	}
	return s.Digest
}

// reloadLatency is the fixed cost of a prefill that loads blocks from the CPU tier beyond
// the copy itself (the lookup, the engine step the request waits for its load): scaled like
// every duration, and not counted in the load seconds, which time the copy alone.
func (e *Engine) reloadLatency(loads bool, jitter float64) time.Duration {
	if !loads || e.p.ReloadLatency <= 0 {
		return 0
	}
	return scaledDuration(e.p.ReloadLatency.Seconds(), jitter, e.p.Speed)
}

// OutputDigest is the value s's output tokens are drawn from (see outputDigest), fixed at
// its first admission.
func (s *Sequence) OutputDigest() uint64 { return s.output }

// outputTokenIDs are the token ids of outputWords, each one token after a space.
var outputTokenIDs = func() []int32 {
	ids := make([]int32, len(outputWords))
	for i, w := range outputWords {
		ids[i] = tokenID(w, true)
	}
	return ids
}()

// outputWord is the index in outputWords of output token i drawn from digest.
func outputWord(digest uint64, i int) int {
	return int(mix64(digest^uint64(i)*0x9e3779b97f4a7c15) % uint64(len(outputWords)))
}

// OutputTokenID is the id of output token i drawn from digest: what return_token_ids
// reports for the text outputToken gives.
func OutputTokenID(digest uint64, i int) int32 { return outputTokenIDs[outputWord(digest, i)] }

// tokenIDsAt is output token i's id as a chunk carries it, nil when the request did not ask.
func (g *generation) tokenIDsAt(i int) []int32 {
	if !g.tokenIDs {
		return nil
	}
	return []int32{OutputTokenID(g.seq.OutputDigest(), i)}
}

// cacheSalt reads a request's cache_salt: absent is no salt, and an empty one is refused as
// vLLM refuses it (min_length 1). It answers the request itself and returns false then.
func cacheSalt(w http.ResponseWriter, salt *string) (string, bool) {
	if salt == nil {
		return "", true
	}
	if *salt == "" {
		writeError(w, http.StatusBadRequest, "cache_salt: String should have at least 1 character", "cache_salt")
		return "", false
	}
	return *salt, true
}

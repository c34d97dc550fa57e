package engine

import (
	"crypto/rand"
	"encoding/hex"
)

// ColdTwin is how an engine is made to recompute a prompt it holds: a request field that
// forces a miss on the same prompt bytes, so a replay can be held against a recompute of
// exactly its tokens. docs/domain.md cites each engine's code.
type ColdTwin struct {
	// Mechanism names it in the record ("cache_salt", "cache_prompt=false").
	Mechanism string
	// Field is the request body field; Salted sends a fresh random salt each time (a salt
	// seen before would hit the blocks an earlier twin stored under it), else Value.
	Field  string
	Salted bool
	Value  any
	// None, when set, says why the engine has no way to force the miss: no twin is sent,
	// and the record says so.
	None string
	// Caveat is what the twin costs or may leave shared; the twin's own counters and usage
	// then show whether it really missed.
	Caveat string
}

// Available reports whether the engine can be sent a cold twin.
func (t ColdTwin) Available() bool { return t.None == "" && t.Field != "" }

// Body is the field a cold twin adds to its request body, with the value to send.
func (t ColdTwin) Body() (field string, value any) {
	if !t.Salted {
		return t.Field, t.Value
	}
	b := make([]byte, 12)
	_, _ = rand.Read(b) // crypto/rand never fails on the platforms Go supports
	return t.Field, "kvbench-twin-" + hex.EncodeToString(b)
}

// The cold-twin mechanisms of the engines (docs/domain.md, "Is the reload right, and does it pay?").
var (
	// cacheSalt is vLLM's cache_salt: it enters the first block's hash, and through the chain
	// every block's, on the GPU and in the native CPU tier alike.
	cacheSalt = ColdTwin{
		Mechanism: "cache_salt", Field: "cache_salt", Salted: true,
		Caveat: "the salt keeps the twin out of the GPU prefix cache and the native CPU tier (both keyed by the salted block hashes); the twin is written through to the tier under its own hashes, so it takes tier capacity and, LRU, can push out older prompts",
	}
	// noTwinLMCache: LMCache V1 leaves the salt out of its cache key.
	noTwinLMCache = ColdTwin{
		None: "LMCache V1 keys its tier by tokens alone: vLLM's cache_salt isolates the GPU prefix cache but not LMCache's (LMCache issue #2878), so a salted twin would be served from the tier; no other per-request miss exists",
	}
	// cacheSaltSGLang is SGLang's cache_salt, which namespaces the radix tree.
	cacheSaltSGLang = ColdTwin{
		Mechanism: "cache_salt", Field: "cache_salt", Salted: true,
		Caveat: "SGLang namespaces its radix tree by the salt, device and host tiers alike, since PR #23300 (2026-04-21; before it the salt never reached the scheduler); storage (L3) keys ignore it: the twin's own cached_tokens_details show whether it missed",
	}
	// cacheSaltTRTLLM is TensorRT-LLM's cache_salt, on chat requests only.
	cacheSaltTRTLLM = ColdTwin{
		Mechanism: "cache_salt", Field: "cache_salt", Salted: true,
		Caveat: "trtllm-serve salts the KV cache on /v1/chat/completions only (its completions request has no cache_salt and refuses unknown fields); kvbench's requests are chat",
	}
	// cacheSaltKVBM is vLLM's cache_salt under Dynamo KVBM.
	cacheSaltKVBM = ColdTwin{
		Mechanism: "cache_salt", Field: "cache_salt", Salted: true,
		Caveat: "the salt isolates vLLM's GPU prefix cache; whether KVBM's own block hashes take it is not established from its code, so the twin's own counters (vLLM's external hits, kvbm_matched_tokens) show whether it missed",
	}
	// cachePromptOff is llama.cpp's cache_prompt: false.
	cachePromptOff = ColdTwin{
		Mechanism: "cache_prompt=false", Field: "cache_prompt", Value: false,
		Caveat: "the slot recomputes the whole prompt, reusing neither the live slot nor the host-RAM cache, but slot selection may first restore a RAM entry (which removes it from the RAM cache); sent right after the replay to a single slot, which then holds the same prompt, nothing is restored",
	}
)

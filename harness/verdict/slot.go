package verdict

import "fmt"

// SlotEvidence is what a replay's verdict rests on for an engine with a live slot cache and
// a host-RAM prompt cache but no tier counters (llama.cpp's server). With one slot, kvbench
// knows the prompt the slot held before the replay: cached tokens within the common token
// prefix with that prompt were a live hit; cached tokens beyond it can only have come from
// the host-RAM tier.
type SlotEvidence struct {
	PromptTokens       *int `json:"prompt_tokens"`
	CachedPromptTokens *int `json:"cached_prompt_tokens"`
	// CommonPrefix is the token prefix the replay shares with the slot's previous prompt; nil
	// when it is unknown, and NoCommonPrefix says why.
	CommonPrefix   *int   `json:"common_prefix_with_previous_prompt"`
	NoCommonPrefix string `json:"no_common_prefix_reason,omitempty"`
	// Slots is the server's slot count; attribution needs exactly one.
	Slots int `json:"slots"`
	// Tolerance absorbs the engine's rounding (llama.cpp re-evaluates the last prompt token).
	Tolerance      int    `json:"tolerance_tokens"`
	RequestFailed  bool   `json:"request_failed"`
	RequestFailure string `json:"request_failure,omitempty"`
}

// SlotReplay is the verdict on a replay attributed by the slot's common prefix. GPUHit means
// the engine's device-side (live slot) cache; CPUReload means the host-RAM prompt cache.
type SlotReplay struct {
	Verdict     string       `json:"verdict"`
	Reason      string       `json:"reason"`
	LiveTokens  *int         `json:"live_slot_tokens,omitempty"`
	HostTokens  *int         `json:"host_cache_tokens,omitempty"`
	HitCoverage *float64     `json:"hit_coverage,omitempty"`
	Evidence    SlotEvidence `json:"evidence"`
}

// AsReplay carries the slot verdict in the general Replay shape records use.
func (r SlotReplay) AsReplay() Replay {
	slot := r
	return Replay{Verdict: r.Verdict, Reason: r.Reason, HitCoverage: r.HitCoverage, Slot: &slot,
		Evidence: Evidence{PromptTokens: r.Evidence.PromptTokens, CachedPromptTokens: r.Evidence.CachedPromptTokens,
			CountersValid: true, RequestFailed: r.Evidence.RequestFailed, RequestFailure: r.Evidence.RequestFailure}}
}

// DecideBySlot applies the attribution rules to e.
func DecideBySlot(e SlotEvidence) SlotReplay {
	r := SlotReplay{Evidence: e}
	switch {
	case e.RequestFailed:
		r.Verdict, r.Reason = Invalid, "the request failed: "+e.RequestFailure
		return r
	case e.PromptTokens == nil || *e.PromptTokens <= 0:
		r.Verdict, r.Reason = TierUnknown, "the server reported no prompt token count"
		return r
	case e.CachedPromptTokens == nil:
		r.Verdict, r.Reason = TierUnknown, "usage reports no cached prompt tokens"
		return r
	case e.Slots != 1:
		r.Verdict, r.Reason = TierUnknown, fmt.Sprintf("the server has %d slots, so the prompt the replay's slot held before is unknown", e.Slots)
		return r
	case e.CommonPrefix == nil:
		why := e.NoCommonPrefix
		if why == "" {
			why = "the prompts' token ids could not be read"
		}
		r.Verdict, r.Reason = TierUnknown, why+", so the live and host tiers cannot be told apart"
		return r
	}
	prompt, cached, common := *e.PromptTokens, *e.CachedPromptTokens, *e.CommonPrefix
	live := min(cached, common)
	host := cached - live
	cov := float64(cached) / float64(prompt)
	r.LiveTokens, r.HostTokens, r.HitCoverage = &live, &host, &cov
	full := cov >= FullCoverage
	switch {
	case host > e.Tolerance && full:
		r.Verdict = CPUReload
		r.Reason = fmt.Sprintf("%d cached tokens (%.1f%% of the prompt) lie beyond the %d-token common prefix with the slot's previous prompt: they came from the host-RAM prompt cache", host, 100*float64(host)/float64(prompt), common)
	case host > e.Tolerance:
		r.Verdict = Partial
		r.Reason = fmt.Sprintf("%d tokens came from the host-RAM cache, but all hits cover only %.1f%% of the prompt", host, 100*cov)
	case cached > common-e.Tolerance && full:
		r.Verdict = GPUHit
		r.Reason = fmt.Sprintf("%d cached tokens lie within the common prefix with the slot's previous prompt: a live slot hit", cached)
	default:
		r.Verdict = Recompute
		r.Reason = fmt.Sprintf("only the %d-token common prefix with the slot's previous prompt was reused (%d cached tokens); the rest was recomputed", common, cached)
	}
	return r
}

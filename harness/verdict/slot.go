package verdict

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// SlotEvidence is what slot attribution rests on, for an engine with a live slot cache and a
// host-RAM prompt cache but no tier counters (llama.cpp's server). With one slot, kvbench
// knows the prompt the slot held before the replay: cached tokens within the common token
// prefix with that prompt were a live hit; cached tokens beyond it can only have come from
// the host-RAM tier.
type SlotEvidence struct {
	// CommonPrefix is the token prefix the replay shares with the slot's previous prompt; nil
	// when it is unknown, and NoCommonPrefix says why.
	CommonPrefix   *int
	NoCommonPrefix string
	// Slots is the server's slot count; attribution needs exactly one.
	Slots int
	// Tolerance absorbs the engine's rounding (llama.cpp re-evaluates the last prompt token).
	Tolerance int
}

// SlotAttribution is how a slot-attributed replay's cached tokens split: the record's type.
type SlotAttribution = record.SlotAttribution

// decideBySlot applies the attribution rules to e, whose request did not fail.
func decideBySlot(e Evidence) Decision {
	s := SlotEvidence{}
	if e.Slot != nil {
		s = *e.Slot
	}
	d := Decision{record.Decision{DecidedBy: BySlot, Slot: &SlotAttribution{CommonPrefix: s.CommonPrefix, Slots: s.Slots, Tolerance: s.Tolerance}}}
	switch {
	case e.PromptTokens == nil || *e.PromptTokens <= 0:
		d.Verdict, d.Reason = TierUnknown, "the server reported no prompt token count"
	case e.CachedPromptTokens == nil:
		d.Verdict, d.Reason = TierUnknown, "usage reports no cached prompt tokens"
	case s.Slots != 1:
		d.Verdict, d.Reason = TierUnknown, fmt.Sprintf("the server has %d slots, so the prompt the replay's slot held before is unknown", s.Slots)
	case s.CommonPrefix == nil:
		why := s.NoCommonPrefix
		if why == "" {
			why = "the prompts' token ids could not be read"
		}
		d.Verdict, d.Reason = TierUnknown, why+", so the live and host tiers cannot be told apart"
	default:
		d.attribute(*e.PromptTokens, *e.CachedPromptTokens, *s.CommonPrefix, s.Tolerance)
		live, host := float64(*d.Slot.LiveTokens), float64(*d.Slot.HostTokens)
		d.conserve(e, tierParts{gpu: &live, ext: &host}, nil)
	}
	if got := e.Counters.Delta(metrics.PromptTokensCached); got != nil && e.CachedPromptTokens != nil {
		usage := float64(*e.CachedPromptTokens)
		step := e.Counters.Resolution[metrics.PromptTokensCached]
		sources := []string{fmt.Sprintf("the cached-token counter's %s", units.Whole(*got)), fmt.Sprintf("usage's %d cached tokens", *e.CachedPromptTokens)}
		if step > 1 {
			// Printed with too few digits, the counter moves in steps: usage decides.
			d.note("the server prints its counters with 6 significant digits: at their size they move in steps of %s tokens, so the cached-token counter (moved by %s) cannot count one request, and the request's usage (%d cached tokens) decides", units.Whole(step), units.Whole(*got), *e.CachedPromptTokens)
			d.check(CheckCachedCounter, step, abs(*got-usage) <= step, "usage's cached tokens", sources...)
		} else if *got != usage {
			d.note("the cached-tokens counter moved by %s but usage reports %d", units.Whole(*got), *e.CachedPromptTokens)
			d.check(CheckCachedCounter, 0, false, "usage's cached tokens", sources...)
		} else {
			d.check(CheckCachedCounter, 0, true, "", sources...)
		}
	}
	return d
}

func (d *Decision) attribute(prompt, cached, common, tolerance int) {
	live := min(cached, common)
	host := cached - live
	cov := float64(cached) / float64(prompt)
	d.Slot.LiveTokens, d.Slot.HostTokens, d.HitCoverage = &live, &host, &cov
	full := cov >= FullCoverage
	switch {
	case host > tolerance && full:
		d.Verdict = CPUReload
		d.Reason = fmt.Sprintf("%d cached tokens (%s of the prompt) lie beyond the %d-token common prefix with the slot's previous prompt: they came from the host-RAM prompt cache", host, units.Share(float64(host)/float64(prompt)), common)
	case host > tolerance:
		d.Verdict = Partial
		d.Reason = fmt.Sprintf("%d tokens came from the host-RAM cache, but all hits cover only %s of the prompt", host, units.Share(cov))
	case cached > common-tolerance && full:
		d.Verdict = GPUHit
		d.Reason = fmt.Sprintf("%d cached tokens lie within the common prefix with the slot's previous prompt: a live slot hit", cached)
	default:
		d.Verdict = Recompute
		d.Reason = fmt.Sprintf("only the %d-token common prefix with the slot's previous prompt was reused (%d cached tokens); the rest was recomputed", common, cached)
	}
}

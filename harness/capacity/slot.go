package capacity

import (
	"fmt"
	"math"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// HostTokensSinceTarget is the prompt state a SingleSlot engine's host tier holds by the time
// of the replay: each prompt from the target on is saved whole (shared prefix included) when
// the next one takes the slot.
func (q Sequence) HostTokensSinceTarget() int {
	if q.Target < 0 || q.Target >= len(q.Tokens) {
		return 0
	}
	n := 0
	for _, t := range q.Tokens[q.Target:] {
		n += t
	}
	return n
}

// assessSingleSlot answers the three questions for an engine whose slot holds one live
// sequence: does another prompt take the slot after the replayed one (eviction), is the host
// tier larger than one slot's context (the analogue of "larger than the GPU pool"), and does
// it hold every prompt saved since the replayed one until the replay.
func assessSingleSlot(s Setup, seq Sequence) Assessment {
	a := Assessment{record.Capacity{Setup: s, UniqueTokens: seq.UniqueSinceTarget(), TokenCounting: seq.Counting}}
	a.HostTokensNeeded = seq.HostTokensSinceTarget()
	a.CPUTierBytes = s.CPUOffloadGiB * GiB
	perTok := s.StoreBytesPerToken
	if perTok > 0 {
		a.CPUTierTokens = math.Floor(a.CPUTierBytes / perTok)
		if s.GPUKVTokens > 0 {
			a.GPUPoolBytes = float64(s.GPUKVTokens) * perTok
		}
	}
	tier := HostTierWords(s)
	after := len(seq.Tokens) - 1 - seq.Target
	switch {
	case seq.Target < 0:
		a.EvictionPressure = Unknown
		a.add("The replayed request is not among the requests sent before it, so its eviction cannot be predicted.")
	case s.Slots > 1:
		a.EvictionPressure = Unknown
		a.add("The server has %d slots: which slot the replay lands in, and what that slot held, is unknown.", s.Slots)
	case after > 0:
		a.EvictionPressure = Yes
		a.add("With one live slot, the %d prompt(s) sent after the replayed one took the slot: the replayed prompt left the live cache.", after)
	default:
		a.EvictionPressure = No
		a.add("The replayed prompt was the last one sent, so it is still in the live slot: its replay is expected to be a live-slot hit.")
	}

	switch {
	case s.CPUOffloadGiB <= 0:
		a.TierLargerThanGPU, a.TierHoldsSequence = No, No
		a.add("No host prompt cache is configured: a replay can only be a live-slot hit or a recompute.")
	case perTok <= 0:
		a.TierLargerThanGPU, a.TierHoldsSequence = Unknown, Unknown
		a.add("Bytes of prompt state per token are unknown (set server.store_bytes_per_token), so whether the %s holds the replayed prompt cannot be computed.", tier)
	default:
		a.TierLargerThanGPU = answer(s.GPUKVTokens > 0, a.CPUTierTokens > float64(s.GPUKVTokens))
		a.TierHoldsSequence = answer(true, float64(a.HostTokensNeeded) <= a.CPUTierTokens)
		if a.TierHoldsSequence == No && seq.Counting == "estimate" {
			a.TierHoldsSequence = Unknown
		}
		a.add("At %s bytes of prompt state per token (%s), the %s holds about %s tokens.", units.Grouped(int(perTok)), s.StoreBytesSource, tier, units.Grouped(int(a.CPUTierTokens)))
		if a.TierLargerThanGPU == No {
			a.add("That is less than one slot's %s-token context: a long prompt cannot be saved whole.", units.Grouped(s.GPUKVTokens))
		}
		switch a.TierHoldsSequence {
		case Yes:
			a.add("The %s tokens of prompt state saved from the replayed prompt on fit in it: the replayed prompt survives there until the replay.", units.Grouped(a.HostTokensNeeded))
		case No:
			a.add("The %s tokens of prompt state saved from the replayed prompt on exceed it: the replayed prompt is dropped from the host tier before the replay.", units.Grouped(a.HostTokensNeeded))
		default:
			a.add("The %s estimated tokens of prompt state saved from the replayed prompt on exceed it; whether the replayed prompt survives is known once the server counts them.", units.Grouped(a.HostTokensNeeded))
		}
	}
	a.CanProveReload = combine(a.EvictionPressure, a.TierLargerThanGPU, a.TierHoldsSequence)
	return a
}

// combine is yes only when all are yes, no when any is no, else unknown.
func combine(xs ...Answer) Answer {
	out := Yes
	for _, x := range xs {
		if x == No {
			return No
		}
		if x == Unknown {
			out = Unknown
		}
	}
	return out
}

// HostTierWords names the host tier with its size in the engine's own unit.
func HostTierWords(s Setup) string {
	if s.HostTierUnit == "MiB" {
		return fmt.Sprintf("%s MiB host tier", units.Grouped(int(math.Round(s.CPUOffloadGiB*1024))))
	}
	return fmt.Sprintf("%s GiB host tier", units.Exact(s.CPUOffloadGiB))
}

// singleSlotConclusion is Conclusion for a SingleSlot setup.
func (a *Assessment) singleSlotConclusion() string {
	s := a.Setup
	per := "stated"
	if s.StoreBytesSource == "measured" {
		per = "measured"
	}
	switch {
	case s.CPUOffloadGiB <= 0:
		return "No host prompt cache was configured, so the run could not prove a reload."
	case a.EvictionPressure == No:
		return "The replayed prompt was the last one sent, so it stayed in the live slot and the run could not prove a reload."
	case a.TierHoldsSequence == No:
		return fmt.Sprintf("The %s tokens of prompt state saved from the replayed prompt on overflowed the %s (about %s tokens), so the replayed prompt could not survive there until the replay.", units.Grouped(a.HostTokensNeeded), HostTierWords(s), units.Grouped(int(a.CPUTierTokens)))
	case a.TierLargerThanGPU == No:
		return fmt.Sprintf("The %s (about %s tokens) was smaller than one slot's %s-token context, so it was not a valid host-tier reload setup.", HostTierWords(s), units.Grouped(int(a.CPUTierTokens)), units.Grouped(s.GPUKVTokens))
	case a.CanProveReload == Yes:
		return fmt.Sprintf("With one live slot, the prompts after the replayed one took the slot, and at the %s %s bytes of prompt state per token the %s (about %s tokens) held the %s tokens saved from the replayed prompt on: a valid host-tier reload setup.", per, units.Grouped(int(s.StoreBytesPerToken)), HostTierWords(s), units.Grouped(int(a.CPUTierTokens)), units.Grouped(a.HostTokensNeeded))
	default:
		return "Whether the setup could prove a reload is unknown: " + joinFindings(a.Findings)
	}
}

// singleSlotReasons is Reasons for a SingleSlot setup.
func (a *Assessment) singleSlotReasons() []string {
	var why []string
	if a.Setup.CPUOffloadGiB <= 0 {
		return []string{"no host prompt cache is configured"}
	}
	if a.EvictionPressure == No {
		why = append(why, "the replayed prompt is the last one sent, so it stays in the live slot")
	}
	if a.TierLargerThanGPU == No {
		why = append(why, "the host tier is smaller than one slot's context")
	}
	if a.TierHoldsSequence == No {
		why = append(why, "the prompts saved since the replayed one overflow the host tier")
	}
	return why
}

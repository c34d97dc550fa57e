package sim

import (
	"fmt"
	"time"
)

// BatchProfile models concurrency: the engine's prefill compute is one budget that every
// request shares, so time to first token rises with load, as on a real server where one
// batch per engine step holds all the prefill work.
type BatchProfile struct {
	// BatchScheduling puts every prefill of the engine on one compute timeline at
	// prefill_tokens_per_second, first come first served: a request's computed tokens wait
	// for the ones admitted before it. Off, each request prefills as if it ran alone.
	// Host-tier loads do not take compute (they move over the host link), so under load a
	// reload beats a recompute by more than their unloaded ratio.
	BatchScheduling bool `toml:"batch_scheduling"`
	// DecodeSlowdownPerSequence slows each running sequence's decode by this fraction per
	// other sequence running when it is admitted (a decode step grows with its batch).
	DecodeSlowdownPerSequence float64 `toml:"decode_slowdown_per_sequence"`
}

func (b BatchProfile) problems() []string {
	if b.DecodeSlowdownPerSequence < 0 {
		return []string{fmt.Sprintf("decode_slowdown_per_sequence %g must be >= 0", b.DecodeSlowdownPerSequence)}
	}
	return nil
}

// computeTimeline is the engine's shared prefill budget: the time its queued compute ends.
type computeTimeline struct {
	busyUntil time.Time
}

// reserve books d of compute that can start at ready and returns when it ends.
func (c *computeTimeline) reserve(ready time.Time, d time.Duration) time.Time {
	start := ready
	if c.busyUntil.After(start) {
		start = c.busyUntil
	}
	c.busyUntil = start.Add(d)
	return c.busyUntil
}

// prefillDuration is the wall time from admission to first token for a prefill that loads
// for load and computes for compute: alone, their sum; with batch scheduling, the compute
// queues behind the engine's earlier prefills.
func (e *Engine) prefillDuration(load, compute time.Duration) time.Duration {
	if !e.p.BatchScheduling {
		return load + compute
	}
	now := time.Now()
	return e.compute.reserve(now.Add(load), compute).Sub(now)
}

// decodeDelay is the inter-token delay of a sequence admitted while others run.
func (e *Engine) decodeDelay(base time.Duration) time.Duration {
	if e.p.DecodeSlowdownPerSequence == 0 || len(e.running) == 0 {
		return base
	}
	return time.Duration(float64(base) * (1 + e.p.DecodeSlowdownPerSequence*float64(len(e.running))))
}

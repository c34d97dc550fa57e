package sim

import (
	"testing"
	"time"
)

// TestBatchSchedulingQueuesPrefill: two 1000-token prompts admitted together each take 1 s
// of compute alone; with batch scheduling the second's first token waits for the first's
// compute, without it both come after about 1 s. Durations are computed at admission, so
// the test measures no wall time.
func TestBatchSchedulingQueuesPrefill(t *testing.T) {
	for _, batch := range []bool{false, true} {
		p := engineProfile(t, 256, 0)
		p.BatchScheduling = batch
		e := NewEngine(p)
		a, err := e.Submit(syntheticPrompt(1, 1000))
		if err != nil {
			t.Fatal(err)
		}
		b, err := e.Submit(syntheticPrompt(2, 1000))
		if err != nil {
			t.Fatal(err)
		}
		ra, rb := admitted(t, e, a), admitted(t, e, b)
		if ra.Duration < 900*time.Millisecond || ra.Duration > 1100*time.Millisecond {
			t.Fatalf("batch %v: first prefill took %s, want about 1s", batch, ra.Duration)
		}
		queued := rb.Duration > ra.Duration+900*time.Millisecond
		if queued != batch {
			t.Errorf("batch %v: second prefill %s after a first of %s", batch, rb.Duration, ra.Duration)
		}
	}
}

// TestBatchedReloadSkipsComputeQueue: a prompt reloaded from the host tier computes only its
// last block, so behind a queued prefill it comes back long before a recompute of the same
// size admitted right after it.
func TestBatchedReloadSkipsComputeQueue(t *testing.T) {
	p := engineProfile(t, 64, 512)
	p.BatchScheduling = true
	e := NewEngine(p)
	target := syntheticPrompt(7, 16*40)
	serve(t, e, target)
	serve(t, e, syntheticPrompt(8, 16*60)) // evicts the target from the 64-block GPU pool
	busy, err := e.Submit(syntheticPrompt(9, 16*60))
	if err != nil {
		t.Fatal(err)
	}
	rBusy := admitted(t, e, busy)
	e.Finish(busy, FinishStop)
	again := serve(t, e, target)
	if again.ExternalHitTokens == 0 {
		t.Fatalf("the target was not reloaded: %+v", again)
	}
	// 624 tokens x 50 B at 1 MB/s = 31 ms of load, then 16 computed tokens queued behind
	// ~1 s of the busy prefill's compute.
	if again.Duration < rBusy.Duration-100*time.Millisecond {
		t.Errorf("reload %s did not queue its computed tail behind the busy prefill (%s)", again.Duration, rBusy.Duration)
	}
	if again.Duration > rBusy.Duration+200*time.Millisecond {
		t.Errorf("reload %s took far more than the queue ahead of it (%s)", again.Duration, rBusy.Duration)
	}
	fresh := serve(t, e, syntheticPrompt(10, 16*40))
	if fresh.ExternalHitTokens != 0 || fresh.Duration < again.Duration+500*time.Millisecond {
		t.Errorf("recompute of 640 tokens took %s, the reload %s: want about 0.6 s more", fresh.Duration, again.Duration)
	}
}

func TestBatchProfileRejectsNegativeSlowdown(t *testing.T) {
	p := engineProfile(t, 64, 0)
	p.DecodeSlowdownPerSequence = -1
	if err := p.Validate(); err == nil {
		t.Fatal("a negative decode slowdown was accepted")
	}
}

package verdict

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Causes a recompute or partial replay on a valid setup can be traced to.
const (
	// DiagStoresSkipped: vLLM's store_threshold reuse filter skipped the stores (a block is
	// stored only after that many lookups, so a first-sight sequence stores nothing).
	DiagStoresSkipped = "stores_skipped_by_threshold"
	// DiagAllocationFailures: the CPU tier had no room for some stores.
	DiagAllocationFailures = "cpu_tier_allocation_failures"
	// DiagNoStores: no bytes were stored at all: the offload connector is not active.
	DiagNoStores = "no_store_bytes"
	// DiagTierTooSmall: the measured sequence overflowed the CPU tier.
	DiagTierTooSmall = "cpu_tier_too_small"
	// DiagRoutedElsewhere: the replay reached another replica than the original, whose GPU
	// pool and CPU tier never held the prompt (data-parallel engines, routed fleets). The
	// replicas come from Evidence.Routing: the replica whose counters moved around each request.
	DiagRoutedElsewhere = "replay_routed_elsewhere"
)

// Diagnosis is one cause the evidence points to, with the numbers in words: the record's type.
type Diagnosis = record.Diagnosis

// OffloadEvidence is the run-wide offload evidence up to the replay: the record's type.
type OffloadEvidence = record.OffloadEvidence

// Diagnose explains a recompute or partial verdict from the offload evidence; other verdicts,
// and an invalid measurement, get none.
func Diagnose(v Verdict, o OffloadEvidence) []Diagnosis {
	if v != Recompute && v != Partial {
		return nil
	}
	var out []Diagnosis
	add := func(cause, format string, args ...any) {
		out = append(out, Diagnosis{Cause: cause, Detail: fmt.Sprintf(format, args...)})
	}
	if o.RoutedElsewhere != nil && *o.RoutedElsewhere {
		where := ""
		if o.OriginalReplica != "" && o.ReplayReplica != "" {
			where = fmt.Sprintf(" (the original on %s, the replay on %s)", o.OriginalReplica, o.ReplayReplica)
		}
		add(DiagRoutedElsewhere, "routed to another replica: per-replica caches cannot serve it%s", where)
	}
	stored := o.StoreBytes != nil && *o.StoreBytes > 0
	if o.StoresSkipped != nil && *o.StoresSkipped > 0 {
		add(DiagStoresSkipped, "the store_threshold reuse filter skipped %s stores (%s): blocks seen fewer times than the threshold were never offloaded", units.Whole(*o.StoresSkipped), bytesWords(o.StoreBytes))
	}
	if o.AllocationFailures != nil && *o.AllocationFailures > 0 {
		add(DiagAllocationFailures, "the CPU tier had no room for %s stores (%s)", units.Whole(*o.AllocationFailures), bytesWords(o.StoreBytes))
	}
	if o.StoreBytes != nil && !stored && len(out) == 0 {
		add(DiagNoStores, "no bytes were stored to the CPU tier during the run: the offload connector is not active")
	}
	if o.TierHoldsSequence == "no" {
		add(DiagTierTooSmall, "the %d unique tokens since the replayed request overflowed the CPU tier's about %s tokens", o.UniqueTokens, units.Whole(o.TierTokens))
	}
	return out
}

// bytesWords says the stored bytes, or that they are not exposed: absent is never 0.
func bytesWords(b *float64) string {
	if b == nil {
		return "store bytes not exposed"
	}
	return fmt.Sprintf("%s bytes stored", units.Whole(*b))
}

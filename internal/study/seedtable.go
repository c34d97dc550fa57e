package study

import (
	"fmt"
	"io"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// WriteSeedTable prints the verdict table of seed study 001 (kvbench demo): what its
// eviction run and its control run set out to prove, and what they showed.
func WriteSeedTable(w io.Writer, eviction, control *derive.Run) error {
	return textout.Write(w, func(w io.Writer) { writeSeedTable(w, eviction, control) })
}

// writeSeedTable writes what WriteSeedTable writes.
func writeSeedTable(w io.Writer, eviction, control *derive.Run) {
	fmt.Fprintln(w, "seed study 001, reproduced")
	var s record.SequenceSection
	var r record.ReplaySection
	if sec := eviction.Sequence("eviction_sequence"); sec != nil {
		s = *sec
	}
	if sec := eviction.Replay("replay"); sec != nil {
		r = *sec
	}
	fmt.Fprintf(w, "  %-26s %s\n", "store proven", yesNo(s.StoreProven, fmt.Sprintf("%s bytes GPU->CPU during eviction_sequence", units.Count(s.GPUToCPUBytesDelta))))
	if r.Capacity != nil {
		a := r.Capacity
		fmt.Fprintf(w, "  %-26s %s: %d unique tokens vs a %d-token GPU pool\n", "eviction pressure", a.EvictionPressure, a.UniqueTokens, a.Setup.GPUKVTokens)
	}
	fmt.Fprintf(w, "  %-26s %s, cached fraction %s, %s external hits, %s bytes CPU->GPU\n", "replay verdict", r.Verdict, units.Fraction(r.CachedFraction), units.Count(r.ExternalPrefixHitsDelta), units.Count(r.CPUToGPUBytesDelta))
	fmt.Fprintf(w, "  %-26s %s ms cold vs %s ms replay\n", "time to first output", units.MS(r.OriginalTimeToFirstOutputMS), units.MS(r.TimeToFirstOutputMS))
	fmt.Fprintf(w, "  %-26s %s\n", "setup valid", r.SetupValid)
	fmt.Fprintf(w, "  %-26s %s\n", "reload fidelity", r.ReloadFidelity.Words())
	fmt.Fprintf(w, "  %-26s %s\n", "offload gain", r.OffloadGain.Words())
	var c record.ControlSection
	if control.Control != nil {
		c = *control.Control
	}
	fmt.Fprintf(w, "  %-26s %s, cached fraction %s, %s bytes CPU->GPU\n", "offload8 control verdict", c.ReplayVerdict, units.Fraction(c.ReplayCachedFraction), units.Count(c.CPUToGPUBytesAfter))
	fmt.Fprintf(w, "  %-26s %s: %s\n", "offload8 control valid", c.SetupValid, c.Interpretation)
}

func yesNo(ok bool, detail string) string {
	if ok {
		return "yes: " + detail
	}
	return "no: " + detail
}

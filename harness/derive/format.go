package derive

import (
	"fmt"
	"io"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// WriteSummary prints the run's closing table of steps and verdicts, each replay's
// interpretation and each gate's outcome.
func (r *Run) WriteSummary(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { r.writeSummary(w) })
}

// writeSummary writes what WriteSummary writes.
func (r *Run) writeSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREQUESTS\tFAILED\tSTORE BYTES\tVERDICT\tCACHED\tTTFT ms\tSETUP VALID")
	for _, sec := range r.Sections {
		if s := sec.Sequence; s != nil {
			store := units.Count(s.GPUToCPUBytesDelta)
			if !s.CountersValid && s.GPUToCPUBytesDelta == nil {
				store = "invalid" // read, but not trustworthy: see the step's invalid reasons
			}
			na := units.NotApplicable // a sequence has no verdict
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t%s\t%s\t%s\t%s\n", sec.Step, s.Requests, len(s.FailedRequestIndices), store, na, na, na, na)
		} else if s := sec.Replay; s != nil {
			failed := 0
			if s.Error != "" {
				failed = 1
			}
			fmt.Fprintf(tw, "%s\t1\t%d\t%s\t%s\t%s\t%s\t%s\n", sec.Step, failed, units.Count(s.GPUToCPUBytesDelta), s.Verdict,
				units.Fraction(s.CachedFraction), units.MS(s.TimeToFirstOutputMS), s.SetupValid)
		} else if s := sec.Trace; s != nil {
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t-\t-\tp90 %s\t-\n", sec.Step, s.Requests, s.FailedRequests, units.Count(s.StoreBytesDelta), units.MS(s.TTFTMS.P90))
		}
	}
	tw.Flush()
	r.writeCurves(w)
	for _, sec := range r.Sections {
		if s := sec.Replay; s != nil && s.Interpretation != "" {
			fmt.Fprintf(w, "%s: %s\n", sec.Step, s.Interpretation)
		}
		if s := sec.Trace; s != nil {
			fmt.Fprintf(w, "%s: %s\n", sec.Step, s.Finding)
		}
	}
	for _, g := range r.Gates {
		mark := "PASS"
		if !g.Passed {
			mark = "FAIL"
		}
		fmt.Fprintf(w, "gate %s on %s: %s\n", mark, g.Gate.Step, g.Reason)
	}
}

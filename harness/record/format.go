package record

import (
	"fmt"
	"io"
	"text/tabwriter"
)

// WriteSummary prints the run's closing table of steps and verdicts, each replay's
// interpretation and each gate's outcome.
func (r *Run) WriteSummary(w io.Writer) {
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREQUESTS\tFAILED\tSTORE BYTES\tVERDICT\tCACHED\tTTFT ms\tSETUP VALID")
	for _, sec := range r.Sections {
		if s := sec.Sequence; s != nil {
			store := FormatCount(s.GPUToCPUBytesDelta, "absent")
			if !s.CountersValid && s.GPUToCPUBytesDelta == nil {
				store = "invalid" // read, but not trustworthy: see the step's invalid reasons
			}
			fmt.Fprintf(tw, "%s\t%d\t%d\t%s\t-\t-\t-\t-\n", sec.Step, s.Requests, len(s.FailedRequestIndices), store)
		} else if s := sec.Replay; s != nil {
			failed := 0
			if s.Error != "" {
				failed = 1
			}
			fmt.Fprintf(tw, "%s\t1\t%d\t%s\t%s\t%s\t%s\t%s\n", sec.Step, failed, FormatCount(s.GPUToCPUBytesDelta, "absent"), s.Verdict,
				FormatFraction(s.CachedFraction), FormatMS(s.TimeToFirstOutputMS), s.SetupValid)
		}
	}
	tw.Flush()
	r.writeCurves(w)
	for _, sec := range r.Sections {
		if s := sec.Replay; s != nil && s.Interpretation != "" {
			fmt.Fprintf(w, "%s: %s\n", sec.Step, s.Interpretation)
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

// FormatMS writes a duration in milliseconds, "-" when absent.
func FormatMS(p *float64) string {
	if p == nil {
		return "-"
	}
	return fmt.Sprintf("%.1f", *p)
}

// FormatCount writes a counter value, absent when the server did not expose it.
func FormatCount(p *float64, absent string) string {
	if p == nil {
		return absent
	}
	return fmt.Sprintf("%.0f", *p)
}

// FormatFraction writes a fraction to four places, "absent" when unknown.
func FormatFraction(p *float64) string {
	if p == nil {
		return "absent"
	}
	return fmt.Sprintf("%.4f", *p)
}

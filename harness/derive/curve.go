package derive

import (
	"fmt"
	"io"
	"math"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// ReloadCurves are the reload curves of one repetition, from its sections, as run.json lists
// repetition 0's: what a claim over a curve reads in every repetition.
func ReloadCurves(sc *scenarios.Scenario, sections []record.Section) []record.ReloadCurve {
	return reloadCurves(sc, sections)
}

// reloadCurves builds each expanded curve's section from a repetition's sections.
func reloadCurves(sc *scenarios.Scenario, sections []record.Section) []record.ReloadCurve {
	if sc == nil {
		return nil
	}
	var out []record.ReloadCurve
	for _, c := range sc.Curves {
		rc := record.ReloadCurve{ID: c.ID, Curve: c, Points: []record.CurvePoint{}}
		for _, p := range c.Points {
			pt := record.CurvePoint{Tokens: p.Tokens, Step: p.Replay, Verdict: verdict.Invalid, Excluded: "the point's replay was not measured"}
			var rp *record.ReplaySection
			for i := range sections {
				if sections[i].Step == p.Replay {
					rp = sections[i].Replay
				}
			}
			if rp != nil {
				pt = curvePoint(p, rp)
			}
			rc.Points = append(rc.Points, pt)
		}
		rc.BreakEvenTokens, rc.BreakEven = breakEven(rc.Points)
		out = append(out, rc)
	}
	return out
}

func curvePoint(p scenarios.CurveSteps, rp *record.ReplaySection) record.CurvePoint {
	pt := record.CurvePoint{Tokens: p.Tokens, Step: p.Replay, PromptTokens: rp.PromptTokens, ReplayTTFTMS: rp.TimeToFirstOutputMS,
		LoadBytes: rp.CPUToGPUBytesDelta, LoadSeconds: rp.CPUToGPUSecondsDelta, Verdict: rp.Verdict}
	if f := rp.ReloadFidelity; f != nil {
		pt.Identical = f.Identical
	}
	g := rp.OffloadGain
	if g != nil {
		pt.TwinTTFTMS, pt.Gain = g.TwinTTFTMS, g.TTFTRatio
	}
	switch {
	case rp.Verdict != verdict.CPUReload:
		pt.Excluded = fmt.Sprintf("the replay was no reload (%s)", rp.Verdict)
	case g == nil || g.TTFTRatio == nil:
		pt.Excluded = "no cold twin timing"
		if g != nil && g.Skipped != "" {
			pt.Excluded += ": " + g.Skipped
		}
	case g.TwinMissed == capacity.No:
		pt.Excluded = g.TwinMissReason
	default:
		pt.Counted = true
	}
	return pt
}

// breakEven finds where the counted points cross from recompute winning to reload winning
// for good.
func breakEven(points []record.CurvePoint) (*float64, string) {
	var xs []float64
	var gains []float64
	for _, p := range points {
		if p.Counted {
			size := float64(p.Tokens)
			if p.PromptTokens != nil {
				size = float64(*p.PromptTokens)
			}
			xs, gains = append(xs, size), append(gains, *p.Gain)
		}
	}
	if len(xs) == 0 {
		return nil, "no point was both a reload and timed against its cold twin"
	}
	last := -1 // the last counted point where recomputing was at least as fast
	for i, g := range gains {
		if g <= 1 {
			last = i
		}
	}
	switch {
	case last < 0:
		return nil, fmt.Sprintf("reloading was faster than recomputing at every measured size (from %s tokens)", units.Grouped(int(xs[0])))
	case last == len(xs)-1:
		return nil, fmt.Sprintf("recomputing was at least as fast as reloading up to the largest measured size (%s tokens)", units.Grouped(int(xs[last])))
	}
	// Interpolate log(gain) = 0 between the two points, in log size.
	x0, x1 := math.Log(xs[last]), math.Log(xs[last+1])
	g0, g1 := math.Log(gains[last]), math.Log(gains[last+1])
	x := math.Exp(x0 + (x1-x0)*(0-g0)/(g1-g0)) // g0 <= 0 < g1
	note := ""
	for _, g := range gains[:last] {
		if g > 1 {
			note = " (smaller sizes crossed too: the curve is not monotone)"
		}
	}
	return &x, fmt.Sprintf("reloading pays from about %s tokens on: recomputing was at least as fast at %s tokens, reloading faster at %s and above%s",
		units.GroupedFloat(x), units.Grouped(int(xs[last])), units.Grouped(int(xs[last+1])), note)
}

// addReloadEvidence compares each replay of rep with its original and its cold twin, and
// reads its copy rate: the fidelity, gain and bandwidth of its section.
func (r *Run) addReloadEvidence(rep Repetition) {
	for i, st := range rep.Steps {
		if i >= len(rep.Sections) || rep.Sections[i].Replay == nil || len(st.Requests) == 0 {
			continue
		}
		rs := rep.Sections[i].Replay
		replay, twin := &st.Requests[0], (*record.Request)(nil)
		for j := range st.Requests[1:] {
			if q := &st.Requests[1+j]; q.ColdTwin != nil {
				twin = q
			}
		}
		var original *record.Request
		if replay.ReplayOf != nil {
			original = findRequest(rep.Steps, replay.ReplayOf)
		}
		rs.ReloadFidelity = reloadFidelity(r.Scenario, replay, original, twin, r.Cache.KVDtype)
		rs.OffloadGain = offloadGain(replay, twin)
		if rs.OffloadGain.TTFTRatio != nil && rs.Verdict != verdict.CPUReload {
			rs.OffloadGain.Note = fmt.Sprintf("the replay was %s, not a reload from the host tier: this gain is not the tier's", rs.Verdict)
		}
		rs.ReloadBandwidth = reloadBandwidth(r.Scenario, replay.Counters)
	}
}

// writeCurves prints each reload curve as a table and its break-even.
func (r *Run) writeCurves(w io.Writer) {
	for _, c := range r.Curves {
		fmt.Fprintf(w, "\nreload curve %s: %s\n", c.ID, c.BreakEven)
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
		fmt.Fprintln(tw, "  TOKENS\tREPLAY TTFT ms\tCOLD TWIN TTFT ms\tGAIN\tLOAD BYTES\tVERDICT\tIDENTICAL\tNOTE")
		for _, p := range c.Points {
			gain, same := "-", "-"
			if p.Gain != nil {
				gain = units.Times(*p.Gain)
			}
			if p.Identical != nil {
				same = fmt.Sprint(*p.Identical)
			}
			tokens := p.Tokens
			if p.PromptTokens != nil {
				tokens = *p.PromptTokens
			}
			fmt.Fprintf(tw, "  %d\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", tokens, units.MS(p.ReplayTTFTMS), units.MS(p.TwinTTFTMS), gain,
				units.Count(p.LoadBytes), p.Verdict, same, p.Excluded)
		}
		tw.Flush()
	}
}

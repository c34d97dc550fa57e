package report

import (
	"encoding/json"
	"fmt"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
)

// GateRow is one gate's result on one run, for the banner at the top of the page.
type GateRow struct {
	Run    int    `json:"run"`
	Step   string `json:"step"`
	Gate   string `json:"gate"`
	Passed bool   `json:"passed"`
	Reason string `json:"reason"`
}

// Answer is the page's first line: PASS when every gate of every run passed and a
// comparison found no regression, FAIL otherwise, each with its reasons.
type Answer struct {
	Pass  bool      `json:"pass"`
	Gates []GateRow `json:"gates"`
	// Why lists, for a FAIL, every failed gate and regression in a line each.
	Why []string `json:"why"`
}

// StepTTFT is a step's time to first output percentiles over its measured requests
// (repetition 0; a conversation's or trace's from its section).
type StepTTFT struct {
	Step   string             `json:"step"`
	Kind   string             `json:"kind"`
	TTFTMS record.Percentiles `json:"time_to_first_output_ms"`
}

// TraceSplit is a trace step's measured tier split beside its ideal at the server's pool
// sizes.
type TraceSplit struct {
	Step             string             `json:"step"`
	Requests         int                `json:"requests"`
	Measured         record.TierShares  `json:"measured"`
	Ideal            *record.IdealTiers `json:"ideal"`
	IdealUnavailable string             `json:"ideal_unavailable,omitempty"`
	Finding          string             `json:"finding"`
}

// gateText names a gate by its step and its conditions ("replay: verdict=cpu_reload").
func gateText(g record.Gate) string {
	data, _ := json.Marshal(g)
	var fields map[string]any
	_ = json.Unmarshal(data, &fields)
	var conds []string
	for k, v := range fields {
		if k != "step" {
			conds = append(conds, fmt.Sprintf("%s=%v", k, v))
		}
	}
	sort.Strings(conds)
	return strings.Join(conds, ", ")
}

// answerOf decides the page's answer from its runs' gates and the comparison's findings. A
// comparison answers for its candidate: the baseline's gates were its own night's answer.
func answerOf(d Data, rs []*runs.Run) *Answer {
	a := &Answer{Pass: true, Gates: []GateRow{}, Why: []string{}}
	for i, r := range rs {
		if d.Comparison != nil && i == 0 {
			continue
		}
		for _, g := range r.CheckGates() {
			a.Gates = append(a.Gates, GateRow{Run: i, Step: g.Gate.Step, Gate: gateText(g.Gate), Passed: g.Passed, Reason: g.Reason})
			if !g.Passed {
				a.Pass = false
				a.Why = append(a.Why, fmt.Sprintf("gate %s (%s) on %s: %s", g.Gate.Step, gateText(g.Gate), r.Scenario.Name, g.Reason))
			}
		}
	}
	if c := d.Comparison; c != nil && c.Regression {
		a.Pass = false
		for _, f := range c.Findings {
			a.Why = append(a.Why, "regression: "+f)
		}
	}
	if d.NotCompared != "" {
		a.Pass = false
		a.Why = append(a.Why, d.NotCompared)
	}
	return a
}

// stepTTFTs is each step's TTFT percentiles: the replay's cold twins are left out, they
// measure recomputation on purpose.
func stepTTFTs(r *runs.Run) []StepTTFT {
	out := []StepTTFT{}
	secs := map[string]record.Section{}
	for _, s := range r.Sections {
		secs[s.Step] = s
	}
	for _, st := range r.Repetitions[0].Steps {
		row := StepTTFT{Step: st.Step, Kind: string(st.Kind)}
		switch s := secs[st.Step]; {
		case s.Conversation != nil:
			row.TTFTMS = s.Conversation.TTFTMS
		case s.Trace != nil:
			row.TTFTMS = s.Trace.TTFTMS
		default:
			var vs []float64
			for _, q := range st.Requests {
				if q.ColdTwin == nil && q.Result.TimeToFirstOutputMS != nil {
					vs = append(vs, *q.Result.TimeToFirstOutputMS)
				}
			}
			row.TTFTMS = derive.PercentilesOf(vs)
		}
		out = append(out, row)
	}
	return out
}

// traceSplits is each trace step's measured tier split against its ideal.
func traceSplits(r *runs.Run) []TraceSplit {
	var out []TraceSplit
	for _, s := range r.Sections {
		if t := s.Trace; t != nil {
			out = append(out, TraceSplit{Step: s.Step, Requests: t.Requests, Measured: t.Tiers, Ideal: t.Ideal, IdealUnavailable: t.IdealUnavailable, Finding: t.Finding})
		}
	}
	return out
}

// bandwidthWords says a replay's reload bandwidth in a line.
func bandwidthWords(b *record.ReloadBandwidth) string {
	if b == nil {
		return "not measured (no load bytes and seconds)"
	}
	s := units.GBps(b.BytesPerSecond)
	if b.LinkFraction != nil {
		s += fmt.Sprintf(" (%s of the stated link)", units.Share(*b.LinkFraction))
	}
	return s
}

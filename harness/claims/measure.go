package claims

import (
	"fmt"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Measure reads e's value from every repetition of every run: the field of the step's record
// section, recomputed from that repetition's artifacts.
func Measure(rs []*runs.Run, e Expectation) Measured {
	if e.OnCurve() {
		return measureCurve(rs, e)
	}
	var m Measured
	var nulls, noStep, total int
	for _, r := range rs {
		for k := range r.Repetitions {
			total++
			sec, ok := section(r, k, e.Step)
			if !ok {
				noStep++
				if !e.Textual() {
					m.Numbers = append(m.Numbers, nil)
				}
				continue
			}
			v, found := sec.Field(e.Field())
			switch {
			case v.Number != nil && e.Textual():
				m.Words = append(m.Words, units.Number(*v.Number))
			case v.Number != nil:
				m.Numbers = append(m.Numbers, v.Number)
			case v.IsText && e.Textual():
				m.Words = append(m.Words, v.Text)
			default:
				if !found {
					m.Missing = fmt.Sprintf("the %s section has no field %q", e.Step, e.Field())
				}
				nulls++
				if !e.Textual() {
					m.Numbers = append(m.Numbers, nil)
				}
			}
		}
	}
	switch {
	case noStep == total:
		m.Missing = fmt.Sprintf("no run has a measured step %q%s", e.Step, suggest(e.Step, stepNames(rs)))
	case m.Missing != "":
	case nulls > 0:
		m.Missing = fmt.Sprintf("%s is absent (null) in %d of %d measurements: the server does not expose the counter it needs, or the request failed", e.Field(), nulls, total)
	case noStep > 0:
		m.Missing = fmt.Sprintf("step %q was not measured in %d of %d repetitions", e.Step, noStep, total)
	}
	return m
}

// section is repetition k's section for step, as loading the run derived it from that
// repetition's artifacts.
func section(r *runs.Run, k int, step string) (record.Section, bool) {
	if s := r.RepSection(k, step); s != nil {
		return *s, true
	}
	return record.Section{}, false
}

// stepNames are the steps of rs by the names claims give them (a curve point's by its size
// class), each once.
func stepNames(rs []*runs.Run) []string {
	var out []string
	for _, r := range rs {
		for _, id := range r.StepIDs() {
			if name := r.Scenario.StableStepID(id); !slices.Contains(out, name) {
				out = append(out, name)
			}
		}
	}
	return out
}

// suggest is ` (did you mean "x"?)` for the candidate nearest a misspelt name, or "".
func suggest(name string, candidates []string) string {
	if c := closest(name, candidates); c != "" {
		return fmt.Sprintf(" (did you mean %q?)", c)
	}
	return ""
}

// measureCurve reads a curve claim's field of every point in its range, in every
// repetition of every run; points are matched across runs by their size class, the name
// their replay step has on every server.
func measureCurve(rs []*runs.Run, e Expectation) Measured {
	field := strings.TrimPrefix(e.Metric, CurvePrefix)
	var m Measured
	at := map[string]int{}
	nulls := map[string]int{}
	measured := false
	for _, r := range rs {
		for k := range r.Repetitions {
			c, why := pickCurve(derive.ReloadCurves(r.Scenario, r.Repetitions[k].Sections), e.Step)
			if c == nil {
				m.Missing = orText(m.Missing, why)
				continue
			}
			measured, m.Curve = true, c.ID
			for _, p := range c.Points {
				if !e.InRange(p.Tokens) {
					continue
				}
				name := r.Scenario.StableStepID(p.Step)
				i, ok := at[name]
				if !ok {
					i = len(m.Points)
					at[name] = i
					m.Points = append(m.Points, PointMeasured{Step: name, Tokens: p.Tokens})
				}
				pm := &m.Points[i]
				switch v, _ := record.FieldOf(p, field); {
				case v.Number != nil && e.Textual():
					pm.Words = append(pm.Words, units.Number(*v.Number))
				case v.Number != nil:
					pm.Numbers = append(pm.Numbers, v.Number)
				case v.IsText && e.Textual():
					pm.Words = append(pm.Words, v.Text)
				default:
					nulls[name]++
					if !e.Textual() {
						pm.Numbers = append(pm.Numbers, nil)
					}
				}
			}
		}
	}
	if measured {
		m.Missing = ""
		if len(m.Points) == 0 {
			m.Missing = fmt.Sprintf("curve %q has no point%s", m.Curve, e.sizes())
		}
	}
	for i := range m.Points {
		pm := &m.Points[i]
		if n := nulls[pm.Step]; n > 0 {
			pm.Missing = fmt.Sprintf("%s is absent (null) in %d of %d measurements: the point's replay or its cold twin was not measured", field, n, n+len(pm.Words)+countSet(pm.Numbers))
		}
	}
	sort.SliceStable(m.Points, func(i, j int) bool { return m.Points[i].Tokens < m.Points[j].Tokens })
	return m
}

func countSet(xs []*float64) int {
	n := 0
	for _, x := range xs {
		if x != nil {
			n++
		}
	}
	return n
}

// pickCurve is the curve a claim names by its step, or the run's only curve when it names
// none; nil, and why, when there is no such curve.
func pickCurve(curves []record.ReloadCurve, step string) (*record.ReloadCurve, string) {
	var ids []string
	for i := range curves {
		if curves[i].ID == step || (step == "" && len(curves) == 1) {
			return &curves[i], ""
		}
		ids = append(ids, curves[i].ID)
	}
	switch {
	case len(curves) == 0:
		return nil, "no run has a reload curve"
	case step == "":
		return nil, fmt.Sprintf("the runs have reload curves %s: name one with step", strings.Join(ids, ", "))
	}
	return nil, fmt.Sprintf("no run has a reload curve %q%s", step, suggest(step, ids))
}

package claims

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Measure reads e's value from every repetition of every run: the field of the step's record
// section, recomputed from that repetition's artifacts.
func Measure(rs []*runs.Run, e Expectation) Measured {
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
		m.Missing = fmt.Sprintf("no run has a measured step %q", e.Step)
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

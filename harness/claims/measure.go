package claims

import (
	"encoding/json"
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// Measure reads e's value from every repetition of every run: the field of the step's record
// section, recomputed from that repetition's artifacts.
func Measure(rs []*runs.Run, e Expectation) Measured {
	var m Measured
	var nulls, noStep, total int
	for _, r := range rs {
		for k := range r.Repetitions {
			total++
			sec, ok := sectionMap(r, k, e.Step)
			if !ok {
				noStep++
				if !e.Textual() {
					m.Numbers = append(m.Numbers, nil)
				}
				continue
			}
			v, found := lookup(sec, e.Field())
			switch x := v.(type) {
			case string:
				if e.Textual() {
					m.Words = append(m.Words, x)
				} else {
					nulls++
					m.Numbers = append(m.Numbers, nil)
				}
			case float64:
				if e.Textual() {
					m.Words = append(m.Words, Number(x))
				} else {
					m.Numbers = append(m.Numbers, &x)
				}
			case bool:
				if e.Textual() {
					m.Words = append(m.Words, fmt.Sprint(x))
				} else {
					nulls++
					m.Numbers = append(m.Numbers, nil)
				}
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

// sectionMap is repetition k's section for step as generic JSON, as run.json would hold it.
func sectionMap(r *runs.Run, k int, step string) (map[string]any, bool) {
	rec := record.Build(record.RunInfo{Scenario: r.Scenario, Status: r.Status}, r.Repetitions[k].Steps)
	v, ok := rec.Get(step)
	if !ok {
		return nil, false
	}
	data, err := json.Marshal(v)
	if err != nil {
		return nil, false
	}
	var m map[string]any
	if json.Unmarshal(data, &m) != nil {
		return nil, false
	}
	return m, true
}

// lookup follows a dotted path; found is false when a key does not exist (null exists).
func lookup(m map[string]any, path string) (any, bool) {
	var cur any = m
	for _, part := range strings.Split(path, ".") {
		obj, ok := cur.(map[string]any)
		if !ok {
			return nil, false
		}
		if cur, ok = obj[part]; !ok {
			return nil, false
		}
	}
	return cur, true
}

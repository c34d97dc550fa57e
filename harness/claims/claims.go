// Package claims reads claim files, a recipe's published numbers with where they come from,
// and judges measured values against them: reproduced, not reproduced, or not measurable
// (and why). The judgement is pure arithmetic over values already read from runs
// (Evaluate); Measure reads them from loaded runs. `kvbench verify` is its CLI.
//
// A claim file is TOML, decoded strictly like scenarios (an unknown key is an error naming
// its file and line):
//
//	title = "replay reloads 113k cached tokens at ~138k effective prefill tokens/s"
//	[source]
//	url = "https://github.com/local-inference-lab/rtx6kpro/blob/7ffa54e/models/ds4dspark-v20.md"
//	observed_date = "2026-08-02"
//	recipe = "configs/deepseek-v4-flash-offload16-recipe.toml"
//	evidence_type = "pinned community recipe"
//	[[expect]]
//	metric = "verdict"          # step defaults to "replay"
//	equals = "cpu_reload"
//	[[expect]]
//	metric = "effective_prefill_tokens_per_second"
//	value = 137856
//	tolerance = 0.15            # relative: within 15%
//	[[expect]]
//	metric = "cached_fraction"
//	at_least = 0.99
//
// A claim over a reload curve names a field of its points ("reload_curve.gain", the cold
// twin's TTFT over the reload's) and the planned sizes it covers; every point in range must
// hold it ("CPU offload cuts TTFT 2x to 22x from 4k tokens up"):
//
//	[[expect]]
//	metric = "reload_curve.gain"   # step: the curve's id, or the run's one curve
//	from_tokens = 4096
//	at_least = 2
//	at_most = 22
//
// A single curve point is a step named by its size class, the same on every server
// ("curve_256k_replay", scenarios.StableStepID), not by the exact size max_model_len gave.
package claims

import (
	"errors"
	"fmt"
	"math"
	"os"
	"slices"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/scenarios"
)

// ErrInvalid marks a claim file that failed to parse or validate.
var ErrInvalid = errors.New("invalid claim file")

// Schema is the schema of kvbench verify's record.
const Schema = "anvil-serving.kvbench-verify/v1"

// File is one claim file.
type File struct {
	Title       string        `toml:"title" json:"title"`
	Description string        `toml:"description" json:"description,omitempty"`
	Source      Source        `toml:"source" json:"source"`
	Expect      []Expectation `toml:"expect" json:"expect"`
	Path        string        `toml:"-" json:"path"`
}

// Source says where a claim was published, like a seed record's sources entry.
type Source struct {
	URL            string `toml:"url" json:"url"`
	ObservedDate   string `toml:"observed_date" json:"observed_date"`
	Recipe         string `toml:"recipe" json:"recipe,omitempty"`
	EvidenceType   string `toml:"evidence_type" json:"evidence_type"`
	DecisionImpact string `toml:"decision_impact" json:"decision_impact,omitempty"`
}

// Expectation is one claimed value: a step's metric (a field of the run record's section for
// that step, e.g. "cached_fraction", "external_prefix_hits_delta", "verdict") and what the
// claim says of it. Exactly one form: Equals; AtLeast and/or AtMost; Value with Tolerance.
type Expectation struct {
	Step    string   `toml:"step" json:"step"`
	Metric  string   `toml:"metric" json:"metric"`
	Equals  string   `toml:"equals" json:"equals,omitempty"`
	AtLeast *float64 `toml:"at_least" json:"at_least,omitempty"`
	AtMost  *float64 `toml:"at_most" json:"at_most,omitempty"`
	Value   *float64 `toml:"value" json:"value,omitempty"`
	// Tolerance is relative: 0.15 accepts a median within 15% of Value.
	Tolerance *float64 `toml:"tolerance" json:"tolerance,omitempty"`
	// FromTokens and ToTokens bound a claim over a reload curve's points (a metric under
	// CurvePrefix) to the points of planned size in FromTokens..ToTokens; unset: no bound.
	FromTokens *int `toml:"from_tokens" json:"from_tokens,omitempty"`
	ToTokens   *int `toml:"to_tokens" json:"to_tokens,omitempty"`
	// Note is free text shown with the result (what the number means in the source).
	Note string `toml:"note" json:"note,omitempty"`
}

// CurvePrefix starts a metric that is a field of a reload curve's points
// ("reload_curve.gain"), claimed of every point in the expectation's size range.
const CurvePrefix = "reload_curve."

// OnCurve reports whether e claims a field of a reload curve's points.
func (e Expectation) OnCurve() bool { return strings.HasPrefix(e.Metric, CurvePrefix) }

// InRange reports whether a curve point of planned tokens is one e claims.
func (e Expectation) InRange(tokens int) bool {
	return (e.FromTokens == nil || tokens >= *e.FromTokens) && (e.ToTokens == nil || tokens <= *e.ToTokens)
}

// sizes says in words the size range of a curve claim: "" when unbounded.
func (e Expectation) sizes() string {
	switch {
	case e.FromTokens != nil && e.ToTokens != nil:
		return fmt.Sprintf(" at %s..%s tokens", units.Number(float64(*e.FromTokens)), units.Number(float64(*e.ToTokens)))
	case e.FromTokens != nil:
		return fmt.Sprintf(" from %s tokens", units.Number(float64(*e.FromTokens)))
	case e.ToTokens != nil:
		return fmt.Sprintf(" up to %s tokens", units.Number(float64(*e.ToTokens)))
	}
	return ""
}

// Aliases name derived values by the words claims use.
var Aliases = map[string]string{
	"load_bytes_per_token": "evidence.measured_load_bytes_per_token",
	"hit_coverage":         "evidence.hit_coverage",
}

// Field is the record path the expectation reads.
func (e Expectation) Field() string {
	if a, ok := Aliases[e.Metric]; ok {
		return a
	}
	return e.Metric
}

// Textual reports whether the expectation compares words (a verdict) rather than numbers.
func (e Expectation) Textual() bool { return e.Equals != "" }

// Claimed says in words what the claim expects (of every point in range, for a curve).
func (e Expectation) Claimed() string {
	return e.claimed() + e.sizes()
}

func (e Expectation) claimed() string {
	switch {
	case e.Equals != "":
		return e.Equals
	case e.Value != nil:
		return fmt.Sprintf("%s within %s%%", units.Number(*e.Value), units.Number(*e.Tolerance*100))
	case e.AtLeast != nil && e.AtMost != nil:
		return fmt.Sprintf("%s..%s", units.Number(*e.AtLeast), units.Number(*e.AtMost))
	case e.AtLeast != nil:
		return ">= " + units.Number(*e.AtLeast)
	default:
		return "<= " + units.Number(*e.AtMost)
	}
}

// Load reads and validates a claim file.
func Load(path string) (*File, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("reading claim: %w", err)
	}
	return Parse(data, path)
}

// Parse decodes and validates a claim file; every problem is reported at once.
func Parse(data []byte, path string) (*File, error) {
	f := &File{Path: path}
	pos, problems, _ := scenarios.DecodeStrict(data, f)
	if len(problems) == 0 {
		problems = f.validate(pos)
	}
	if len(problems) > 0 {
		sort.SliceStable(problems, func(i, j int) bool { return problems[i].Line < problems[j].Line })
		return nil, &InvalidError{Path: path, Problems: problems}
	}
	return f, nil
}

// InvalidError lists every problem of a claim file on one line, as file:line: key: what.
type InvalidError scenarios.InvalidError

func (e *InvalidError) Error() string { return (*scenarios.InvalidError)(e).Error() }
func (e *InvalidError) Unwrap() error { return ErrInvalid }

func (f *File) validate(pos scenarios.Positions) []scenarios.Problem {
	var ps []scenarios.Problem
	bad := func(key, format string, args ...any) {
		ps = append(ps, scenarios.Problem{Line: pos.Line(key), Key: key, Msg: fmt.Sprintf(format, args...)})
	}
	if f.Source.URL == "" {
		bad("source.url", "a claim must say where it was published")
	}
	if f.Source.ObservedDate == "" {
		bad("source.observed_date", "a claim must say when its source was read (YYYY-MM-DD)")
	}
	if len(f.Expect) == 0 {
		ps = append(ps, scenarios.Problem{Key: "expect", Msg: "a claim needs at least one [[expect]]"})
	}
	for i := range f.Expect {
		e := &f.Expect[i]
		key := fmt.Sprintf("expect[%d]", i)
		if e.Step == "" && !e.OnCurve() { // a curve claim's default is the run's one curve
			e.Step = "replay"
		}
		validateRange(e, key, bad)
		if e.Metric == "" {
			bad(key+".metric", "missing: name a field of the step's record section, e.g. \"cached_fraction\"")
		} else if !KnownField(e.Field()) {
			hint := ""
			if c := closestField(e.Metric); c != "" {
				hint = fmt.Sprintf(" (did you mean %q?)", c)
			}
			bad(key+".metric", "%q is not a field of a step's record section%s", e.Metric, hint)
		}
		if k, ok := kindOf(e.Field()); ok && e.Metric != "" {
			validateForm(e, key, k, bad)
		}
		forms := 0
		if e.Equals != "" {
			forms++
		}
		if e.AtLeast != nil || e.AtMost != nil {
			forms++
		}
		if e.Value != nil {
			forms++
			switch {
			case e.Tolerance == nil:
				bad(key+".tolerance", "a value needs a relative tolerance, e.g. 0.15 for within 15%%")
			case *e.Tolerance < 0 || math.IsNaN(*e.Tolerance):
				bad(key+".tolerance", "must not be negative")
			}
		} else if e.Tolerance != nil {
			bad(key+".tolerance", "applies to value only")
		}
		if forms != 1 {
			bad(key, "give exactly one of equals, at_least/at_most, or value with tolerance")
		}
		if e.AtLeast != nil && e.AtMost != nil && *e.AtLeast > *e.AtMost {
			bad(key+".at_least", "%g is above at_most %g", *e.AtLeast, *e.AtMost)
		}
	}
	return ps
}

// validateRange checks a size range: only a curve's points have sizes, and from_tokens comes
// first.
func validateRange(e *Expectation, key string, bad func(key, format string, args ...any)) {
	for _, b := range []struct {
		name string
		v    *int
	}{{"from_tokens", e.FromTokens}, {"to_tokens", e.ToTokens}} {
		switch {
		case b.v == nil:
		case !e.OnCurve():
			bad(key+"."+b.name, "bounds the points of a reload curve: the metric must be one of theirs, e.g. %q", CurvePrefix+"gain")
		case *b.v < 1:
			bad(key+"."+b.name, "must be at least 1 token")
		}
	}
	if e.FromTokens != nil && e.ToTokens != nil && *e.FromTokens > *e.ToTokens {
		bad(key+".from_tokens", "%d is above to_tokens %d", *e.FromTokens, *e.ToTokens)
	}
}

// validateForm checks that e claims its field in a form the field can hold: equals one of a
// text field's values, numbers for a number field. A misspelt verdict would otherwise be
// measured, never match, and read as "not reproduced".
func validateForm(e *Expectation, key string, k fieldKind, bad func(key, format string, args ...any)) {
	numeric := e.AtLeast != nil || e.AtMost != nil || e.Value != nil
	switch {
	case !k.number && !k.text:
		bad(key+".metric", "%q is not one value (a list or a group of fields): name one field", e.Metric)
	case e.Equals != "" && !k.text:
		bad(key+".equals", "%q is a number: claim it with value and tolerance, or at_least/at_most", e.Metric)
	case e.Equals != "" && k.words != nil && !slices.Contains(k.words, e.Equals):
		hint := ""
		if c := closest(e.Equals, k.words); c != "" {
			hint = fmt.Sprintf(" (did you mean %q?)", c)
		}
		bad(key+".equals", "%q is not a value of %s, which is one of %s%s", e.Equals, e.Metric, strings.Join(k.words, ", "), hint)
	case numeric && !k.number:
		bad(key, "%s is text, not a number: claim it with equals", e.Metric)
	}
}

// Status of one claimed value.
type Status string

const (
	Reproduced    Status = "reproduced"
	NotReproduced Status = "not_reproduced"
	NotMeasurable Status = "not_measurable"
)

// Measured is what the runs say of one expectation: numbers (one per run and repetition, nil
// where absent) or words, and why a value is missing.
type Measured struct {
	Numbers []*float64
	Words   []string
	// Missing explains the absent values, e.g. "external_prefix_hits_delta is null in 3 of 3
	// measurements: the server does not expose the counter, or the request failed".
	Missing string
	// Points are a curve claim's points in its range, smallest first, and Curve the curve's
	// id; a curve claim's own Numbers and Words stay empty.
	Points []PointMeasured
	Curve  string
}

// PointMeasured is what the runs say of one curve point: its replay step by size class, its
// planned size (in the first run that had it), and its values.
type PointMeasured struct {
	Step   string
	Tokens int
	Measured
}

// PointResult is the judgement on one curve point of a curve claim.
type PointResult struct {
	Step     string         `json:"step"`
	Tokens   int            `json:"planned_tokens"`
	Measured *stats.Summary `json:"measured,omitempty"`
	Values   []string       `json:"measured_values,omitempty"`
	Status   Status         `json:"status"`
	Why      string         `json:"why"`
}

// Result is the judgement on one expectation.
type Result struct {
	Step     string         `json:"step"`
	Metric   string         `json:"metric"`
	Claimed  string         `json:"claimed"`
	Expect   Expectation    `json:"expect"`
	Measured *stats.Summary `json:"measured,omitempty"`
	Values   []string       `json:"measured_values,omitempty"`
	Status   Status         `json:"status"`
	Why      string         `json:"why"`
	// Points judge each point of a curve claim; the claim reproduces when every one does.
	Points []PointResult `json:"points,omitempty"`
}

// Evaluate judges m against e: numbers by their median (the spread is reported alongside),
// words only when every measurement says the same (a disagreement is reported, never
// averaged away).
func Evaluate(e Expectation, m Measured) Result {
	if e.OnCurve() {
		return evaluateCurve(e, m)
	}
	return evaluate(e, m)
}

// evaluateCurve judges each point of a curve claim as a claim of its own: the claim
// reproduces when every point in range does, is not reproduced when one is not, and is not
// measurable otherwise (no point in range, or a point not measured).
func evaluateCurve(e Expectation, m Measured) Result {
	r := Result{Step: orText(e.Step, m.Curve), Metric: e.Metric, Claimed: e.Claimed(), Expect: e}
	if len(m.Points) == 0 {
		r.Status, r.Why = NotMeasurable, orText(m.Missing, "no curve point measured")
		return r
	}
	count := map[Status]int{}
	var off []string
	for _, p := range m.Points {
		pr := evaluate(e, p.Measured)
		r.Points = append(r.Points, PointResult{Step: p.Step, Tokens: p.Tokens, Measured: pr.Measured, Values: pr.Values, Status: pr.Status, Why: pr.Why})
		r.Values = append(r.Values, p.Step+" "+pr.MeasuredText())
		count[pr.Status]++
		if pr.Status != Reproduced {
			off = append(off, fmt.Sprintf("%s (%s tokens) %s: %s", p.Step, units.Number(float64(p.Tokens)), pr.Status, pr.Why))
		}
	}
	n := len(m.Points)
	switch {
	case count[NotReproduced] > 0:
		r.Status = NotReproduced
	case count[NotMeasurable] > 0:
		r.Status = NotMeasurable
	default:
		r.Status = Reproduced
	}
	r.Why = fmt.Sprintf("%d of %d point(s)%s hold it", count[Reproduced], n, e.sizes())
	if len(off) > 0 {
		r.Why += "; " + strings.Join(off, "; ")
	}
	return r
}

// evaluate judges one value (a step's field, or one curve point's).
func evaluate(e Expectation, m Measured) Result {
	r := Result{Step: e.Step, Metric: e.Metric, Claimed: e.Claimed(), Expect: e}
	if e.Textual() {
		r.Values = m.Words
		if len(m.Words) == 0 {
			r.Status, r.Why = NotMeasurable, orText(m.Missing, "no measurement")
			return r
		}
		for _, w := range m.Words {
			if w != e.Equals {
				r.Status, r.Why = NotReproduced, fmt.Sprintf("measured %s, claimed %s", strings.Join(m.Words, ", "), e.Equals)
				return r
			}
		}
		r.Status, r.Why = Reproduced, fmt.Sprintf("%d of %d measurements say %s", len(m.Words), len(m.Words), e.Equals)
		return r
	}
	s := stats.Summarize(m.Numbers)
	r.Measured = &s
	if s.N == 0 {
		r.Status, r.Why = NotMeasurable, orText(m.Missing, "no measurement")
		return r
	}
	med := *s.Median
	ok, why := true, []string{}
	if e.Value != nil {
		dev := 0.0
		if *e.Value != 0 {
			dev = (med - *e.Value) / math.Abs(*e.Value)
		}
		if !stats.Within(med, *e.Value, *e.Tolerance) {
			ok = false
		}
		why = append(why, fmt.Sprintf("median %s is %s %s (tolerance %s%%)", units.Number(med), signedPercent(dev), units.Number(*e.Value), units.Number(*e.Tolerance*100)))
	}
	if e.AtLeast != nil {
		ok = ok && med >= *e.AtLeast
		why = append(why, fmt.Sprintf("median %s %s %s", units.Number(med), cmp(med >= *e.AtLeast, ">=", "<"), units.Number(*e.AtLeast)))
	}
	if e.AtMost != nil {
		ok = ok && med <= *e.AtMost
		why = append(why, fmt.Sprintf("median %s %s %s", units.Number(med), cmp(med <= *e.AtMost, "<=", ">"), units.Number(*e.AtMost)))
	}
	if s.Absent > 0 && m.Missing != "" {
		why = append(why, m.Missing)
	}
	r.Status, r.Why = NotReproduced, strings.Join(why, "; ")
	if ok {
		r.Status = Reproduced
	}
	return r
}

func cmp(ok bool, yes, no string) string {
	if ok {
		return yes
	}
	return no
}

func orText(s, def string) string {
	if s == "" {
		return def
	}
	return s
}

func signedPercent(dev float64) string {
	switch {
	case dev > 0:
		return units.Number(dev*100) + "% above"
	case dev < 0:
		return units.Number(-dev*100) + "% below"
	default:
		return "exactly"
	}
}

// Counts tallies results by status.
func Counts(rs []Result) (reproduced, notReproduced, notMeasurable int) {
	for _, r := range rs {
		switch r.Status {
		case Reproduced:
			reproduced++
		case NotReproduced:
			notReproduced++
		default:
			notMeasurable++
		}
	}
	return
}

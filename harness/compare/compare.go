// Package compare compares a candidate run with a baseline run step by step and request by
// request (a trace or conversation step, whose requests overlap, by its distribution), from
// their artifacts: a change is a regression only when it is worse than both
// the configured tolerance and the measured noise of the two runs (the spread of their
// repetitions); a replay verdict the baseline never showed (cpu_reload -> recompute) is
// always a regression. It computes only; the CLI (kvbench compare) loads runs and prints.
package compare

import (
	"errors"
	"fmt"
	"math"
	"net/url"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// Schema is the schema of kvbench compare's JSON output.
const Schema = "anvil-serving.kvbench-compare/v1"

// SweepSchema is the schema of a comparison of two sweeps, as --format json prints it.
const SweepSchema = "anvil-serving.kvbench-sweep-compare/v1"

// DefaultTolerance is the relative change a metric may take before it counts, when the
// measured noise is smaller.
const DefaultTolerance = 0.10

// TTFTFloorMS is the smallest change of a time to first output that two runs, neither of
// them repeated, can tell from noise: a scheduler tick, a page fault or a garbage collection
// of the server moves a single millisecond-scale TTFT by a few milliseconds, which is tens
// of percent of it (1.84 -> 2.95 ms on a smoke run) and far beyond any tolerance. Under the
// floor such a change is judged cannot_tell, with a warning, not a regression; repeated runs
// measure their noise instead and need no floor.
const TTFTFloorMS = 25.0

// ttftOf names, for each metric whose change is a change of a TTFT, the TTFT metric whose
// absolute change the floor is held to: a request's prefill rate is its prompt over its TTFT.
var ttftOf = map[string]string{
	"time_to_first_output_ms":             "time_to_first_output_ms",
	"effective_prefill_tokens_per_second": "time_to_first_output_ms",
	"time_to_first_output_ms_p50":         "time_to_first_output_ms_p50",
	"time_to_first_output_ms_p90":         "time_to_first_output_ms_p90",
	"time_to_first_output_ms_p99":         "time_to_first_output_ms_p99",
}

// ErrMismatch means the runs measured different things and cannot be compared.
var ErrMismatch = errors.New("runs are not comparable")

// MismatchError names every field the runs differ in.
type MismatchError struct{ Mismatches []runs.Mismatch }

func (e *MismatchError) Error() string {
	parts := make([]string, len(e.Mismatches))
	for i, m := range e.Mismatches {
		parts[i] = fmt.Sprintf("%s differs (baseline %q, candidate %q)", m.Field, m.Baseline, m.Candidate)
	}
	return strings.Join(parts, "; ") + " (--allow-mismatch to compare anyway)"
}

func (e *MismatchError) Unwrap() error { return ErrMismatch }

// ErrIncomplete means a run did not finish (interrupted, failed, or killed) and so did not
// measure every step.
var ErrIncomplete = errors.New("run did not finish")

// IncompleteError names the side that did not finish and why.
type IncompleteError struct {
	Side, Dir, Status, Reason string
}

func (e *IncompleteError) Error() string {
	return fmt.Sprintf("%s is %s (%s): %s; not every step was measured (--allow-incomplete to compare anyway)", e.Side, e.Status, e.Dir, e.Reason)
}

func (e *IncompleteError) Unwrap() error { return ErrIncomplete }

// finished returns an *IncompleteError when r's status is anything but completed.
func finished(side string, r *runs.Run) error {
	if r.Status == record.StatusCompleted {
		return nil
	}
	return &IncompleteError{Side: side, Dir: r.Dir, Status: r.Status, Reason: r.StopReason}
}

// ErrWarmCaches means a run's cold steps came back cached beyond what the run could have
// cached: it measured an earlier run's caches, and compares with nothing.
var ErrWarmCaches = errors.New("run measured warm caches")

// WarmError names the side whose cold steps came back cached, and each finding.
type WarmError struct {
	Side, Dir string
	Findings  []string
}

func (e *WarmError) Error() string {
	return fmt.Sprintf("%s (%s) measured warm caches, so the runs are not comparable: %s", e.Side, e.Dir, strings.Join(e.Findings, "; "))
}

// Unwrap says both what happened and what it means: the runs are not comparable.
func (e *WarmError) Unwrap() []error { return []error{ErrWarmCaches, ErrMismatch} }

// cold returns a *WarmError when any cold step of r came back warm.
func cold(side string, r *runs.Run) error {
	if f := r.WarmFindings(); len(f) > 0 {
		return &WarmError{Side: side, Dir: r.Dir, Findings: f}
	}
	return nil
}

// Options configure a comparison.
type Options struct {
	// Tolerance is the relative change (0.10 = 10%) below which nothing counts.
	Tolerance float64
	// AllowMismatch compares runs of different scenarios, models or prompts anyway.
	AllowMismatch bool
	// AllowIncomplete compares a run that did not finish anyway; its status is reported.
	AllowIncomplete bool
}

// Metric is a per-request measurement compare judges, and which way is better.
type Metric struct {
	Name   string
	Better stats.Better
}

// Metrics are judged in this order for every request.
var Metrics = []Metric{
	{"time_to_first_output_ms", stats.Lower},
	{"effective_prefill_tokens_per_second", stats.Higher},
	{"decode_tokens_per_second", stats.Higher},
	{"cached_fraction", stats.Higher},
}

// Result is a whole comparison.
type Result struct {
	Schema     string          `json:"schema"`
	Baseline   RunRef          `json:"baseline"`
	Candidate  RunRef          `json:"candidate"`
	Tolerance  float64         `json:"tolerance"`
	Noise      string          `json:"noise"`
	Mismatches []runs.Mismatch `json:"mismatches"`
	// Salted says, when the runs' prompt salts differ, that they sent fresh bytes of the
	// same shapes and were held to equal shapes, not equal bytes; "" when the salts agree.
	Salted string `json:"salted,omitempty"`
	// ServerChanges names each server setting the runs were measured on that differs (the
	// endpoint, engine, recipe, KV pool, CPU tier): no reason to refuse the comparison (a
	// nightly exists to catch what a changed server does), but every reader must see it.
	ServerChanges []runs.Mismatch `json:"server_changes"`
	Steps         []Step          `json:"steps"`
	// Findings lists each regression in words; Regression is true when there is any.
	Findings   []string `json:"regressions"`
	Regression bool     `json:"regression"`
	// TTFTFloorMS is the floor a TTFT change of unrepeated runs must pass (TTFTFloorMS), set
	// only when neither run was repeated; Warnings names each change judged cannot_tell.
	TTFTFloorMS *float64 `json:"ttft_floor_ms,omitempty"`
	Warnings    []string `json:"warnings,omitempty"`
}

// RunRef identifies one side of the comparison.
type RunRef struct {
	Dir         string `json:"dir"`
	Scenario    string `json:"scenario"`
	Model       string `json:"model"`
	ObservedAt  string `json:"observed_at"`
	Repetitions int    `json:"repetitions"`
	Status      string `json:"status"`
	StopReason  string `json:"stop_reason,omitempty"`
	Salt        string `json:"salt,omitempty"`
}

// Step compares one step.
type Step struct {
	Step     string    `json:"step"`
	Kind     string    `json:"kind"`
	Verdict  *Verdict  `json:"verdict,omitempty"`
	Requests []Request `json:"requests"`
	// Distribution compares a step of overlapping requests (trace, conversation) as a
	// whole, one value per repetition; its Requests are empty.
	Distribution []MetricValue `json:"distribution,omitempty"`
}

// Verdict compares a replay step's verdicts across all repetitions of both runs.
type Verdict struct {
	Baseline  []string        `json:"baseline"`
	Candidate []string        `json:"candidate"`
	Status    stats.Judgement `json:"status"`
	Why       string          `json:"why,omitempty"`
}

// Request compares one request position of a step.
type Request struct {
	Index           int           `json:"index_in_step"`
	BaselineFailed  int           `json:"baseline_failed"`
	CandidateFailed int           `json:"candidate_failed"`
	Metrics         []MetricValue `json:"metrics"`
}

// MetricValue is one metric of one request on both sides and the judgement.
type MetricValue struct {
	Metric    string        `json:"metric"`
	Better    stats.Better  `json:"better"`
	Baseline  stats.Summary `json:"baseline"`
	Candidate stats.Summary `json:"candidate"`
	stats.Change
}

// Ref describes a loaded run for the comparison.
func Ref(r *runs.Run) RunRef {
	id := r.Identify()
	return RunRef{Dir: r.Dir, Scenario: id.Scenario, Model: id.Model, ObservedAt: r.ObservedAt, Repetitions: len(r.Repetitions), Status: r.Status, StopReason: r.StopReason, Salt: id.Salt}
}

// Compare compares candidate with baseline. It refuses a run that did not finish (an
// *IncompleteError, checked first: its missing requests are not a prompt difference) unless
// opts.AllowIncomplete, a run whose cold steps came back cached (a *WarmError: its figures
// are an earlier run's caches, a TTFT "improvement" that is no improvement), and runs of
// different scenarios, models or prompt shapes (a *MismatchError) unless opts.AllowMismatch.
func Compare(baseline, candidate *runs.Run, opts Options) (*Result, error) {
	if !opts.AllowIncomplete {
		for _, err := range []error{finished("candidate", candidate), finished("baseline", baseline)} {
			if err != nil {
				return nil, err
			}
		}
	}
	for _, err := range []error{cold("candidate", candidate), cold("baseline", baseline)} {
		if err != nil {
			return nil, err
		}
	}
	mm := runs.Mismatches(baseline.Identify(), candidate.Identify())
	if len(mm) > 0 && !opts.AllowMismatch {
		return nil, &MismatchError{Mismatches: mm}
	}
	res := &Result{
		Schema: Schema, Baseline: Ref(baseline), Candidate: Ref(candidate),
		Tolerance: opts.Tolerance, Mismatches: mm, Steps: []Step{}, Findings: []string{},
	}
	if res.Mismatches == nil {
		res.Mismatches = []runs.Mismatch{}
	}
	if b, c := res.Baseline.Salt, res.Candidate.Salt; b != c {
		res.Salted = fmt.Sprintf("the runs sent fresh bytes of the same shapes (prompt salt: baseline %s, candidate %s), compared by shape", saltWord(b), saltWord(c))
	}
	res.ServerChanges = ServerChanges(baseline, candidate)
	nb, nc := len(baseline.Repetitions), len(candidate.Repetitions)
	switch {
	case nb > 1 || nc > 1:
		res.Noise = fmt.Sprintf("measured from repetitions (baseline %d, candidate %d): a change counts only beyond the larger relative spread and the tolerance", nb, nc)
	default:
		res.Noise = fmt.Sprintf("not measured: neither run was repeated (kvbench run --repeat N), so the tolerance decides, and a TTFT change under %s ms cannot be told from noise", units.Exact(TTFTFloorMS))
		floor := TTFTFloorMS
		res.TTFTFloorMS = &floor
	}
	for si, id := range baseline.StepIDs() {
		bst := baseline.Repetitions[0].Steps[si]
		st := Step{Step: id, Kind: bst.Kind, Requests: []Request{}}
		if candidate.Step(0, id) == nil {
			res.Findings = append(res.Findings, fmt.Sprintf("%s: not measured in the candidate", id))
			res.Steps = append(res.Steps, st)
			continue
		}
		if bst.Kind == record.KindReplay {
			st.Verdict = compareVerdicts(words(baseline.Verdicts(id)), words(candidate.Verdicts(id)))
			if st.Verdict.Status == stats.Regressed {
				res.Findings = append(res.Findings, fmt.Sprintf("%s: verdict %s", id, st.Verdict.Why))
			}
		}
		if concurrent(bst.Kind) {
			// Overlapping requests are scheduled differently every run: request i of one run
			// meets other neighbours than request i of the next, so only the step's
			// distribution and tier shares are the same measurement twice.
			st.Distribution, res.Findings = compareDistribution(baseline, candidate, id, opts.Tolerance, res.TTFTFloorMS, res.Findings, &res.Warnings)
			res.Steps = append(res.Steps, st)
			continue
		}
		for i, q := range bst.Requests {
			rq := Request{Index: q.IndexInStep, BaselineFailed: failures(baseline, id, i), CandidateFailed: failures(candidate, id, i)}
			if rq.CandidateFailed > 0 && rq.BaselineFailed == 0 {
				res.Findings = append(res.Findings, fmt.Sprintf("%s[%d]: failed in %d candidate repetition(s), never in the baseline", id, rq.Index, rq.CandidateFailed))
			}
			for _, m := range Metrics {
				b := stats.Summarize(baseline.RequestValues(id, i, m.Name))
				c := stats.Summarize(candidate.RequestValues(id, i, m.Name))
				if b.N == 0 && c.N == 0 {
					continue // not a metric of this request (e.g. decode with one output token)
				}
				rq.Metrics = append(rq.Metrics, MetricValue{Metric: m.Name, Better: m.Better, Baseline: b, Candidate: c, Change: stats.Compare(b, c, m.Better, opts.Tolerance)})
			}
			where := fmt.Sprintf("%s[%d]", id, rq.Index)
			res.Warnings = append(res.Warnings, underFloor(rq.Metrics, res.TTFTFloorMS, where)...)
			for _, mv := range rq.Metrics {
				if mv.Judgement == stats.Regressed {
					res.Findings = append(res.Findings, fmt.Sprintf("%s %s %s", where, mv.Metric, Movement(mv)))
				}
			}
			st.Requests = append(st.Requests, rq)
		}
		res.Steps = append(res.Steps, st)
	}
	res.Regression = len(res.Findings) > 0
	return res, nil
}

// concurrent reports whether a step's requests overlap, so that it compares as a whole.
func concurrent(kind string) bool {
	return kind == record.KindTrace || kind == record.KindConversation
}

// stepMetric is a whole-step measurement of a trace or conversation step, read from one
// repetition's section; nil where it was not measured.
type stepMetric struct {
	Metric
	of func(stepView) *float64
}

// stepView is what a trace or conversation section shares.
type stepView struct {
	ttft, decode  record.Percentiles
	tiers         record.TierShares
	countersValid bool
	failed        int
}

// StepMetrics are judged in this order for every trace and conversation step.
var StepMetrics = []stepMetric{
	{Metric{"time_to_first_output_ms_p50", stats.Lower}, func(v stepView) *float64 { return v.ttft.P50 }},
	{Metric{"time_to_first_output_ms_p90", stats.Lower}, func(v stepView) *float64 { return v.ttft.P90 }},
	{Metric{"time_to_first_output_ms_p99", stats.Lower}, func(v stepView) *float64 { return v.ttft.P99 }},
	{Metric{"decode_tokens_per_second_p50", stats.Higher}, func(v stepView) *float64 { return v.decode.P50 }},
	{Metric{"gpu_share", stats.Higher}, func(v stepView) *float64 { return validShare(v, v.tiers.GPU) }},
	{Metric{"cached_share", stats.Higher}, func(v stepView) *float64 {
		if v.tiers.GPU == nil || v.tiers.Host == nil {
			return nil
		}
		return validShare(v, ptrTo(*v.tiers.GPU+*v.tiers.Host))
	}},
}

// validShare is a tier share only where the step's counters can be trusted.
func validShare(v stepView, share *float64) *float64 {
	if !v.countersValid {
		return nil
	}
	return share
}

func ptrTo(x float64) *float64 { return &x }

// stepViews reads step id's trace or conversation section in every repetition of r (nil
// where the repetition has none).
func stepViews(r *runs.Run, id string) []*stepView {
	var out []*stepView
	for k := range r.Repetitions {
		sec := r.RepSection(k, id)
		switch {
		case sec == nil:
			out = append(out, nil)
		case sec.Trace != nil:
			t := sec.Trace
			out = append(out, &stepView{ttft: t.TTFTMS, decode: t.DecodeTokensPerSecond, tiers: t.Tiers, countersValid: t.CountersValid, failed: t.FailedRequests})
		case sec.Conversation != nil:
			c := sec.Conversation
			out = append(out, &stepView{ttft: c.TTFTMS, tiers: c.Tiers, countersValid: c.CountersValid, failed: c.FailedRequests})
		default:
			out = append(out, nil)
		}
	}
	return out
}

// compareDistribution judges step id's whole-step metrics, each repetition one value, with
// the noise rule the per-request metrics have; new failures are a finding.
func compareDistribution(baseline, candidate *runs.Run, id string, tolerance float64, floor *float64, findings []string, warnings *[]string) ([]MetricValue, []string) {
	bv, cv := stepViews(baseline, id), stepViews(candidate, id)
	bf, cf := 0, 0
	for _, v := range bv {
		if v != nil {
			bf += v.failed
		}
	}
	for _, v := range cv {
		if v != nil {
			cf += v.failed
		}
	}
	if cf > 0 && bf == 0 {
		findings = append(findings, fmt.Sprintf("%s: %d request(s) failed in the candidate, none in the baseline", id, cf))
	}
	values := func(vs []*stepView, of func(stepView) *float64) []*float64 {
		out := make([]*float64, len(vs))
		for i, v := range vs {
			if v != nil {
				out[i] = of(*v)
			}
		}
		return out
	}
	out := []MetricValue{}
	for _, m := range StepMetrics {
		b, c := stats.Summarize(values(bv, m.of)), stats.Summarize(values(cv, m.of))
		if b.N == 0 && c.N == 0 {
			continue // not measured by this kind of step (a conversation has no decode rate)
		}
		out = append(out, MetricValue{Metric: m.Name, Better: m.Better, Baseline: b, Candidate: c, Change: stats.Compare(b, c, m.Better, tolerance)})
	}
	*warnings = append(*warnings, underFloor(out, floor, id)...)
	for _, mv := range out {
		if mv.Judgement == stats.Regressed {
			findings = append(findings, fmt.Sprintf("%s %s %s", id, mv.Metric, Movement(mv)))
		}
	}
	return out, findings
}

// underFloor judges cannot_tell each change of ms (one request's metrics, or one step's)
// that passed the tolerance while its TTFT moved by less than floor ms, and returns a warning
// for each; nil floor (a repeated run measured its noise) changes nothing.
func underFloor(ms []MetricValue, floor *float64, where string) []string {
	if floor == nil {
		return nil
	}
	delta := map[string]float64{}
	for _, m := range ms {
		if m.Baseline.Median != nil && m.Candidate.Median != nil {
			delta[m.Metric] = math.Abs(*m.Candidate.Median - *m.Baseline.Median)
		}
	}
	var warnings []string
	for i := range ms {
		m := &ms[i]
		d, ok := delta[ttftOf[m.Metric]]
		if !ok || d >= *floor || (m.Judgement != stats.Regressed && m.Judgement != stats.Improved) {
			continue
		}
		move, what := Movement(*m), "a regression"
		if m.Judgement == stats.Improved {
			what = "an improvement"
		}
		m.Judgement = stats.CannotTell
		m.Why = fmt.Sprintf("its TTFT moved by %s ms, under the %s ms floor of unrepeated runs", units.MS(&d), units.Exact(*floor))
		warnings = append(warnings, fmt.Sprintf("%s %s %s, but %s: cannot tell noise from %s (kvbench run --repeat N measures the noise)", where, m.Metric, move, m.Why, what))
	}
	return warnings
}

func saltWord(s string) string {
	if s == "" {
		return "none"
	}
	return s
}

// compareVerdicts: a candidate verdict the baseline never reached is a regression; the
// baseline's own disagreement is reported, not averaged.
func compareVerdicts(b, c []string) *Verdict {
	v := &Verdict{Baseline: b, Candidate: c, Status: stats.Unchanged}
	var changed []string
	for _, x := range c {
		if !slices.Contains(b, x) && !slices.Contains(changed, x) {
			changed = append(changed, x)
		}
	}
	switch {
	case len(changed) > 0:
		v.Status = stats.Regressed
		v.Why = fmt.Sprintf("%s -> %s", strings.Join(unique(b), "/"), strings.Join(changed, "/"))
	case len(unique(b)) > 1:
		v.Why = "the baseline's repetitions disagree: " + strings.Join(b, ", ")
	case len(unique(c)) > 1:
		v.Why = "the candidate's repetitions disagree: " + strings.Join(c, ", ")
	}
	return v
}

// words are verdicts as the comparison prints them.
func words(vs []verdict.Verdict) []string {
	out := make([]string, len(vs))
	for i, v := range vs {
		out[i] = string(v)
	}
	return out
}

func unique(xs []string) []string {
	var out []string
	for _, x := range xs {
		if !slices.Contains(out, x) {
			out = append(out, x)
		}
	}
	return out
}

func failures(r *runs.Run, id string, i int) int {
	n := 0
	for k := range r.Repetitions {
		if st := r.Step(k, id); st != nil && i < len(st.Requests) && st.Requests[i].Result.Failed() {
			n++
		}
	}
	return n
}

// Movement says which way a judged metric moved, by how much, and why that is better or
// worse: "fell 93.2% (median 100 -> 6.8; higher is better; threshold 10.0%)".
func Movement(m MetricValue) string {
	if m.Relative == nil {
		return "not compared (" + m.Why + ")"
	}
	dir := "unchanged"
	switch rel := *m.Relative; {
	case rel > 0:
		dir = "rose " + units.Share(rel)
	case rel < 0:
		dir = "fell " + units.Share(-rel)
	}
	return fmt.Sprintf("%s (median %s -> %s; %s is better; threshold %s)", dir, units.Value(m.Baseline.Median), units.Value(m.Candidate.Median), m.Better, units.Share(m.Threshold))
}

// ServerChanges lists the server settings b and c were measured on that differ, named by
// their run.json fields; the endpoint is compared by host, never with its credentials.
func ServerChanges(b, c *runs.Run) []runs.Mismatch {
	out := []runs.Mismatch{}
	add := func(field, bv, cv string) {
		if bv != cv {
			out = append(out, runs.Mismatch{Field: field, Baseline: bv, Candidate: cv})
		}
	}
	add("target.endpoint (host)", endpointHost(b), endpointHost(c))
	add("runtime.engine", b.Runtime.Engine, c.Runtime.Engine)
	add("runtime.image", b.Runtime.Image, c.Runtime.Image)
	add("runtime.recipe", b.Runtime.Recipe, c.Runtime.Recipe)
	bc, cc := b.Cache, c.Cache
	add("cache.max_model_len", fmt.Sprint(bc.MaxModelLen), fmt.Sprint(cc.MaxModelLen))
	add("cache.gpu_kv_cache_tokens", fmt.Sprint(bc.GPUKVCacheTokens), fmt.Sprint(cc.GPUKVCacheTokens))
	add("cache.block_size", fmt.Sprint(bc.BlockSize), fmt.Sprint(cc.BlockSize))
	add("cache.cpu_offload_gib", fmt.Sprint(bc.CPUOffloadGiB), fmt.Sprint(cc.CPUOffloadGiB))
	add("cache.cpu_mmap_bytes", optional(bc.CPUMmapBytes), optional(cc.CPUMmapBytes))
	add("cache.kv_dtype", optional(bc.KVDtype), optional(cc.KVDtype))
	add("cache.prefix_caching", optional(bc.PrefixCaching), optional(cc.PrefixCaching))
	return out
}

func endpointHost(r *runs.Run) string {
	if r.Scenario == nil {
		return ""
	}
	u, err := url.Parse(r.Scenario.Target.Endpoint)
	if err != nil {
		return "(unparsable)"
	}
	return u.Host
}

// optional prints a value the record may hold as null: absent is no value, never 0.
func optional[T any](v *T) string {
	if v == nil {
		return "absent"
	}
	return fmt.Sprint(*v)
}

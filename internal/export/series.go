// Package export turns a loaded run into Prometheus series, so a fleet of nightly runs can
// be watched from one dashboard: pushed to a Pushgateway (Push) or written in the OpenMetrics
// text format for node_exporter's textfile collector (WriteOpenMetrics). The series are
// computed from the run's step artifacts, as every other reader of a run does. A value the
// record holds as null (a counter the server did not expose, a request that failed) has no
// series: it is never exported as 0.
package export

import (
	"encoding/json"
	"fmt"
	"math"
	"net/url"
	"sort"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/model"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Job is the Pushgateway job every run is pushed under.
const Job = "kvbench"

// Label is one label name and value.
type Label struct {
	Name, Value string
}

// ParseLabel reads NAME=VALUE, as --push-label gives it. The name must be a classic
// Prometheus label name that is not reserved (job, the identity labels, the series' own).
func ParseLabel(s string) (Label, error) {
	name, value, ok := strings.Cut(s, "=")
	if !ok {
		return Label{}, fmt.Errorf("label %q: want NAME=VALUE", s)
	}
	if !model.LegacyValidation.IsValidLabelName(name) || strings.HasPrefix(name, "__") {
		return Label{}, fmt.Errorf("label %q: %q is not a valid label name", s, name)
	}
	if reserved[name] {
		return Label{}, fmt.Errorf("label %q: %q is reserved: kvbench or Prometheus sets it", s, name)
	}
	return Label{Name: name, Value: value}, nil
}

// reserved are the label names kvbench sets itself, and those Prometheus gives a meaning.
var reserved = map[string]bool{
	"job": true, "instance": true, "scenario": true, "recipe": true, "endpoint": true,
	"step": true, "request": true, "verdict": true, "gate": true, "status": true,
	"quantile": true, "version": true, "model": true, "engine": true,
	"tier": true, "kind": true, "basis": true, "level": true, "shard": true,
	"le": true, // Prometheus's histogram bucket bound, as quantile is a summary's
}

// Identity returns the labels that tell one run's series from another's: the scenario, the
// recipe, the endpoint's host:port (never its credentials) and, for a run of one shard of its
// trace (--shard), the shard as K/N, so N shards' pushes do not replace each other. An empty
// one is left out, as Prometheus treats an empty label as absent.
func Identity(r *runs.Run) []Label {
	out := []Label{{"scenario", r.Scenario.Name}}
	if rec := r.Runtime.Recipe; rec != "" {
		out = append(out, Label{"recipe", rec})
	}
	if u, err := url.Parse(r.Scenario.Target.Endpoint); err == nil && u.Host != "" {
		out = append(out, Label{"endpoint", u.Host})
	}
	if len(r.Repetitions) > 0 {
		for _, st := range r.Repetitions[0].Steps {
			if sh := st.Trace; sh != nil && sh.Shard != nil {
				out = append(out, Label{"shard", fmt.Sprintf("%d/%d", sh.Shard.Index, sh.Shard.Count)})
				break
			}
		}
	}
	return out
}

// family declares one exported metric family.
type family struct {
	help string
	typ  dto.MetricType
}

var (
	gauge   = dto.MetricType_GAUGE
	summary = dto.MetricType_SUMMARY
)

// catalog is every metric family kvbench exports; Families refuses any other name, and
// Names lists them for dashboards and alerts to be checked against.
var catalog = map[string]family{
	"kvbench_run_info":              {"The run's kvbench version, model and engine (always 1).", gauge},
	"kvbench_run_status":            {"1 for the run's status (completed, failed, interrupted or incomplete), 0 for the others.", gauge},
	"kvbench_run_timestamp_seconds": {"When the run was observed, in Unix seconds: alert when it gets old.", gauge},
	"kvbench_gate_passed":           {"1 when the scenario's gate passed, 0 when it failed.", gauge},

	"kvbench_replay_verdict":                {"1 for the replay step's verdict, 0 for the other verdicts.", gauge},
	"kvbench_replay_expected_verdict":       {"1 for each verdict a gate of the scenario expects of the replay step (no series: no gate names one).", gauge},
	"kvbench_cached_prompt_tokens_ratio":    {"Cached prompt tokens over prompt tokens of the replay.", gauge},
	"kvbench_offload_load_bytes":            {"CPU->GPU bytes the offload connector loaded during the step.", gauge},
	"kvbench_offload_load_duration_seconds": {"Time the offload connector spent loading CPU->GPU during the step.", gauge},
	"kvbench_offload_store_bytes":           {"GPU->CPU bytes the offload connector stored during the step.", gauge},
	"kvbench_sampled_peak_kv_usage_ratio":   {"Peak KV-cache block usage sampled during the step.", gauge},
	"kvbench_failed_requests":               {"Requests of the step that failed or gave no visible answer.", gauge},
	"kvbench_offload_load_bytes_per_token":  {"CPU->GPU bytes per externally hit token, measured over the run.", gauge},
	"kvbench_offload_store_bytes_per_token": {"GPU->CPU bytes per computed token, measured over the run.", gauge},

	// Per request: only with --per-request-series (a trace has thousands of requests).
	"kvbench_time_to_first_output_seconds":        {"Time from sending the request to its first generated token (--per-request-series).", gauge},
	"kvbench_end_to_end_seconds":                  {"Time from sending the request to its last generated text (--per-request-series).", gauge},
	"kvbench_decode_tokens_per_second":            {"Output tokens per second after the first one (--per-request-series).", gauge},
	"kvbench_effective_prefill_tokens_per_second": {"Prompt tokens over the time to first output (--per-request-series).", gauge},

	// Per step: the step's requests (of the first repetition) as quantiles 0.5, 0.9 and 0.99.
	"kvbench_step_time_to_first_output_seconds": {"Time to first output over the step's requests (quantile 0.5, 0.9 and 0.99).", summary},
	"kvbench_step_decode_tokens_per_second":     {"Decode rate over the step's requests (quantile 0.5, 0.9 and 0.99).", summary},

	// Per replay: what its reload paid and whether it changed the answer.
	"kvbench_offload_gain_ttft_ratio":            {"The cold twin's time to first output over the replay's: above 1 the reload beat recomputing.", gauge},
	"kvbench_offload_gain_prefill_saved_seconds": {"The cold twin's time to first output less the replay's.", gauge},
	"kvbench_reload_output_identical":            {"1 when the replay's output is its original's (on the basis label: token ids or text), 0 when it differs.", gauge},
	"kvbench_reload_output_first_divergence":     {"Index (token or byte, per the basis label) of the first difference between the replay's output and its original's.", gauge},
	"kvbench_warm_cache_requests":                {"Requests of the step that came back cached beyond what the run could have cached (no series: none did).", gauge},
	"kvbench_warm_cache_cached_tokens":           {"Prompt tokens cached beyond what the run could have cached, over the step's warm requests.", gauge},
	"kvbench_tier_share_ratio":                   {"Share of the step's prompt tokens served by each tier (gpu, host, recompute): kind measured from the counters, or ideal from replaying the trace through LRU tiers of the server's sizes.", gauge},

	"kvbench_sweep_timestamp_seconds":                      {"When the capacity sweep was observed, in Unix seconds.", gauge},
	"kvbench_sweep_capacity_users":                         {"The highest user count whose TTFT p90 kept within the sweep's threshold with no failed request (no series: no capacity decided).", gauge},
	"kvbench_sweep_capacity_requests_per_second":           {"A request-rate sweep's capacity: the highest offered rate within its threshold.", gauge},
	"kvbench_sweep_level_time_to_first_output_p90_seconds": {"The sweep level's time to first output, 90th percentile over its requests.", gauge},
	"kvbench_sweep_level_within_threshold":                 {"1 when the sweep level completed with no failed request and its TTFT p90 within the threshold, 0 when not (no series: no threshold).", gauge},
	"kvbench_sweep_level_failed_requests":                  {"Requests of the sweep level that failed.", gauge},

	"kvbench_compare_regressions":       {"Regressions kvbench compare found in the candidate run against the baseline (0: none).", gauge},
	"kvbench_compare_regressed":         {"1 when the compared metric (or the replay's verdict) regressed, 0 when it did not.", gauge},
	"kvbench_compare_relative_change":   {"The metric's change from the baseline's median to the candidate's, over the baseline's.", gauge},
	"kvbench_compare_server_changed":    {"1 for each server setting (run.json field) the baseline and the candidate differ in.", gauge},
	"kvbench_compare_timestamp_seconds": {"When the compared candidate run was observed, in Unix seconds.", gauge},

	"kvbench_repeats_repetitions":                         {"Repetitions the run made of its steps.", gauge},
	"kvbench_repeats_verdicts_agree":                      {"1 when every replay reached the same verdict in every repetition.", gauge},
	"kvbench_repeats_verdict_repetitions":                 {"Repetitions in which the replay step reached the verdict.", gauge},
	"kvbench_repeats_time_to_first_output_seconds":        {"Time to first output across repetitions (quantile 0, 0.5 and 1).", summary},
	"kvbench_repeats_time_to_first_output_spread_seconds": {"Max minus min time to first output across repetitions.", gauge},
	"kvbench_repeats_decode_tokens_per_second":            {"Decode rate across repetitions (quantile 0, 0.5 and 1).", summary},
	"kvbench_repeats_decode_spread_tokens_per_second":     {"Max minus min decode rate across repetitions.", gauge},
	"kvbench_repeats_cached_prompt_tokens_ratio":          {"Cached fraction across repetitions (quantile 0, 0.5 and 1).", summary},
	"kvbench_repeats_cached_prompt_tokens_spread_ratio":   {"Max minus min cached fraction across repetitions.", gauge},
	"kvbench_repeats_offload_load_bytes_per_token":        {"CPU->GPU bytes per hit token across repetitions (quantile 0, 0.5 and 1).", summary},
	"kvbench_repeats_offload_load_bytes_per_token_spread": {"Max minus min CPU->GPU bytes per hit token across repetitions.", gauge},
}

// Renamed maps the names earlier kvbench versions exported to today's: promtool's lint
// refuses a _count suffix on a gauge, and a ratio's name ends in _ratio. No old name is
// pushed any more; a query over pushes of both versions reads "new or old", e.g.
// kvbench_repeats_repetitions or kvbench_repeats_count.
var Renamed = map[string]string{
	"kvbench_repeats_count":                  "kvbench_repeats_repetitions",
	"kvbench_repeats_verdict_count":          "kvbench_repeats_verdict_repetitions",
	"kvbench_cached_fraction":                "kvbench_cached_prompt_tokens_ratio",
	"kvbench_repeats_cached_fraction":        "kvbench_repeats_cached_prompt_tokens_ratio",
	"kvbench_repeats_cached_fraction_spread": "kvbench_repeats_cached_prompt_tokens_spread_ratio",
}

// Names lists every series name kvbench exports, a summary's _sum and _count included.
func Names() []string {
	var out []string
	for name, f := range catalog {
		out = append(out, name)
		if f.typ == summary {
			out = append(out, name+"_sum", name+"_count")
		}
	}
	sort.Strings(out)
	return out
}

// verdicts are the values kvbench_replay_verdict enumerates: every verdict word.
var verdicts = func() []string {
	var out []string
	for _, v := range verdict.All {
		out = append(out, string(v))
	}
	return out
}()

// runStatuses are the values kvbench_run_status enumerates: every status a loaded run can
// have, so an alert on any of them finds its series (at 0) on a healthy run too.
var runStatuses = []string{record.StatusCompleted, record.StatusFailed, record.StatusInterrupted, record.StatusIncomplete}

// Families returns r's series as metric families sorted by name, per step and per replay;
// every series also carries the labels in extra (the identity, for a file; none for a push,
// whose grouping key adds them).
func Families(r *runs.Run, extra []Label) ([]*dto.MetricFamily, error) {
	return families(r, extra, false)
}

// PerRequestFamilies is Families plus a series per request (--per-request-series): a trace of
// thousands of requests pushes thousands of series.
func PerRequestFamilies(r *runs.Run, extra []Label) ([]*dto.MetricFamily, error) {
	return families(r, extra, true)
}

// FamiliesFor returns PerRequestFamilies when perRequest is set, Families otherwise.
func FamiliesFor(r *runs.Run, extra []Label, perRequest bool) ([]*dto.MetricFamily, error) {
	return families(r, extra, perRequest)
}

func families(r *runs.Run, extra []Label, perRequest bool) ([]*dto.MetricFamily, error) {
	b := &builder{fams: map[string]*dto.MetricFamily{}, extra: extra}
	b.run(r)
	for _, s := range r.Sections {
		b.section(s)
	}
	for _, st := range r.Repetitions[0].Steps {
		b.stepQuantiles(st)
		if perRequest {
			b.requests(st)
		}
	}
	b.gates(r.Gates)
	b.expectedVerdicts(r)
	if len(r.Repetitions) > 1 {
		b.repeats(r, perRequest)
	}
	if b.err != nil {
		return nil, b.err
	}
	return b.sorted(), nil
}

func (b *builder) run(r *runs.Run) {
	model := r.Model.Repo
	if model == "" {
		model = r.Model.ServedName
	}
	one := 1.0
	b.gauge("kvbench_run_info", &one, "version", r.Kvbench.Version, "model", model, "engine", r.Runtime.Engine)
	b.enum("kvbench_run_status", "status", runStatuses, r.Status)
	if t, err := time.Parse(time.RFC3339, r.ObservedAt); err == nil {
		b.gauge("kvbench_run_timestamp_seconds", ptr(float64(t.Unix())))
	}
	b.gauge("kvbench_offload_store_bytes_per_token", r.Cache.StoreBytesPerTokenMeasured)
	b.gauge("kvbench_offload_load_bytes_per_token", r.Cache.LoadBytesPerTokenMeasured)
}

func (b *builder) section(s record.Section) {
	step := []string{"step", s.Step}
	if rp := s.Replay; rp != nil {
		if rp.Verdict != "" {
			b.enum("kvbench_replay_verdict", "verdict", verdicts, string(rp.Verdict), step...)
		}
		b.gauge("kvbench_cached_prompt_tokens_ratio", rp.CachedFraction, step...)
		b.gauge("kvbench_offload_load_bytes", rp.CPUToGPUBytesDelta, step...)
		b.gauge("kvbench_offload_load_duration_seconds", rp.CPUToGPUSecondsDelta, step...)
		b.gauge("kvbench_offload_store_bytes", rp.GPUToCPUBytesDelta, step...)
		b.gauge("kvbench_sampled_peak_kv_usage_ratio", rp.PeakBlockOccupancy, step...)
		if g := rp.OffloadGain; g != nil {
			b.gauge("kvbench_offload_gain_ttft_ratio", g.TTFTRatio, step...)
			b.gauge("kvbench_offload_gain_prefill_saved_seconds", g.PrefillSecondsSaved, step...)
		}
		if f := rp.ReloadFidelity; f != nil && f.Identical != nil {
			basis := append(append([]string{}, step...), "basis", f.Basis)
			b.gauge("kvbench_reload_output_identical", ptr(boolValue(*f.Identical)), basis...)
			if f.FirstDivergence != nil {
				b.gauge("kvbench_reload_output_first_divergence", ptr(float64(*f.FirstDivergence)), basis...)
			}
		}
		return
	}
	if sq := s.Sequence; sq != nil {
		b.gauge("kvbench_offload_store_bytes", sq.GPUToCPUBytesDelta, step...)
		b.gauge("kvbench_sampled_peak_kv_usage_ratio", sq.PeakBlockOccupancy, step...)
		b.gauge("kvbench_failed_requests", ptr(float64(len(sq.FailedRequestIndices))), step...)
		b.warm(sq.WarmCaches, step)
	}
	if tr := s.Trace; tr != nil {
		b.gauge("kvbench_failed_requests", ptr(float64(tr.FailedRequests)), step...)
		b.tiers(tr.Tiers.GPU, tr.Tiers.Host, tr.Tiers.Recompute, "measured", step)
		if id := tr.Ideal; id != nil {
			b.tiers(&id.GPUShare, &id.HostShare, &id.RecomputeShare, "ideal", step)
		}
		b.warm(tr.WarmCaches, step)
	}
	if cv := s.Conversation; cv != nil {
		b.tiers(cv.Tiers.GPU, cv.Tiers.Host, cv.Tiers.Recompute, "measured", step)
	}
}

// tiers adds the step's share of prompt tokens per tier; a share the counters could not
// give has no series.
func (b *builder) tiers(gpu, host, recompute *float64, kind string, step []string) {
	for tier, v := range map[string]*float64{"gpu": gpu, "host": host, "recompute": recompute} {
		b.gauge("kvbench_tier_share_ratio", v, append(append([]string{}, step...), "tier", tier, "kind", kind)...)
	}
}

// warm adds the warm-caches finding of a step that has one.
func (b *builder) warm(w *record.WarmCaches, step []string) {
	if w == nil {
		return
	}
	b.gauge("kvbench_warm_cache_requests", ptr(float64(w.Requests)), step...)
	b.gauge("kvbench_warm_cache_cached_tokens", ptr(w.CachedBeyondReusable), step...)
}

// stepQuantiles adds the step's time to first output and decode rate over its requests.
func (b *builder) stepQuantiles(st derive.Step) {
	var ttft, decode []*float64
	for _, q := range st.Requests {
		ttft = append(ttft, seconds(q.Result.TimeToFirstOutputMS))
		decode = append(decode, q.Result.DecodeTokensPerSecond)
	}
	step := []string{"step", st.Step}
	b.quantiles("kvbench_step_time_to_first_output_seconds", ttft, step...)
	b.quantiles("kvbench_step_decode_tokens_per_second", decode, step...)
}

// quantiles adds a summary of values at quantiles 0.5, 0.9 and 0.99 (nearest rank);
// nothing when no value was measured.
func (b *builder) quantiles(name string, values []*float64, kv ...string) {
	var vs []float64
	sum := 0.0
	for _, v := range values {
		if v != nil && !math.IsNaN(*v) && !math.IsInf(*v, 0) {
			vs = append(vs, *v)
			sum += *v
		}
	}
	if len(vs) == 0 {
		return
	}
	sort.Float64s(vs)
	var qs []*dto.Quantile
	for _, q := range []float64{0.5, 0.9, 0.99} {
		qs = append(qs, &dto.Quantile{Quantile: ptr(q), Value: ptr(stats.NearestRank(vs, q))})
	}
	f := b.family(name)
	f.Metric = append(f.Metric, &dto.Metric{Label: b.labels(kv), Summary: &dto.Summary{
		SampleCount: ptr(uint64(len(vs))), SampleSum: &sum, Quantile: qs,
	}})
}

func boolValue(v bool) float64 {
	if v {
		return 1
	}
	return 0
}

func (b *builder) requests(st derive.Step) {
	for _, q := range st.Requests {
		l := []string{"step", st.Step, "request", strconv.Itoa(q.IndexInStep)}
		res := q.Result
		b.gauge("kvbench_time_to_first_output_seconds", seconds(res.TimeToFirstOutputMS), l...)
		b.gauge("kvbench_end_to_end_seconds", seconds(res.EndToEndMS), l...)
		b.gauge("kvbench_decode_tokens_per_second", res.DecodeTokensPerSecond, l...)
		b.gauge("kvbench_effective_prefill_tokens_per_second", res.EffectivePrefillTokensPerSecond, l...)
	}
}

func (b *builder) gates(gates []record.GateResult) {
	ids := GateIDs(gates)
	for i, g := range gates {
		b.gauge("kvbench_gate_passed", ptr(boolValue(g.Passed)), "step", g.Gate.Step, "gate", ids[i])
	}
}

// expectedVerdicts exports the verdicts the scenario's gates expect of each replay step, read
// from the scenario the run record holds: an alert compares the verdict seen with these, so
// a control whose gate expects gpu_hit is healthy when its replay is a GPU hit.
func (b *builder) expectedVerdicts(r *runs.Run) {
	if r.Scenario == nil {
		return
	}
	seen := map[[2]string]bool{}
	for _, g := range r.Scenario.Gates {
		key := [2]string{g.Step, string(g.Verdict)}
		if g.Verdict == "" || seen[key] {
			continue
		}
		seen[key] = true
		b.gauge("kvbench_replay_expected_verdict", ptr(1.0), "step", g.Step, "verdict", string(g.Verdict))
	}
}

// GateIDs names each gate by its step and the names of its conditions, not their values
// ("replay/verdict", "replay/min_cached_fraction+verdict"): a bounded label that stays the
// same when a threshold is tuned. A second gate with the same id gets "#2", and so on. The
// gate's text (its thresholds and reason) is in the run record, not in a series.
func GateIDs(gates []record.GateResult) []string {
	out := make([]string, len(gates))
	seen := map[string]int{}
	for i, g := range gates {
		id := GateID(g.Gate)
		seen[id]++
		if n := seen[id]; n > 1 {
			id += "#" + strconv.Itoa(n)
		}
		out[i] = id
	}
	return out
}

// GateID is gate g's id before duplicates are numbered: its step, "/" and its condition
// names sorted and joined by "+".
func GateID(g scenarios.Gate) string {
	data, err := json.Marshal(g)
	if err != nil {
		return g.Step
	}
	var fields map[string]any
	if err := json.Unmarshal(data, &fields); err != nil {
		return g.Step
	}
	var conds []string
	for k := range fields {
		if k != "step" && k != "implicit" {
			conds = append(conds, k)
		}
	}
	sort.Strings(conds)
	return g.Step + "/" + strings.Join(conds, "+")
}

// repeated are the per-request measurements summarized across repetitions: the record's
// metric, the summary's name, its spread gauge's name, and the factor to its unit.
var repeated = []struct {
	metric, name, spread string
	scale                float64
}{
	{"time_to_first_output_ms", "kvbench_repeats_time_to_first_output_seconds", "kvbench_repeats_time_to_first_output_spread_seconds", 1e-3},
	{"decode_tokens_per_second", "kvbench_repeats_decode_tokens_per_second", "kvbench_repeats_decode_spread_tokens_per_second", 1},
	{"cached_fraction", "kvbench_repeats_cached_prompt_tokens_ratio", "kvbench_repeats_cached_prompt_tokens_spread_ratio", 1},
	{"load_bytes_per_token", "kvbench_repeats_offload_load_bytes_per_token", "kvbench_repeats_offload_load_bytes_per_token_spread", 1},
}

// repeats adds the run's spread across repetitions: per step (the values of every request of
// the step, across repetitions), or per request with perRequest.
func (b *builder) repeats(r *runs.Run, perRequest bool) {
	b.gauge("kvbench_repeats_repetitions", ptr(float64(len(r.Repetitions))))
	agree := 1.0
	for _, id := range r.ReplayStepIDs() {
		counts := map[string]float64{}
		vs := r.Verdicts(id)
		for _, v := range vs {
			counts[string(v)]++
			if v != vs[0] {
				agree = 0
			}
		}
		names := verdicts
		for v := range counts {
			if !contains(names, v) {
				names = append(append([]string{}, names...), v)
			}
		}
		for _, v := range names {
			b.gauge("kvbench_repeats_verdict_repetitions", ptr(counts[v]), "step", id, "verdict", v)
		}
	}
	b.gauge("kvbench_repeats_verdicts_agree", &agree)
	for _, st := range r.Repetitions[0].Steps {
		pooled := make([][]*float64, len(repeated))
		for i, q := range st.Requests {
			l := []string{"step", st.Step, "request", strconv.Itoa(q.IndexInStep)}
			for j, m := range repeated {
				vs := r.RequestValues(st.Step, i, m.metric)
				pooled[j] = append(pooled[j], vs...)
				if perRequest {
					s := stats.Summarize(vs)
					b.summary(m.name, s, m.scale, l...)
					b.gauge(m.spread, scaled(s.Spread, m.scale), l...)
				}
			}
		}
		if perRequest {
			continue
		}
		for j, m := range repeated {
			s := stats.Summarize(pooled[j])
			b.summary(m.name, s, m.scale, "step", st.Step)
			b.gauge(m.spread, scaled(s.Spread, m.scale), "step", st.Step)
		}
	}
}

// builder collects series by family.
type builder struct {
	fams  map[string]*dto.MetricFamily
	extra []Label
	err   error
}

func (b *builder) family(name string) *dto.MetricFamily {
	f, ok := b.fams[name]
	if ok {
		return f
	}
	c, ok := catalog[name]
	if !ok && b.err == nil {
		b.err = fmt.Errorf("metric %s is not in the export catalog", name)
	}
	f = &dto.MetricFamily{Name: ptr(name), Help: ptr(c.help), Type: c.typ.Enum()}
	b.fams[name] = f
	return f
}

func (b *builder) labels(kv []string) []*dto.LabelPair {
	var out []*dto.LabelPair
	for _, l := range b.extra {
		out = append(out, &dto.LabelPair{Name: ptr(l.Name), Value: ptr(l.Value)})
	}
	for i := 0; i+1 < len(kv); i += 2 {
		out = append(out, &dto.LabelPair{Name: ptr(kv[i]), Value: ptr(kv[i+1])})
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

// gauge adds one sample; a nil or non-finite value adds nothing.
func (b *builder) gauge(name string, v *float64, kv ...string) {
	if v == nil || math.IsNaN(*v) || math.IsInf(*v, 0) {
		return
	}
	f := b.family(name)
	f.Metric = append(f.Metric, &dto.Metric{Label: b.labels(kv), Gauge: &dto.Gauge{Value: ptr(*v)}})
}

// enum adds one 0/1 sample per value of label, 1 for seen; a seen value outside values is
// added too, so nothing the record says is dropped.
func (b *builder) enum(name, label string, values []string, seen string, kv ...string) {
	if !contains(values, seen) {
		values = append(append([]string{}, values...), seen)
	}
	for _, v := range values {
		x := 0.0
		if v == seen {
			x = 1
		}
		b.gauge(name, &x, append(append([]string{}, kv...), label, v)...)
	}
}

// summary adds a summary of s (quantiles 0, 0.5 and 1, the count of measured values and
// their sum), scaled; nothing when no repetition measured the value.
func (b *builder) summary(name string, s stats.Summary, scale float64, kv ...string) {
	if s.N == 0 {
		return
	}
	sum := 0.0
	for _, v := range s.Values {
		sum += v * scale
	}
	qs := []*dto.Quantile{
		{Quantile: ptr(0.0), Value: scaled(s.Min, scale)},
		{Quantile: ptr(0.5), Value: scaled(s.Median, scale)},
		{Quantile: ptr(1.0), Value: scaled(s.Max, scale)},
	}
	f := b.family(name)
	f.Metric = append(f.Metric, &dto.Metric{Label: b.labels(kv), Summary: &dto.Summary{
		SampleCount: ptr(uint64(s.N)), SampleSum: &sum, Quantile: qs,
	}})
}

func (b *builder) sorted() []*dto.MetricFamily {
	out := make([]*dto.MetricFamily, 0, len(b.fams))
	for _, f := range b.fams {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out
}

func contains(list []string, s string) bool {
	for _, v := range list {
		if v == s {
			return true
		}
	}
	return false
}

func seconds(ms *float64) *float64 { return scaled(ms, 1e-3) }

func scaled(v *float64, k float64) *float64 {
	if v == nil {
		return nil
	}
	x := *v * k
	return &x
}

func ptr[T any](v T) *T { return &v }

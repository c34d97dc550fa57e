// Package report renders one or more loaded runs as a single self-contained HTML page: two
// runs of one scenario with their comparison, runs of different scenarios (a study: a
// primary run and its controls) side by side. Everything is inline: CSS, SVG drawn here in
// Go and a few lines of JS, nothing fetched at view time. The charts' numbers are also
// embedded as JSON (<script type="application/json" id="kvbench-data">) so a test, or a
// reader, can check exactly what was drawn.
package report

import (
	"bytes"
	"errors"
	"fmt"
	"html/template"
	"io"
	"sort"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Kind is what a report shows of its runs.
type Kind string

const (
	// KindRuns: one run, or several of one scenario, each on its own.
	KindRuns Kind = "runs"
	// KindComparison: two runs of one scenario, baseline then candidate, with their comparison.
	KindComparison Kind = "comparison"
	// KindStudy: runs of different scenarios (a primary run and its controls), side by side.
	// They measured different setups on purpose: comparing them would call every difference
	// a regression.
	KindStudy Kind = "study"
	// KindSweep: the levels of one or more sweeps, with each sweep's capacity table; levels
	// differ in load on purpose, so they are not compared either.
	KindSweep Kind = "sweep"
)

// KindOf decides what a report of rs shows.
func KindOf(rs []*runs.Run) Kind {
	for _, r := range rs[min(1, len(rs)):] {
		if r.Scenario.Name != rs[0].Scenario.Name {
			return KindStudy
		}
	}
	if len(rs) == 2 {
		return KindComparison
	}
	return KindRuns
}

// Build collects the page data of rs: it decides the kind (KindOf) and, for a comparison,
// compares the second run with the first. An empty title is made from the scenario names.
func Build(title, generated string, rs []*runs.Run, opts compare.Options) (Data, error) {
	return BuildSweeps(title, generated, rs, nil, opts)
}

// BuildSweeps is Build for a page that also shows sweeps: with any sweep the page is a
// sweep's (KindSweep), its levels (rs) shown each on its own.
func BuildSweeps(title, generated string, rs []*runs.Run, sweeps []*record.Sweep, opts compare.Options) (Data, error) {
	if len(rs) == 0 {
		return Data{}, fmt.Errorf("report: no run")
	}
	kind := KindOf(rs)
	if len(sweeps) > 0 {
		kind = KindSweep
	}
	var cmp *compare.Result
	if kind == KindComparison {
		var err error
		if cmp, err = compare.Compare(rs[0], rs[1], opts); err != nil {
			return Data{}, err
		}
	}
	if title == "" {
		var names []string
		for _, r := range rs {
			names = append(names, r.Scenario.Name)
		}
		switch kind {
		case KindSweep:
			var ss []string
			for _, sw := range sweeps {
				ss = append(ss, sw.Scenario+" "+sw.Step)
			}
			title = "kvbench sweep: " + strings.Join(ss, ", ")
		case KindComparison:
			title = "kvbench report: " + strings.Join(names, " vs ")
		case KindStudy:
			title = "kvbench study: " + strings.Join(names, ", ")
		default:
			title = "kvbench report: " + strings.Join(names, ", ")
		}
	}
	d := Collect(title, generated, rs, cmp)
	if len(sweeps) > 0 {
		d.Kind = KindSweep
		for _, sw := range sweeps {
			d.Sweeps = append(d.Sweeps, *sw)
		}
	}
	return d, nil
}

// LoadDirs loads the runs of dirs for a page: a sweep's directory stands for its levels' runs,
// and its record comes back for its capacity table.
func LoadDirs(dirs []string) ([]*runs.Run, []*record.Sweep, error) {
	dirs, sweeps, err := runs.ExpandDirs(dirs)
	if err != nil {
		return nil, nil, err
	}
	rs, err := runs.LoadAll(dirs)
	return rs, sweeps, err
}

// ErrNotCompared means a report of two runs of one scenario could not compare them: its
// page shows the candidate alone with the reason at the top.
var ErrNotCompared = errors.New("report: the runs do not compare")

// Page renders the page of rs, generated at now. A report shows what differs rather than
// refusing: two runs of one scenario are compared with tolerance even when their models or
// prompts differ or one did not finish, and the page lists each such difference. Runs that
// still do not compare (one measured warm caches) get the candidate's page with the reason
// at the top: it comes back with an error wrapping ErrNotCompared, so a nightly has a page
// for the night that needs one and still fails.
//
// sweeps are the sweep records among the directories (rs holds their levels' runs).
func Page(title string, rs []*runs.Run, sweeps []*record.Sweep, tolerance float64, now time.Time) ([]byte, error) {
	generated := now.UTC().Format(time.RFC3339)
	data, err := BuildSweeps(title, generated, rs, sweeps, compare.Options{Tolerance: tolerance, AllowMismatch: true, AllowIncomplete: true})
	var notCompared error
	if err != nil && KindOf(rs) == KindComparison {
		notCompared = fmt.Errorf("%w: %w; the page shows the candidate alone", ErrNotCompared, err)
		if title == "" {
			title = fmt.Sprintf("kvbench report: %s (not compared with %s)", rs[1].Scenario.Name, rs[0].Dir)
		}
		data = Collect(title, generated, rs[1:], nil)
		data.NotCompared = fmt.Sprintf("not compared with the baseline %s: %v", rs[0].Dir, err)
		data.Answer = answerOf(data, rs[1:])
	} else if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := Render(&buf, data); err != nil {
		return nil, fmt.Errorf("rendering the report: %w", err)
	}
	return buf.Bytes(), notCompared
}

// Data is everything the page shows; it is embedded in the page as JSON.
type Data struct {
	Title      string          `json:"title"`
	Generated  string          `json:"generated"`
	Kind       Kind            `json:"kind"`
	Runs       []RunData       `json:"runs"`
	Comparison *compare.Result `json:"comparison,omitempty"`
	// NotCompared says why two runs of one scenario were not compared; the page then shows
	// the candidate alone.
	NotCompared string `json:"not_compared,omitempty"`
	// Answer is the banner at the top: PASS or FAIL, every gate, and why.
	Answer *Answer `json:"answer"`
	// Sweeps are a sweep page's sweep records, each shown as its capacity table.
	Sweeps []record.Sweep `json:"sweeps,omitempty"`
}

// RunData is one run's identity, verdicts and chart data (repetition 0, the run's record).
type RunData struct {
	Dir         string  `json:"dir"`
	Scenario    string  `json:"scenario"`
	ObservedAt  string  `json:"observed_at"`
	Status      string  `json:"status"`
	Model       string  `json:"model"`
	Engine      string  `json:"engine"`
	Recipe      string  `json:"recipe"`
	GPUKVTokens int     `json:"gpu_kv_cache_tokens"`
	CPUOffload  float64 `json:"cpu_offload_gib"`
	Repetitions int     `json:"repetitions"`
	// StudyRole is the scenario's study role ("primary", "control"; empty outside a study).
	StudyRole string `json:"study_role,omitempty"`
	// StudyKey and Control are a control run's section, computed from its artifacts.
	StudyKey string                 `json:"study_key,omitempty"`
	Control  *record.ControlSection `json:"control,omitempty"`
	Verdicts []VerdictRow           `json:"verdicts"`
	// StepTTFT is each step's TTFT p50/p90/p99; Traces each trace step's tier split.
	StepTTFT []StepTTFT     `json:"step_ttft"`
	Traces   []TraceSplit   `json:"traces,omitempty"`
	Requests []RequestPoint `json:"requests"`
	Steps    []StepBytes    `json:"steps"`
	KVUsage  []UsagePoint   `json:"kv_usage"`
	// Conversations are the run's conversation steps (conversation.go).
	Conversations []ConversationData `json:"conversations,omitempty"`
	// Curves are the run's reload curves (curve.go).
	Curves []CurveData `json:"reload_curves,omitempty"`
}

// VerdictRow is one replay's verdict, across repetitions when repeated.
type VerdictRow struct {
	Step           string   `json:"step"`
	Verdict        string   `json:"verdict"`
	Repetitions    []string `json:"repetitions"`
	Agree          bool     `json:"agree"`
	Reason         string   `json:"reason"`
	SetupValid     string   `json:"setup_valid"`
	CachedFraction *float64 `json:"cached_fraction"`
	Interpretation string   `json:"interpretation"`
	SetupReason    string   `json:"setup_reason,omitempty"`
	// Gain, Fidelity and Bandwidth say the replay's offload gain over its cold twin, its
	// reload fidelity and its reload bandwidth in words; GainRatio is the twin's TTFT over
	// the replay's (null: not measured).
	GainRatio *float64 `json:"offload_gain_ttft_ratio"`
	Gain      string   `json:"offload_gain"`
	Fidelity  string   `json:"reload_fidelity"`
	Bandwidth string   `json:"reload_bandwidth"`
}

// RequestPoint is one request of the TTFT and cached-fraction charts.
type RequestPoint struct {
	Label          string   `json:"label"`
	Step           string   `json:"step"`
	Index          int      `json:"index_in_step"`
	Replay         bool     `json:"replay"`
	TTFTMS         *float64 `json:"time_to_first_output_ms"`
	CachedFraction *float64 `json:"cached_fraction"`
}

// StepBytes is one step of the store/load bytes chart.
type StepBytes struct {
	Step       string   `json:"step"`
	StoreBytes *float64 `json:"gpu_to_cpu_bytes_delta"`
	LoadBytes  *float64 `json:"cpu_to_gpu_bytes_delta"`
}

// UsagePoint is one KV usage sample, ms since the run started.
type UsagePoint struct {
	TMS     float64 `json:"t_ms"`
	KVUsage float64 `json:"kv_usage"`
}

// Collect builds the page data from loaded runs; cmp is their comparison (nil for none).
func Collect(title, generated string, rs []*runs.Run, cmp *compare.Result) Data {
	d := Data{Title: title, Generated: generated, Kind: KindOf(rs), Comparison: cmp}
	for i, r := range rs {
		rd := runData(r)
		rd.Conversations = conversationData(i, r.Sections)
		rd.Curves = curveData(i, r.Curves)
		d.Runs = append(d.Runs, rd)
	}
	d.Answer = answerOf(d, rs)
	return d
}

func runData(r *runs.Run) RunData {
	id := r.Identify()
	rd := RunData{
		Dir: r.Dir, Scenario: r.Scenario.Name, ObservedAt: r.ObservedAt, Status: r.Status, Model: id.Model,
		Engine: r.Runtime.Engine, Recipe: r.Runtime.Recipe, GPUKVTokens: r.Cache.GPUKVCacheTokens, CPUOffload: r.Cache.CPUOffloadGiB,
		Repetitions: len(r.Repetitions), StudyRole: r.Scenario.Study.Role,
		Verdicts: []VerdictRow{}, Requests: []RequestPoint{}, Steps: []StepBytes{}, KVUsage: []UsagePoint{},
	}
	if r.Control != nil {
		rd.StudyKey, rd.Control = r.Scenario.Study.Key, r.Control
	}
	for _, id := range r.ReplayStepIDs() {
		sec := r.Replay(id)
		var vs []string
		agree := true
		for _, v := range r.Verdicts(id) {
			vs = append(vs, string(v))
			agree = agree && v == sec.Verdict
		}
		rd.Verdicts = append(rd.Verdicts, VerdictRow{Step: id, Verdict: string(sec.Verdict), Repetitions: vs, Agree: agree, Reason: sec.VerdictReason,
			SetupValid: string(sec.SetupValid), CachedFraction: sec.CachedFraction, Interpretation: sec.Interpretation, SetupReason: sec.SetupReason,
			Gain: sec.OffloadGain.Words(), Fidelity: sec.ReloadFidelity.Words(), Bandwidth: bandwidthWords(sec.ReloadBandwidth)})
		if g := sec.OffloadGain; g != nil {
			rd.Verdicts[len(rd.Verdicts)-1].GainRatio = g.TTFTRatio
		}
	}
	for _, st := range r.Repetitions[0].Steps {
		for _, q := range st.Requests {
			label := fmt.Sprintf("%s[%d]", st.Step, q.IndexInStep)
			if q.ColdTwin != nil {
				label += " cold twin"
			}
			rd.Requests = append(rd.Requests, RequestPoint{
				Label: label, Step: st.Step, Index: q.IndexInStep, Replay: st.Kind == record.KindReplay && q.ColdTwin == nil,
				TTFTMS: q.Result.TimeToFirstOutputMS, CachedFraction: derive.RequestMetrics["cached_fraction"](q),
			})
		}
		sb := StepBytes{Step: st.Step}
		if c := st.Span; c != nil {
			sb.StoreBytes, sb.LoadBytes = c.Delta(metrics.StoreBytes), c.Delta(metrics.LoadBytes)
		}
		rd.Steps = append(rd.Steps, sb)
		for _, s := range st.Sampled.Series {
			if s.KVUsage != nil {
				rd.KVUsage = append(rd.KVUsage, UsagePoint{TMS: s.AtMS, KVUsage: *s.KVUsage})
			}
		}
	}
	rd.StepTTFT, rd.Traces = stepTTFTs(r), traceSplits(r)
	sort.SliceStable(rd.KVUsage, func(i, j int) bool { return rd.KVUsage[i].TMS < rd.KVUsage[j].TMS })
	return rd
}

// chartSet is one run's rendered charts.
type chartSet struct {
	Run                           RunData
	TTFT, Cached, Bytes, KVUsage  template.HTML
	Conversations                 template.HTML
	Curves                        template.HTML
	ChartCount, BarCount, PtCount int
}

// Render writes the page for d.
func Render(w io.Writer, d Data) error {
	var sets []chartSet
	for i, r := range d.Runs {
		var labels []string
		var ttft, cached []*float64
		var replay []bool
		for _, q := range r.Requests {
			labels = append(labels, q.Label)
			ttft, cached, replay = append(ttft, q.TTFTMS), append(cached, q.CachedFraction), append(replay, q.Replay)
		}
		var stepLabels []string
		var store, load []*float64
		for _, s := range r.Steps {
			stepLabels = append(stepLabels, s.Step)
			store, load = append(store, s.StoreBytes), append(load, s.LoadBytes)
		}
		var xs, ys []float64
		for _, p := range r.KVUsage {
			xs, ys = append(xs, p.TMS), append(ys, p.KVUsage)
		}
		ttftChart := barChart(fmt.Sprintf("ttft-%d", i), "Time to first output per request (replay in red)", "ms", labels, []Series{{"ttft", colorBar, ttft}}, replay)
		cachedChart := barChart(fmt.Sprintf("cached-%d", i), "Cached fraction of the prompt per request", "fraction", labels, []Series{{"cached", colorBar, cached}}, replay)
		if len(r.Requests) > maxBars {
			ttftChart = cdfChart(fmt.Sprintf("ttft-%d", i), fmt.Sprintf("Time to first output: distribution per step (%d requests)", len(r.Requests)), "ms",
				requestGroups(r.Requests, func(q RequestPoint) *float64 { return q.TTFTMS }), 0)
			cachedChart = cdfChart(fmt.Sprintf("cached-%d", i), "Cached fraction of the prompt: distribution per step", "",
				requestGroups(r.Requests, func(q RequestPoint) *float64 { return q.CachedFraction }), 1)
		}
		sets = append(sets, chartSet{
			Run:     r,
			TTFT:    ttftChart,
			Cached:  cachedChart,
			Bytes:   barChart(fmt.Sprintf("bytes-%d", i), "KV offload bytes per step", "bytes", stepLabels, []Series{{"store GPU->CPU", colorStore, store}, {"load CPU->GPU", colorLoad, load}}, nil),
			KVUsage: lineChart(fmt.Sprintf("kv-%d", i), "Sampled GPU KV block usage over the run", "usage", xs, ys, 1),
		})
		for _, cd := range r.Conversations {
			sets[len(sets)-1].Conversations += conversationCharts(cd)
		}
		for _, cd := range r.Curves {
			sets[len(sets)-1].Curves += curveChart(cd)
		}
	}
	return page.Execute(w, struct {
		Data
		Sets []chartSet
	}{d, sets})
}

var page = template.Must(template.New("report").Funcs(template.FuncMap{
	"frac": units.Fraction,
	"pct":  units.Share,
	"signed": func(p *float64) string {
		if p == nil {
			return units.NotApplicable // no change to show: not compared
		}
		return units.SignedShare(*p)
	},
	"median":       units.Value,
	"count":        units.Count,
	"deref":        func(p *bool) bool { return *p },
	"deref2":       func(p *int) int { return *p },
	"fixed":        func(v float64) string { return units.Fraction(&v) },
	"curveHeading": curveHeading,
	"replays": func(rs []RunData) bool {
		for _, r := range rs {
			if len(r.Verdicts) > 0 {
				return true
			}
		}
		return false
	},
}).Parse(pageTemplate))

package export

import (
	"bytes"
	"context"
	"errors"
	"io"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"slices"
	"sort"
	"strconv"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// repeatedRun is a run of two repetitions on the embedded engine (cmd/kvbench's compare
// baseline); singleRun is the demo's seed study, one repetition.
const (
	repeatedRun = "../../cmd/kvbench/testdata/compare/baseline"
	singleRun   = "../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z"
)

func load(t *testing.T, dir string) *runs.Run {
	t.Helper()
	r, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// parse writes fams as OpenMetrics and reads them back with the parser node_exporter's
// textfile collector uses.
func parse(t *testing.T, fams []*dto.MetricFamily) (map[string]*dto.MetricFamily, string) {
	t.Helper()
	var buf bytes.Buffer
	if err := WriteOpenMetrics(&buf, fams); err != nil {
		t.Fatal(err)
	}
	text := buf.String()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	got, err := parser.TextToMetricFamilies(strings.NewReader(text))
	if err != nil {
		t.Fatalf("exported text does not parse: %v\n%s", err, text)
	}
	return got, text
}

// sample finds the one sample of name whose labels include want.
func sample(t *testing.T, fams map[string]*dto.MetricFamily, name string, want map[string]string) *dto.Metric {
	t.Helper()
	var found []*dto.Metric
	for _, m := range fams[name].GetMetric() {
		if hasLabels(m, want) {
			found = append(found, m)
		}
	}
	if len(found) != 1 {
		t.Fatalf("%s%v: %d samples, want 1", name, want, len(found))
	}
	return found[0]
}

func hasLabels(m *dto.Metric, want map[string]string) bool {
	n := 0
	for _, l := range m.GetLabel() {
		if v, ok := want[l.GetName()]; ok {
			if v != l.GetValue() {
				return false
			}
			n++
		}
	}
	return n == len(want)
}

func near(a, b float64) bool { return math.Abs(a-b) <= 1e-9*math.Max(1, math.Abs(b)) }

func TestOpenMetricsCarriesTheRecordsValues(t *testing.T) {
	r := load(t, repeatedRun)
	fams, err := Families(r, append(Identity(r), Label{"cluster", "eu1"}))
	if err != nil {
		t.Fatal(err)
	}
	got, text := parse(t, fams)
	if !strings.HasSuffix(text, "# EOF\n") {
		t.Fatalf("no # EOF at the end:\n%s", text[max(0, len(text)-200):])
	}
	for name, f := range got {
		if !slices.Contains(Names(), name) {
			t.Errorf("%s is not in Names()", name)
		}
		for _, m := range f.GetMetric() {
			if !hasLabels(m, map[string]string{"scenario": "nightly-tiny", "endpoint": "127.0.0.1:46493", "cluster": "eu1"}) {
				t.Errorf("%s %v lacks the identity labels", name, m.GetLabel())
			}
		}
	}

	// The replay's verdict: 1 for the record's, 0 for every other.
	sec := r.Run.Replay("replay")
	if sec == nil || sec.Verdict == "" {
		t.Fatal("fixture has no replay verdict")
	}
	ones := 0
	for _, m := range got["kvbench_replay_verdict"].GetMetric() {
		v := m.GetGauge().GetValue()
		isSeen := hasLabels(m, map[string]string{"verdict": string(sec.Verdict)})
		if isSeen && v != 1 || !isSeen && v != 0 {
			t.Errorf("verdict sample %v = %v (record: %s)", m.GetLabel(), v, sec.Verdict)
		}
		ones += int(v)
	}
	if ones != 1 || len(got["kvbench_replay_verdict"].GetMetric()) < len(verdict.All) {
		t.Errorf("verdict enum: %d ones over %d samples", ones, len(got["kvbench_replay_verdict"].GetMetric()))
	}
	if v := sample(t, got, "kvbench_cached_prompt_tokens_ratio", map[string]string{"step": "replay"}).GetGauge().GetValue(); !near(v, *sec.CachedFraction) {
		t.Errorf("cached fraction %v, run.json %v", v, *sec.CachedFraction)
	}
	if v := sample(t, got, "kvbench_offload_load_bytes_per_token", nil).GetGauge().GetValue(); !near(v, *r.Cache.LoadBytesPerTokenMeasured) {
		t.Errorf("load bytes per token %v, run.json %v", v, *r.Cache.LoadBytesPerTokenMeasured)
	}
	at, _ := time.Parse(time.RFC3339, r.ObservedAt)
	if v := sample(t, got, "kvbench_run_timestamp_seconds", nil).GetGauge().GetValue(); v != float64(at.Unix()) {
		t.Errorf("timestamp %v, observed_at %s", v, r.ObservedAt)
	}
	if v := sample(t, got, "kvbench_run_status", map[string]string{"status": "completed"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("status completed = %v", v)
	}

	// By default no series is per request: each step's requests as quantiles, and across
	// repetitions the step's values pooled.
	for name, f := range got {
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "request" }) {
				t.Errorf("%s %v: a request label without --per-request-series", name, m.GetLabel())
			}
		}
	}
	for _, st := range r.Repetitions[0].Steps {
		var ttft []float64
		var pooled []*float64
		for i, q := range st.Requests {
			if ms := q.Result.TimeToFirstOutputMS; ms != nil {
				ttft = append(ttft, *ms/1000)
			}
			pooled = append(pooled, r.RequestValues(st.Step, i, "time_to_first_output_ms")...)
		}
		sort.Float64s(ttft)
		m := sample(t, got, "kvbench_step_time_to_first_output_seconds", map[string]string{"step": st.Step}).GetSummary()
		if m.GetSampleCount() != uint64(len(ttft)) || len(m.GetQuantile()) != 3 {
			t.Errorf("%s: step summary %v, want %d requests", st.Step, m, len(ttft))
		}
		for _, q := range m.GetQuantile() {
			if want := stats.NearestRank(ttft, q.GetQuantile()); !near(q.GetValue(), want) {
				t.Errorf("%s: ttfo p%v = %v, want %v", st.Step, q.GetQuantile()*100, q.GetValue(), want)
			}
		}
		s := stats.Summarize(pooled)
		rm := sample(t, got, "kvbench_repeats_time_to_first_output_seconds", map[string]string{"step": st.Step}).GetSummary()
		if rm.GetSampleCount() != uint64(s.N) || s.N != 2*len(st.Requests) {
			t.Errorf("%s: repeats count %d, want %d (every request of 2 repetitions)", st.Step, rm.GetSampleCount(), s.N)
		}
	}

	// With --per-request-series: every request of repetition 0, in seconds; and its median
	// over the repetitions.
	fams, err = PerRequestFamilies(r, append(Identity(r), Label{"cluster", "eu1"}))
	if err != nil {
		t.Fatal(err)
	}
	got, _ = parse(t, fams)
	n := 0
	for _, st := range r.Repetitions[0].Steps {
		for i, q := range st.Requests {
			l := map[string]string{"step": st.Step, "request": strconv.Itoa(q.IndexInStep)}
			if ms := q.Result.TimeToFirstOutputMS; ms != nil {
				if v := sample(t, got, "kvbench_time_to_first_output_seconds", l).GetGauge().GetValue(); !near(v, *ms/1000) {
					t.Errorf("%v: ttfo %v s, artifact %v ms", l, v, *ms)
				}
				n++
			}
			s := stats.Summarize(r.RequestValues(st.Step, i, "time_to_first_output_ms"))
			m := sample(t, got, "kvbench_repeats_time_to_first_output_seconds", l).GetSummary()
			if m.GetSampleCount() != uint64(s.N) || s.N != 2 {
				t.Errorf("%v: count %d, want %d of 2 repetitions", l, m.GetSampleCount(), s.N)
			}
			for _, q := range m.GetQuantile() {
				if q.GetQuantile() == 0.5 && !near(q.GetValue(), *s.Median/1000) {
					t.Errorf("%v: median %v s, want %v ms", l, q.GetValue(), *s.Median)
				}
			}
			if v := sample(t, got, "kvbench_repeats_time_to_first_output_spread_seconds", l).GetGauge().GetValue(); !near(v, *s.Spread/1000) {
				t.Errorf("%v: spread %v s, want %v ms", l, v, *s.Spread)
			}
		}
	}
	if n != 5 {
		t.Errorf("%d requests with a time to first output, want 5", n)
	}
	if v := sample(t, got, "kvbench_repeats_verdict_repetitions", map[string]string{"step": "replay", "verdict": string(sec.Verdict)}).GetGauge().GetValue(); v != 2 {
		t.Errorf("verdict %s in %v repetitions, want 2 (verdicts %v)", sec.Verdict, v, r.Verdicts("replay"))
	}
}

// TestAbsentIsNotZero: a value the record holds as null has no series at all.
func TestAbsentIsNotZero(t *testing.T) {
	r := load(t, singleRun)
	seq := &r.Repetitions[0].Steps[0]
	seq.Requests[1].Result.TimeToFirstOutputMS = nil
	for i := range r.Repetitions[0].Steps {
		st := &r.Repetitions[0].Steps[i]
		if st.Kind == "replay" {
			st.Requests[0].Result.CachedPromptTokens = nil
		}
	}
	r.Derive(r.Repetitions) // the view is derived from the steps once
	fams, err := PerRequestFamilies(r, Identity(r))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	if _, ok := got["kvbench_cached_prompt_tokens_ratio"]; ok {
		t.Errorf("cached fraction exported though the record has none: %v", got["kvbench_cached_prompt_tokens_ratio"])
	}
	if c := sample(t, got, "kvbench_step_time_to_first_output_seconds", map[string]string{"step": seq.Step}).GetSummary().GetSampleCount(); c != uint64(len(seq.Requests)-1) {
		t.Errorf("step summary counts %d requests, want the %d measured", c, len(seq.Requests)-1)
	}
	for _, m := range got["kvbench_time_to_first_output_seconds"].GetMetric() {
		if hasLabels(m, map[string]string{"step": seq.Step, "request": strconv.Itoa(seq.Requests[1].IndexInStep)}) {
			t.Errorf("absent time to first output exported as %v", m.GetGauge().GetValue())
		}
	}
	if len(got["kvbench_time_to_first_output_seconds"].GetMetric()) != len(seq.Requests) {
		t.Errorf("%d time to first output samples, want the %d measured", len(got["kvbench_time_to_first_output_seconds"].GetMetric()), len(seq.Requests))
	}
	if _, ok := got["kvbench_repeats_repetitions"]; ok {
		t.Error("a single run exports repeats series")
	}
}

func TestGatePassed(t *testing.T) {
	r := load(t, singleRun)
	r.Gates = []record.GateResult{
		{Gate: scenarios.Gate{Step: "replay", Verdict: "cpu_reload"}, Passed: true},
		{Gate: scenarios.Gate{Step: "replay", MinCachedFraction: 0.99}, Passed: false},
		{Gate: scenarios.Gate{Step: "replay", MinCachedFraction: 0.5}, Passed: true},
	}
	fams, err := Families(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	// The gate label is an id (step and condition names), never the thresholds' text.
	if v := sample(t, got, "kvbench_gate_passed", map[string]string{"gate": "replay/verdict"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("passed gate = %v", v)
	}
	if v := sample(t, got, "kvbench_gate_passed", map[string]string{"gate": "replay/min_cached_fraction"}).GetGauge().GetValue(); v != 0 {
		t.Errorf("failed gate = %v", v)
	}
	if v := sample(t, got, "kvbench_gate_passed", map[string]string{"gate": "replay/min_cached_fraction#2"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("second gate of the same conditions = %v", v)
	}
}

func TestMergeRefusesTheSameSeriesTwice(t *testing.T) {
	a, b := load(t, repeatedRun), load(t, singleRun)
	fa, _ := Families(a, Identity(a))
	fb, _ := Families(b, Identity(b))
	merged, err := Merge(fa, fb)
	if err != nil {
		t.Fatalf("runs of two scenarios: %v", err)
	}
	got, _ := parse(t, merged)
	if n := len(got["kvbench_run_timestamp_seconds"].GetMetric()); n != 2 {
		t.Errorf("%d timestamps after merging two runs", n)
	}
	if _, err := Merge(fa, fa); !errors.Is(err, ErrDuplicate) {
		t.Errorf("same run twice: %v, want ErrDuplicate", err)
	}
}

func TestPushReplacesTheRunsGroup(t *testing.T) {
	r := load(t, repeatedRun)
	type request struct {
		method, path, user, pass string
		fams                     []*dto.MetricFamily
	}
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		q := request{method: req.Method, path: req.URL.Path}
		q.user, q.pass, _ = req.BasicAuth()
		dec := expfmt.NewDecoder(req.Body, expfmt.ResponseFormat(req.Header))
		for {
			var f dto.MetricFamily
			if err := dec.Decode(&f); err != nil {
				if !errors.Is(err, io.EOF) {
					t.Errorf("decoding the push: %v", err)
				}
				break
			}
			q.fams = append(q.fams, &f)
		}
		got <- q
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://ci:s3cret@", 1)
	if err := Push(context.Background(), r, PushOptions{URL: u, Labels: []Label{{"cluster", "eu1"}}}); err != nil {
		t.Fatal(err)
	}
	q := <-got
	if q.method != http.MethodPut {
		t.Errorf("method %s, want PUT (replace the group)", q.method)
	}
	for _, part := range []string{"/metrics/job/kvbench/", "/scenario/nightly-tiny", "/endpoint/127.0.0.1:46493", "/cluster/eu1"} {
		if !strings.Contains(q.path, part) {
			t.Errorf("path %s lacks %s", q.path, part)
		}
	}
	if strings.Contains(q.path, "recipe") {
		t.Errorf("path %s has a recipe the run has not", q.path)
	}
	if q.user != "ci" || q.pass != "s3cret" {
		t.Errorf("basic auth %q:%q, want the URL's user info", q.user, q.pass)
	}
	want, _ := Families(r, nil)
	if len(q.fams) != len(want) {
		t.Fatalf("pushed %d families, want %d", len(q.fams), len(want))
	}
	for i, f := range q.fams {
		if f.GetName() != want[i].GetName() || len(f.GetMetric()) != len(want[i].GetMetric()) {
			t.Errorf("pushed %s x%d, want %s x%d", f.GetName(), len(f.GetMetric()), want[i].GetName(), len(want[i].GetMetric()))
		}
	}
}

func TestPushFailureIsRedacted(t *testing.T) {
	r := load(t, singleRun)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, _ *http.Request) {
		http.Error(w, "no space left", http.StatusInternalServerError)
	}))
	defer srv.Close()
	u := strings.Replace(srv.URL, "http://", "http://ci:s3cret@", 1) + "/?token=t0ken"
	err := Push(context.Background(), r, PushOptions{URL: u, Timeout: 10 * time.Second})
	if err == nil {
		t.Fatal("push to a failing gateway succeeded")
	}
	if msg := err.Error(); strings.Contains(msg, "s3cret") || strings.Contains(msg, "t0ken") || !strings.Contains(msg, "500") {
		t.Errorf("error %q: want the status and no credentials", msg)
	}
}

func TestParseLabel(t *testing.T) {
	if l, err := ParseLabel("cluster=eu-1=a"); err != nil || l != (Label{"cluster", "eu-1=a"}) {
		t.Errorf("cluster=eu-1=a: %v %v", l, err)
	}
	for _, bad := range []string{"cluster", "1x=a", "a-b=c", "__name__=x", "job=x", "scenario=x", "quantile=x"} {
		if _, err := ParseLabel(bad); err == nil {
			t.Errorf("%q accepted", bad)
		}
	}
}

// promtool finds Debian's promtool (or KVBENCH_PROMTOOL); without it the test skips, or
// fails when KVBENCH_REQUIRE_PROMETHEUS=1 (as .ci/run sets it).
func promtool(t *testing.T) string {
	t.Helper()
	bin := os.Getenv("KVBENCH_PROMTOOL")
	if bin == "" {
		bin = "/usr/bin/promtool"
	}
	if _, err := os.Stat(bin); err != nil {
		msg := bin + " not found (apt-get install prometheus, or set KVBENCH_PROMTOOL)"
		if os.Getenv("KVBENCH_REQUIRE_PROMETHEUS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	return bin
}

// TestSeriesPassPromtoolLint: every series kvbench exports, a repeated run's and a
// comparison's, passes 'promtool check metrics' (no _count suffix on a gauge, base units,
// help on every family).
func TestSeriesPassPromtoolLint(t *testing.T) {
	bin := promtool(t)
	base, cand := load(t, repeatedRun), load(t, "../../cmd/kvbench/testdata/compare/candidate")
	runFams, err := Families(base, Identity(base))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compare.Compare(base, cand, compare.Options{Tolerance: compare.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	cmpFams, err := CompareFamilies(res, Identity(cand))
	if err != nil {
		t.Fatal(err)
	}
	var text bytes.Buffer
	enc := expfmt.NewEncoder(&text, expfmt.NewFormat(expfmt.TypeTextPlain))
	for _, f := range append(runFams, cmpFams...) {
		if err := enc.Encode(f); err != nil {
			t.Fatal(err)
		}
	}
	cmd := exec.Command(bin, "check", "metrics")
	cmd.Stdin = &text
	if out, err := cmd.CombinedOutput(); err != nil || len(out) > 0 {
		t.Errorf("promtool check metrics: %v\n%s", err, out)
	}
	for old, now := range Renamed {
		if slices.Contains(Names(), old) || !slices.Contains(Names(), now) {
			t.Errorf("%s was renamed %s: Names() has the old name or lacks the new", old, now)
		}
	}
}

// TestRunStatusEnumeratesEveryStatus: a failed run's status series says failed, and every
// status a run can have has its series, so an alert on one finds it at 0 on a healthy run.
func TestRunStatusEnumeratesEveryStatus(t *testing.T) {
	r := load(t, singleRun)
	r.Status = record.StatusFailed
	fams, err := Families(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	for _, status := range []string{record.StatusCompleted, record.StatusFailed, record.StatusInterrupted, record.StatusIncomplete} {
		want := 0.0
		if status == record.StatusFailed {
			want = 1
		}
		if v := sample(t, got, "kvbench_run_status", map[string]string{"status": status}).GetGauge().GetValue(); v != want {
			t.Errorf("status %s = %v, want %v", status, v, want)
		}
	}
}

// TestExpectedVerdictFromTheScenariosGates: the verdict a gate expects of a replay step is a
// series of its own, read from the scenario in run.json, so an alert can tell a control whose
// gate expects gpu_hit from a replay that should have reloaded. No gate, no series.
func TestExpectedVerdictFromTheScenariosGates(t *testing.T) {
	r := load(t, singleRun)
	sc := *r.Scenario
	sc.Gates = []scenarios.Gate{{Step: "replay", Verdict: "gpu_hit"}, {Step: "replay", MinCachedFraction: 0.9}, {Step: "replay", Verdict: "gpu_hit", RequireValidSetup: true}}
	r.Scenario = &sc
	fams, err := Families(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	if n := len(got["kvbench_replay_expected_verdict"].GetMetric()); n != 1 {
		t.Fatalf("%d expected-verdict series, want 1: %v", n, got["kvbench_replay_expected_verdict"])
	}
	if v := sample(t, got, "kvbench_replay_expected_verdict", map[string]string{"step": "replay", "verdict": "gpu_hit"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("expected gpu_hit = %v", v)
	}

	sc.Gates = []scenarios.Gate{{Step: "replay", MinCachedFraction: 0.9}}
	fams, err = Families(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = parse(t, fams)
	if f, ok := got["kvbench_replay_expected_verdict"]; ok {
		t.Errorf("no gate names a verdict, yet %v", f)
	}
}

// TestCompareFamiliesCarryTheComparison: the comparison's series say what compare said: as
// many regressions as findings, the verdict and each regressed metric at 1, the changed CPU
// tier named, and the candidate's time.
func TestCompareFamiliesCarryTheComparison(t *testing.T) {
	base, cand := load(t, repeatedRun), load(t, "../../cmd/kvbench/testdata/compare/candidate")
	res, err := compare.Compare(base, cand, compare.Options{Tolerance: compare.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	// By default one series per step and metric: regressed when any request did.
	fams, err := CompareFamilies(res, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	for _, st := range res.Steps {
		any := map[string]bool{}
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				any[m.Metric] = any[m.Metric] || m.Judgement == stats.Regressed
			}
		}
		for metric, reg := range any {
			for _, m := range got["kvbench_compare_regressed"].GetMetric() {
				if hasLabels(m, map[string]string{"step": st.Step, "metric": metric}) && (m.GetGauge().GetValue() == 1) != reg {
					t.Errorf("%s %s: regressed %v, a request regressed: %v", st.Step, metric, m.GetGauge().GetValue(), reg)
				}
			}
		}
	}
	for name, f := range got {
		for _, m := range f.GetMetric() {
			if slices.ContainsFunc(m.GetLabel(), func(l *dto.LabelPair) bool { return l.GetName() == "request" }) {
				t.Errorf("%s %v: a request label without --per-request-series", name, m.GetLabel())
			}
		}
	}

	fams, err = CompareFamiliesFor(res, []Label{{"cluster", "eu1"}}, true)
	if err != nil {
		t.Fatal(err)
	}
	got, _ = parse(t, fams)
	if v := sample(t, got, "kvbench_compare_regressions", map[string]string{"cluster": "eu1"}).GetGauge().GetValue(); v != float64(len(res.Findings)) || v == 0 {
		t.Errorf("regressions %v, findings %d", v, len(res.Findings))
	}
	if v := sample(t, got, "kvbench_compare_regressed", map[string]string{"step": "replay", "metric": "verdict"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("verdict regressed = %v", v)
	}
	ones := 0
	for _, m := range got["kvbench_compare_regressed"].GetMetric() {
		ones += int(m.GetGauge().GetValue())
	}
	if ones != len(res.Findings) {
		t.Errorf("%d metrics at 1, %d findings", ones, len(res.Findings))
	}
	if v := sample(t, got, "kvbench_compare_server_changed", map[string]string{"field": "cache.cpu_offload_gib"}).GetGauge().GetValue(); v != 1 {
		t.Errorf("changed CPU tier = %v", v)
	}
	ttft := sample(t, got, "kvbench_compare_relative_change", map[string]string{"step": "sequence", "request": "0", "metric": "time_to_first_output_ms"}).GetGauge().GetValue()
	if want := *res.Steps[0].Requests[0].Metrics[0].Relative; !near(ttft, want) {
		t.Errorf("relative change %v, compare %v", ttft, want)
	}
	at, _ := time.Parse(time.RFC3339, cand.ObservedAt)
	if v := sample(t, got, "kvbench_compare_timestamp_seconds", nil).GetGauge().GetValue(); v != float64(at.Unix()) {
		t.Errorf("timestamp %v, candidate observed %s", v, cand.ObservedAt)
	}
}

// TestPushKeepsTheQueryOutOfThePath: a push URL with a query string (a gateway behind a proxy
// that wants a token) sends the group's path as the path and the query as the query, and
// basic auth from the options (a Secret's variables) reaches the gateway.
func TestPushKeepsTheQueryOutOfThePath(t *testing.T) {
	r := load(t, singleRun)
	type request struct{ path, query, user, pass string }
	got := make(chan request, 1)
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, req *http.Request) {
		io.Copy(io.Discard, req.Body)
		q := request{path: req.URL.Path, query: req.URL.RawQuery}
		q.user, q.pass, _ = req.BasicAuth()
		got <- q
		w.WriteHeader(http.StatusOK)
	}))
	defer srv.Close()
	err := Push(context.Background(), r, PushOptions{URL: srv.URL + "/?token=t0ken", Username: "ci", Password: "s3cret"})
	if err != nil {
		t.Fatal(err)
	}
	q := <-got
	if !strings.HasPrefix(q.path, "/metrics/job/kvbench/") || strings.Contains(q.path, "token") {
		t.Errorf("path %q, want /metrics/job/kvbench/... without the query", q.path)
	}
	if q.query != "token=t0ken" {
		t.Errorf("query %q, want token=t0ken", q.query)
	}
	if q.user != "ci" || q.pass != "s3cret" {
		t.Errorf("basic auth %q:%q, want the options'", q.user, q.pass)
	}
}

// richRun is the seed study with what no fixture run has: its replay's offload gain over a
// cold twin and a reload whose output diverged, and a trace step with measured and ideal
// tier shares and warm caches.
func richRun(t *testing.T) *runs.Run {
	t.Helper()
	r := load(t, singleRun)
	f := func(v float64) *float64 { return &v }
	i := func(v int) *int { return &v }
	no := false
	found := false
	for k := range r.Sections {
		if rp := r.Sections[k].Replay; rp != nil {
			rp.OffloadGain = &record.OffloadGain{TTFTRatio: f(4.5), PrefillSecondsSaved: f(1.25)}
			rp.ReloadFidelity = &record.ReloadFidelity{Compared: true, Basis: "token_ids", Identical: &no, FirstDivergence: i(17)}
			found = true
		}
	}
	if !found {
		t.Fatal("the seed study has no replay")
	}
	r.Sections = append(r.Sections, record.Section{Step: "trace", Trace: &record.TraceSection{
		FailedRequests: 2,
		Tiers:          record.TierShares{GPU: f(0.5), Host: f(0.3), Recompute: nil},
		Ideal:          &record.IdealTiers{IdealShares: record.IdealShares{GPUShare: 0.6, HostShare: 0.35, RecomputeShare: 0.05}},
		WarmCaches:     &record.WarmCaches{Requests: 3, Of: 600, CachedBeyondReusable: 4096},
	}})
	return r
}

// TestNewSeriesCarryTheRecordsValues: offload gain, fidelity, tier shares (measured and
// ideal) and warm caches are the record's values; a share the counters did not give has no
// series.
func TestNewSeriesCarryTheRecordsValues(t *testing.T) {
	r := richRun(t)
	fams, err := Families(r, nil)
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	var replay string
	for _, s := range r.Sections {
		if s.Replay != nil {
			replay = s.Step
		}
	}
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvbench_offload_gain_ttft_ratio", map[string]string{"step": replay}, 4.5},
		{"kvbench_offload_gain_prefill_saved_seconds", map[string]string{"step": replay}, 1.25},
		{"kvbench_reload_output_identical", map[string]string{"step": replay, "basis": "token_ids"}, 0},
		{"kvbench_reload_output_first_divergence", map[string]string{"step": replay, "basis": "token_ids"}, 17},
		{"kvbench_tier_share_ratio", map[string]string{"step": "trace", "tier": "gpu", "kind": "measured"}, 0.5},
		{"kvbench_tier_share_ratio", map[string]string{"step": "trace", "tier": "host", "kind": "measured"}, 0.3},
		{"kvbench_tier_share_ratio", map[string]string{"step": "trace", "tier": "recompute", "kind": "ideal"}, 0.05},
		{"kvbench_tier_share_ratio", map[string]string{"step": "trace", "tier": "host", "kind": "ideal"}, 0.35},
		{"kvbench_warm_cache_requests", map[string]string{"step": "trace"}, 3},
		{"kvbench_warm_cache_cached_tokens", map[string]string{"step": "trace"}, 4096},
		{"kvbench_failed_requests", map[string]string{"step": "trace"}, 2},
	} {
		if v := sample(t, got, c.name, c.labels).GetGauge().GetValue(); !near(v, c.want) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	for _, m := range got["kvbench_tier_share_ratio"].GetMetric() {
		if hasLabels(m, map[string]string{"tier": "recompute", "kind": "measured"}) {
			t.Errorf("a measured share the record holds as null is exported as %v", m.GetGauge().GetValue())
		}
	}
	if n := len(got["kvbench_tier_share_ratio"].GetMetric()); n != 5 {
		t.Errorf("%d tier shares, want 5 (2 measured, 3 ideal)", n)
	}
	// The unmodified seed study has none of them.
	plain, _ := Families(load(t, singleRun), nil)
	for _, f := range plain {
		if strings.HasPrefix(f.GetName(), "kvbench_offload_gain") || strings.HasPrefix(f.GetName(), "kvbench_tier_share") || strings.HasPrefix(f.GetName(), "kvbench_warm_cache") {
			t.Errorf("%s exported for a run that did not measure it", f.GetName())
		}
	}
}

// fixtureSweep is a users sweep of three levels with a threshold: capacity at 16 users.
func fixtureSweep() *record.Sweep {
	f := func(v float64) *float64 { return &v }
	yes, no, cap16 := true, false, 16
	return &record.Sweep{
		ObservedAt: "2026-08-03T02:00:00Z", Status: record.StatusCompleted, Scenario: "chat-capacity", Step: "chat",
		TTFTP90ThresholdMS: f(350), CapacityUsers: &cap16,
		Levels: []record.SweepLevel{
			{Users: 8, Requests: 40, TTFTMS: record.Percentiles{N: 40, P90: f(50)}, Tiers: record.TierShares{GPU: f(0.7), Host: f(0.2), Recompute: f(0.1)}, WithinThreshold: &yes},
			{Users: 16, Requests: 80, TTFTMS: record.Percentiles{N: 80, P90: f(100)}, WithinThreshold: &yes},
			{Users: 32, Requests: 160, FailedRequests: 3, TTFTMS: record.Percentiles{N: 157, P90: f(400)}, WithinThreshold: &no},
		},
	}
}

// TestSweepFamilies: a sweep's capacity and each level's TTFT p90, threshold and shares, one
// series per level; a sweep without a decided capacity has no capacity series.
func TestSweepFamilies(t *testing.T) {
	sw := fixtureSweep()
	fams, err := SweepFamilies(sw, SweepIdentity(sw))
	if err != nil {
		t.Fatal(err)
	}
	got, _ := parse(t, fams)
	for _, c := range []struct {
		name   string
		labels map[string]string
		want   float64
	}{
		{"kvbench_sweep_capacity_users", map[string]string{"scenario": "chat-capacity", "step": "chat"}, 16},
		{"kvbench_sweep_timestamp_seconds", nil, 1785722400},
		{"kvbench_sweep_level_time_to_first_output_p90_seconds", map[string]string{"level": "users=32"}, 0.4},
		{"kvbench_sweep_level_within_threshold", map[string]string{"level": "users=16"}, 1},
		{"kvbench_sweep_level_within_threshold", map[string]string{"level": "users=32"}, 0},
		{"kvbench_sweep_level_failed_requests", map[string]string{"level": "users=32"}, 3},
		{"kvbench_tier_share_ratio", map[string]string{"level": "users=8", "tier": "host", "kind": "measured"}, 0.2},
	} {
		if v := sample(t, got, c.name, c.labels).GetGauge().GetValue(); !near(v, c.want) {
			t.Errorf("%s%v = %v, want %v", c.name, c.labels, v, c.want)
		}
	}
	if n := len(got["kvbench_sweep_level_within_threshold"].GetMetric()); n != 3 {
		t.Errorf("%d within-threshold series, want one per level", n)
	}
	sw.CapacityUsers = nil
	fams, _ = SweepFamilies(sw, nil)
	got, _ = parse(t, fams)
	if _, ok := got["kvbench_sweep_capacity_users"]; ok {
		t.Error("a sweep without a capacity exports one")
	}
}

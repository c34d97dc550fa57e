package compare

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/scenarios"
)

// The fixtures are kvbench runs on the embedded engine of one scenario (nightly-tiny, two
// repetitions each): the candidate's prefill is 30% slower and its CPU tier too small to keep
// the replayed prompt; other-scenario is one repetition of a different scenario.
var fixtures = filepath.Join("..", "..", "cmd", "kvbench", "testdata", "compare")

func load(t *testing.T, name string) *runs.Run {
	t.Helper()
	r, err := runs.Load(filepath.Join(fixtures, name))
	if err != nil {
		t.Fatal(err)
	}
	return r
}

func mustCompare(t *testing.T, b, c *runs.Run, opts Options) *Result {
	t.Helper()
	res, err := Compare(b, c, opts)
	if err != nil {
		t.Fatal(err)
	}
	return res
}

// judged lists "step[index] metric" for every metric judged j.
func judged(res *Result, j stats.Judgement) []string {
	var out []string
	for _, st := range res.Steps {
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				if m.Judgement == j {
					out = append(out, fmt.Sprintf("%s[%d] %s", st.Step, q.Index, m.Metric))
				}
			}
		}
	}
	return out
}

func TestCompareIdenticalRunsHasNoRegression(t *testing.T) {
	b := load(t, "baseline")
	res := mustCompare(t, b, load(t, "baseline"), Options{Tolerance: DefaultTolerance})
	if res.Regression || len(res.Findings) != 0 || len(res.Mismatches) != 0 {
		t.Fatalf("regression %v, findings %q, mismatches %v", res.Regression, res.Findings, res.Mismatches)
	}
	if res.Mismatches == nil || res.Findings == nil {
		t.Error("empty lists must be [] in JSON, not null")
	}
	if got := len(res.Steps); got != 2 || res.Steps[0].Step != "sequence" || res.Steps[1].Step != "replay" {
		t.Fatalf("steps %+v", res.Steps)
	}
	if len(res.Steps[0].Requests) != 4 || len(res.Steps[1].Requests) != 1 {
		t.Fatalf("requests per step: %d, %d", len(res.Steps[0].Requests), len(res.Steps[1].Requests))
	}
	if res.Steps[0].Verdict != nil {
		t.Error("a sequence step has a verdict comparison")
	}
	if v := res.Steps[1].Verdict; v == nil || v.Status != stats.Unchanged || v.Why != "" {
		t.Fatalf("replay verdict %+v", v)
	}
	var n int
	for _, st := range res.Steps {
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				n++
				if m.Judgement != stats.Unchanged || m.Relative == nil || *m.Relative != 0 {
					t.Errorf("%s[%d] %s: %s, relative %v", st.Step, q.Index, m.Metric, m.Judgement, m.Relative)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("no metric compared")
	}
	if res.Baseline.Repetitions != 2 || res.Baseline.Scenario != "nightly-tiny" || res.Baseline.Model != "kvbench/tiny-sim (tiny-sim)" {
		t.Errorf("baseline ref %+v", res.Baseline)
	}
}

func TestCompareFindsTheCandidatesRegressions(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	if !res.Regression {
		t.Fatal("no regression found")
	}
	// The slower prefill shows in every request's TTFT and prefill rate; the lost CPU tier
	// turns the replay into a recompute: its cached fraction falls. Decode did not change.
	want := []string{
		"sequence[0] time_to_first_output_ms", "sequence[0] effective_prefill_tokens_per_second",
		"sequence[1] time_to_first_output_ms", "sequence[1] effective_prefill_tokens_per_second",
		"sequence[2] time_to_first_output_ms", "sequence[2] effective_prefill_tokens_per_second",
		"sequence[3] time_to_first_output_ms", "sequence[3] effective_prefill_tokens_per_second",
		"replay[0] time_to_first_output_ms", "replay[0] effective_prefill_tokens_per_second",
		"replay[0] cached_fraction",
	}
	if got := judged(res, stats.Regressed); !slices.Equal(got, want) {
		t.Fatalf("regressed metrics\n got %q\nwant %q", got, want)
	}
	for _, st := range res.Steps {
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				if m.Metric == "decode_tokens_per_second" && m.Judgement != stats.Unchanged {
					t.Errorf("%s[%d] decode: %s", st.Step, q.Index, m.Judgement)
				}
				if m.Metric == "time_to_first_output_ms" && (m.Relative == nil || *m.Relative < 0.2) {
					t.Errorf("%s[%d] TTFT changed by %v, want a slowdown of the order of 30%%", st.Step, q.Index, m.Relative)
				}
			}
		}
	}
	v := res.Steps[1].Verdict
	if v == nil || v.Status != stats.Regressed || v.Why != "cpu_reload -> recompute" {
		t.Fatalf("replay verdict %+v", v)
	}
	if !slices.Equal(v.Baseline, []string{"cpu_reload", "cpu_reload"}) || !slices.Equal(v.Candidate, []string{"recompute", "recompute"}) {
		t.Fatalf("verdicts per repetition %q -> %q", v.Baseline, v.Candidate)
	}
	// One finding per regressed metric plus the verdict's, in step order.
	if len(res.Findings) != len(want)+1 {
		t.Fatalf("%d findings: %q", len(res.Findings), res.Findings)
	}
	if !slices.Contains(res.Findings, "replay: verdict cpu_reload -> recompute") {
		t.Errorf("findings lack the verdict change: %q", res.Findings)
	}
	if !strings.HasPrefix(res.Findings[0], "sequence[0] time_to_first_output_ms rose ") {
		t.Errorf("first finding %q", res.Findings[0])
	}
}

func TestCompareReportsMissingStepsAndNewFailures(t *testing.T) {
	b, c := load(t, "baseline"), load(t, "candidate")
	// The candidate's first sequence request failed in one repetition, and its second
	// repetition never reached the replay: still compared over what was measured.
	c.Repetitions[1].Steps[0].Requests[1].Result.ErrorKind = "http"
	res := mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	if want := "sequence[1]: failed in 1 candidate repetition(s), never in the baseline"; !slices.Contains(res.Findings, want) {
		t.Errorf("findings %q lack %q", res.Findings, want)
	}
	if q := res.Steps[0].Requests[1]; q.CandidateFailed != 1 || q.BaselineFailed != 0 {
		t.Errorf("failures %+v", q)
	}

	// A candidate interrupted before the replay: its prompts differ from the baseline's, so
	// only an allowed mismatch compares it.
	c = load(t, "candidate")
	for k := range c.Repetitions {
		c.Repetitions[k].Steps = c.Repetitions[k].Steps[:1]
	}
	res = mustCompare(t, b, c, Options{Tolerance: DefaultTolerance, AllowMismatch: true})
	if !slices.Contains(res.Findings, "replay: not measured in the candidate") {
		t.Errorf("findings %q lack the missing replay", res.Findings)
	}
	if st := res.Steps[1]; st.Step != "replay" || len(st.Requests) != 0 || st.Verdict != nil {
		t.Errorf("missing step compared anyway: %+v", st)
	}
}

func TestCompareRefusesMismatchedScenarios(t *testing.T) {
	b, o := load(t, "baseline"), load(t, "other-scenario")
	_, err := Compare(b, o, Options{Tolerance: DefaultTolerance})
	if !errors.Is(err, ErrMismatch) {
		t.Fatalf("err %v, want ErrMismatch", err)
	}
	var mm *MismatchError
	if !errors.As(err, &mm) || len(mm.Mismatches) == 0 {
		t.Fatalf("err %T %v", err, err)
	}
	if m := mm.Mismatches[0]; m.Field != "scenario" || m.Baseline != "nightly-tiny" || m.Candidate != "other-tiny" {
		t.Errorf("first mismatch %+v", m)
	}
	if !strings.Contains(err.Error(), `scenario differs (baseline "nightly-tiny", candidate "other-tiny")`) || !strings.Contains(err.Error(), "--allow-mismatch") {
		t.Errorf("message %q", err)
	}

	res, err := Compare(b, o, Options{Tolerance: DefaultTolerance, AllowMismatch: true})
	if err != nil {
		t.Fatalf("AllowMismatch: %v", err)
	}
	if len(res.Mismatches) != len(mm.Mismatches) || res.Mismatches[0].Field != "scenario" {
		t.Errorf("allowed comparison lists mismatches %+v", res.Mismatches)
	}
	if len(res.Steps) != 2 {
		t.Errorf("allowed comparison has %d steps", len(res.Steps))
	}
}

func TestCompareNoise(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	if !strings.HasPrefix(res.Noise, "measured from repetitions (baseline 2, candidate 2)") {
		t.Errorf("repeated runs: noise %q", res.Noise)
	}
	// With repeats a metric's threshold is the larger of the tolerance and the measured spread.
	var aboveTolerance int
	for _, st := range res.Steps {
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				if m.Baseline.N < 2 && m.Candidate.N < 2 {
					// Measured in one repetition only (e.g. an absent cached count): no noise.
					if m.Noise != nil || m.Threshold != DefaultTolerance {
						t.Errorf("%s[%d] %s: noise %v from single values", st.Step, q.Index, m.Metric, m.Noise)
					}
					continue
				}
				if m.Noise == nil {
					t.Fatalf("%s[%d] %s: no noise measured from two repetitions", st.Step, q.Index, m.Metric)
				}
				if want := max(DefaultTolerance, *m.Noise); m.Threshold != want {
					t.Errorf("%s[%d] %s: threshold %v, want %v", st.Step, q.Index, m.Metric, m.Threshold, want)
				}
				if m.Threshold > DefaultTolerance {
					aboveTolerance++
				}
			}
		}
	}
	if aboveTolerance == 0 {
		t.Error("no metric's spread exceeded the tolerance: the fixture no longer tests the noise")
	}

	o := load(t, "other-scenario")
	res = mustCompare(t, o, o, Options{Tolerance: DefaultTolerance})
	if !strings.HasPrefix(res.Noise, "not measured: neither run was repeated") {
		t.Errorf("unrepeated runs: noise %q", res.Noise)
	}
	for _, q := range res.Steps[0].Requests {
		for _, m := range q.Metrics {
			if m.Noise != nil || m.Threshold != DefaultTolerance {
				t.Errorf("unrepeated %s: noise %v threshold %v", m.Metric, m.Noise, m.Threshold)
			}
		}
	}
}

func TestWriteTextAndMarkdown(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	var text bytes.Buffer
	res.WriteText(&text)
	lines := strings.Split(text.String(), "\n")
	hasLine := func(fields ...string) bool {
		for _, l := range lines {
			if slices.Equal(strings.Fields(l)[:min(len(fields), len(strings.Fields(l)))], fields) {
				return true
			}
		}
		return false
	}
	for _, want := range [][]string{
		{"STEP", "REQ", "METRIC", "BASELINE", "CANDIDATE", "CHANGE", "THRESHOLD", "STATUS"},
		{"replay", "0", "verdict", "cpu_reload,", "cpu_reload", "recompute,", "recompute", "-", "-", "regression"},
		{"REGRESSION", "(12):"},
		{"-", "replay:", "verdict", "cpu_reload", "->", "recompute"},
	} {
		if !hasLine(want...) {
			t.Errorf("text output lacks a line %q:\n%s", want, text.String())
		}
	}
	// One table row per compared metric, plus the verdict's.
	rows := 0
	for _, l := range lines {
		if strings.HasPrefix(l, "sequence ") || strings.HasPrefix(l, "replay ") {
			rows++
		}
	}
	if want := len(res.rows()); rows != want || want != 21 {
		t.Errorf("%d table rows, %d compared", rows, want)
	}
	for _, f := range res.Findings {
		if !strings.Contains(text.String(), "  - "+f+"\n") {
			t.Errorf("text output lacks finding %q", f)
		}
	}

	var md bytes.Buffer
	res.WriteMarkdown(&md)
	for _, want := range []string{
		"## kvbench compare: Regression: 12 finding(s)\n",
		"| baseline | `" + res.Baseline.Dir + "` | nightly-tiny |",
		"- **replay: verdict cpu_reload -> recompute**\n",
		"| replay | 0 | verdict | cpu_reload, cpu_reload | recompute, recompute | - | - | **regression** |\n",
		"| step | req | metric | baseline | candidate | change | threshold | status |\n",
	} {
		if !strings.Contains(md.String(), want) {
			t.Errorf("markdown lacks %q:\n%s", want, md.String())
		}
	}
	if strings.Contains(md.String(), "Mismatch") {
		t.Error("markdown reports a mismatch between runs of one scenario")
	}

	same := mustCompare(t, load(t, "baseline"), load(t, "baseline"), Options{Tolerance: DefaultTolerance})
	text.Reset()
	same.WriteText(&text)
	if !strings.HasSuffix(text.String(), "\nno regression\n") || strings.Contains(text.String(), "REGRESSION") {
		t.Errorf("self-comparison text:\n%s", text.String())
	}
	md.Reset()
	same.WriteMarkdown(&md)
	if !strings.HasPrefix(md.String(), "## kvbench compare: No regression\n") || strings.Contains(md.String(), "**regression**") {
		t.Errorf("self-comparison markdown:\n%s", md.String())
	}

	other := mustCompare(t, load(t, "baseline"), load(t, "other-scenario"), Options{Tolerance: DefaultTolerance, AllowMismatch: true})
	text.Reset()
	other.WriteText(&text)
	md.Reset()
	other.WriteMarkdown(&md)
	if !strings.Contains(text.String(), `MISMATCH (allowed): scenario: baseline "nightly-tiny", candidate "other-tiny"`) ||
		!strings.Contains(md.String(), "> **Mismatch (allowed):** scenario: baseline `nightly-tiny`, candidate `other-tiny`") {
		t.Errorf("allowed mismatch not shown:\n%s\n%s", text.String(), md.String())
	}
}

func TestCompareVerdicts(t *testing.T) {
	cases := []struct {
		name   string
		b, c   []string
		status stats.Judgement
		why    string
	}{
		{"same", []string{"cpu_reload"}, []string{"cpu_reload"}, stats.Unchanged, ""},
		{"same repeated", []string{"cpu_reload", "cpu_reload"}, []string{"cpu_reload", "cpu_reload", "cpu_reload"}, stats.Unchanged, ""},
		{"new verdict", []string{"cpu_reload", "cpu_reload"}, []string{"recompute", "recompute"}, stats.Regressed, "cpu_reload -> recompute"},
		// A verdict the baseline reached in any repetition is no regression.
		{"seen in one baseline repetition", []string{"cpu_reload", "recompute"}, []string{"recompute"}, stats.Unchanged, "the baseline's repetitions disagree: cpu_reload, recompute"},
		{"candidate disagrees within the baseline's", []string{"cpu_reload", "gpu_hit"}, []string{"gpu_hit", "cpu_reload"}, stats.Unchanged, "the baseline's repetitions disagree: cpu_reload, gpu_hit"},
		{"fewer candidate repetitions", []string{"cpu_reload", "cpu_reload"}, []string{"cpu_reload"}, stats.Unchanged, ""},
		// Candidate repetitions that disagree always include one the baseline never had.
		{"candidate disagrees", []string{"gpu_hit", "gpu_hit"}, []string{"gpu_hit", "partial"}, stats.Regressed, "gpu_hit -> partial"},
		{"each new verdict named once", []string{"cpu_reload", "cpu_reload"}, []string{"partial", "recompute", "partial", "cpu_reload"}, stats.Regressed, "cpu_reload -> partial/recompute"},
		{"mixed baseline to new", []string{"cpu_reload", "gpu_hit", "cpu_reload"}, []string{"recompute"}, stats.Regressed, "cpu_reload/gpu_hit -> recompute"},
		{"missing in the candidate", []string{"cpu_reload"}, []string{"missing"}, stats.Regressed, "cpu_reload -> missing"},
		{"improved is not a regression", []string{"recompute", "cpu_reload"}, []string{"cpu_reload", "cpu_reload"}, stats.Unchanged, "the baseline's repetitions disagree: recompute, cpu_reload"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			v := compareVerdicts(c.b, c.c)
			if v.Status != c.status || v.Why != c.why {
				t.Errorf("compareVerdicts(%q, %q) = %s %q, want %s %q", c.b, c.c, v.Status, v.Why, c.status, c.why)
			}
			if !slices.Equal(v.Baseline, c.b) || !slices.Equal(v.Candidate, c.c) {
				t.Errorf("verdicts not kept: %q %q", v.Baseline, v.Candidate)
			}
		})
	}
}

// TestCompareNamesAChangedServer: the candidate ran on a server with a quarter of the CPU tier;
// compare still compares (a nightly exists to catch that) and names the change in every
// output format, where only the HTML report's identity table showed it.
func TestCompareNamesAChangedServer(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	// The fixtures ran on two embedded engines, each on its own free port.
	want := []runs.Mismatch{
		{Field: "target.endpoint (host)", Baseline: "127.0.0.1:46493", Candidate: "127.0.0.1:37973"},
		{Field: "cache.cpu_offload_gib", Baseline: "0.015625", Candidate: "0.00390625"},
	}
	if !slices.Equal(res.ServerChanges, want) {
		t.Fatalf("server changes %v, want %v", res.ServerChanges, want)
	}
	var text, md bytes.Buffer
	res.WriteText(&text)
	res.WriteMarkdown(&md)
	if !strings.Contains(text.String(), `SERVER CHANGED: cache.cpu_offload_gib: baseline "0.015625", candidate "0.00390625"`) {
		t.Errorf("text does not name the changed CPU tier:\n%s", text.String())
	}
	if !strings.Contains(md.String(), "> **Server changed:** cache.cpu_offload_gib: baseline `0.015625`, candidate `0.00390625`") {
		t.Errorf("markdown does not name the changed CPU tier:\n%s", md.String())
	}
	data, err := json.Marshal(res)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `{"field":"cache.cpu_offload_gib","baseline":"0.015625","candidate":"0.00390625"}]`) {
		t.Errorf("json does not name the changed CPU tier: %s", data)
	}

	same := mustCompare(t, load(t, "baseline"), load(t, "baseline"), Options{Tolerance: DefaultTolerance})
	if same.ServerChanges == nil || len(same.ServerChanges) != 0 {
		t.Errorf("a run compared with itself: server changes %#v, want []", same.ServerChanges)
	}
}

// TestFindingsSayWhichWayTheMetricMoved: a regression names the direction of the change and
// which way is better, so a rate that fell reads "fell", never "+93.2% worse".
func TestFindingsSayWhichWayTheMetricMoved(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	n := 0
	for _, st := range res.Steps {
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				if m.Judgement != stats.Regressed {
					continue
				}
				n++
				word := "rose "
				if m.Better == stats.Higher {
					word = "fell "
				}
				prefix := fmt.Sprintf("%s[%d] %s %s", st.Step, q.Index, m.Metric, word)
				found := false
				for _, f := range res.Findings {
					found = found || strings.HasPrefix(f, prefix)
				}
				if !found {
					t.Errorf("no finding starts %q: %q", prefix, res.Findings)
				}
			}
		}
	}
	if n == 0 {
		t.Fatal("fixture has no regressed metric")
	}
	for _, f := range res.Findings {
		if strings.Contains(f, "worse") {
			t.Errorf("finding %q still words the change as worse", f)
		}
	}
	drop := MetricValue{Better: stats.Higher, Baseline: stats.Summary{Median: ptr(100.0)}, Candidate: stats.Summary{Median: ptr(6.8)},
		Change: stats.Change{Relative: ptr(-0.932), Worse: ptr(0.932), Threshold: 0.1}}
	if got, want := Movement(drop), "fell 93.2% (median 100 -> 6.80; higher is better; threshold 10.0%)"; got != want {
		t.Errorf("decode drop: %q, want %q", got, want)
	}
	rise := MetricValue{Better: stats.Lower, Baseline: stats.Summary{Median: ptr(20.0)}, Candidate: stats.Summary{Median: ptr(358.0)},
		Change: stats.Change{Relative: ptr(16.9), Worse: ptr(16.9), Threshold: 0.1}}
	if got, want := Movement(rise), "rose 1690.0% (median 20 -> 358; lower is better; threshold 10.0%)"; got != want {
		t.Errorf("ttft rise: %q, want %q", got, want)
	}
}

func ptr[T any](v T) *T { return &v }

// asCurve renames r's two steps (sequence, replay) to a reload curve's point of 1,024 tokens
// named seq, as a run of a curve names it; the scenario records the curve.
func asCurve(r *runs.Run, seq string) {
	names := map[string]string{"sequence": seq, "replay": seq + "_replay"}
	for k := range r.Repetitions {
		rep := &r.Repetitions[k]
		for i := range rep.Steps {
			rep.Steps[i].Step = names[rep.Steps[i].Step]
			for j := range rep.Steps[i].Requests {
				q := &rep.Steps[i].Requests[j]
				q.Step = names[q.Step]
				if q.ReplayOf != nil {
					q.ReplayOf.Step = names[q.ReplayOf.Step]
				}
			}
		}
		for i := range rep.Sections {
			rep.Sections[i].Step = names[rep.Sections[i].Step]
		}
	}
	r.Scenario.Curves = []scenarios.Curve{{ID: "curve", Points: []scenarios.CurveSteps{{Tokens: 1024, Sequence: seq, Replay: seq + "_replay"}}}}
}

// TestCompareMatchesCurveStepsAcrossNames: a run whose curve steps carry the old exact-size
// names compares with one named by size class, step by step.
func TestCompareMatchesCurveStepsAcrossNames(t *testing.T) {
	b, c := load(t, "baseline"), load(t, "candidate")
	asCurve(b, "curve_1024")
	asCurve(c, "curve_1k")
	res := mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	for _, f := range res.Findings {
		if strings.Contains(f, "not measured in the candidate") {
			t.Errorf("a step was not matched: %q", f)
		}
	}
	if len(res.Mismatches) != 0 {
		t.Errorf("mismatches %v: the renamed steps sent the same prompts", res.Mismatches)
	}
	if len(res.Steps) != 2 || res.Steps[1].Step != "curve_1024_replay" || res.Steps[1].Verdict == nil || len(res.Steps[1].Requests) == 0 {
		t.Fatalf("steps %+v", res.Steps)
	}
	if got := judged(res, stats.Regressed); len(got) == 0 {
		t.Errorf("the candidate's regressions were not found across the names")
	}
}

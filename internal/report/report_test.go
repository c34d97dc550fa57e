package report

import (
	"bytes"
	"cmp"
	"encoding/json"
	"fmt"
	"html"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// Fixtures: a kvbench demo output (an eviction+replay primary run and the control run of
// another scenario) and the compare fixtures (two repetitions each of one scenario).
var (
	demo       = filepath.Join("..", "study", "testdata", "demo")
	primaryDir = filepath.Join(demo, "eviction-6x150k-replay-20261201T060008Z")
	controlDir = filepath.Join(demo, "offload8-control-20261201T060010Z")
	compareDir = filepath.Join("..", "..", "cmd", "kvbench", "testdata", "compare")
)

func load(t *testing.T, dir string) *runs.Run {
	t.Helper()
	r, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	return r
}

// artifact is the part of a step artifact the tests read on their own, not through the
// record package.
type artifact struct {
	Step     string `json:"step"`
	Requests []struct {
		Result struct {
			TTFT *float64 `json:"time_to_first_output_ms"`
		} `json:"result"`
		Samples struct {
			Series []struct {
				KVUsage *float64 `json:"kv_usage"`
			} `json:"series"`
		} `json:"samples"`
		// An isolated request's counters; a step's span runs from its first request's
		// before to its last one's after.
		Counters struct {
			Counters map[string]struct {
				Before float64 `json:"before"`
				After  float64 `json:"after"`
			} `json:"counters"`
		} `json:"counters"`
	} `json:"requests"`
}

// span is counter c's change over the artifact's requests.
func (a artifact) span(c string) float64 {
	first, last := a.Requests[0], a.Requests[len(a.Requests)-1]
	return last.Counters.Counters[c].After - first.Counters.Counters[c].Before
}

func readArtifact(t *testing.T, dir, name string) artifact {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var a artifact
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	return a
}

func TestCollectTakesItsNumbersFromTheArtifacts(t *testing.T) {
	r := load(t, primaryDir)
	d := Collect("t", "g", []*runs.Run{r}, nil)
	if len(d.Runs) != 1 || d.Comparison != nil {
		t.Fatalf("%d runs, comparison %v", len(d.Runs), d.Comparison)
	}
	rd := d.Runs[0]
	if rd.Scenario != "eviction-6x150k-replay" || rd.Repetitions != 1 || rd.GPUKVTokens != 506288 || rd.CPUOffload != 16 || rd.Status != "completed" {
		t.Fatalf("identity %+v", rd)
	}

	// The verdict recomputed from the artifacts is the one run.json recorded.
	rec := r.Run.Replay("replay")
	if rec == nil {
		t.Fatal("run.json has no replay section")
	}
	if len(rd.Verdicts) != 1 {
		t.Fatalf("verdicts %+v", rd.Verdicts)
	}
	v := rd.Verdicts[0]
	if v.Step != "replay" || v.Verdict != "cpu_reload" || v.Verdict != string(rec.Verdict) || !v.Agree || !slices.Equal(v.Repetitions, []string{"cpu_reload"}) {
		t.Errorf("verdict row %+v, record %q", v, rec.Verdict)
	}
	if v.SetupValid != "yes" || v.SetupValid != string(rec.SetupValid) || v.Interpretation != rec.Interpretation || v.Interpretation == "" || v.Reason != rec.VerdictReason {
		t.Errorf("setup %q interpretation %q, record %q %q", v.SetupValid, v.Interpretation, rec.SetupValid, rec.Interpretation)
	}
	if v.CachedFraction == nil || rec.CachedFraction == nil || *v.CachedFraction != *rec.CachedFraction || *v.CachedFraction < 0.9 {
		t.Errorf("cached fraction %v, record %v", v.CachedFraction, rec.CachedFraction)
	}

	// One point per request of repetition 0, in order, with the artifact's TTFT; store and
	// load bytes per step are the artifacts' counter deltas.
	var labels []string
	var ttft []*float64
	var samples int
	for i, name := range []string{"step-01-eviction_sequence.json", "step-02-replay.json"} {
		a := readArtifact(t, primaryDir, name)
		for _, q := range a.Requests {
			ttft = append(ttft, q.Result.TTFT)
			for _, s := range q.Samples.Series {
				if s.KVUsage != nil {
					samples++
				}
			}
		}
		for j := range a.Requests {
			labels = append(labels, fmt.Sprintf("%s[%d]", a.Step, j))
		}
		sb := rd.Steps[i]
		store, load := a.span("store_bytes"), a.span("load_bytes")
		if sb.Step != a.Step || sb.StoreBytes == nil || *sb.StoreBytes != store || sb.LoadBytes == nil || *sb.LoadBytes != load {
			t.Errorf("step %s bytes %v/%v, artifact %v/%v", a.Step, sb.StoreBytes, sb.LoadBytes, store, load)
		}
	}
	if len(rd.Requests) != 7 || len(rd.Requests) != len(ttft) {
		t.Fatalf("%d request points, artifacts hold %d requests", len(rd.Requests), len(ttft))
	}
	for i, p := range rd.Requests {
		if p.Label != labels[i] || p.Replay != (i == 6) || p.TTFTMS == nil || ttft[i] == nil || *p.TTFTMS != *ttft[i] {
			t.Errorf("point %d %+v, artifact %s TTFT %v", i, p, labels[i], ttft[i])
		}
	}
	// The eviction sequence stored what the replay loaded back.
	if s, l := rd.Steps[0].StoreBytes, rd.Steps[1].LoadBytes; *s <= 0 || *l <= 0 {
		t.Errorf("store %v, load %v", *s, *l)
	}
	if len(rd.KVUsage) != samples || samples == 0 {
		t.Fatalf("%d KV usage points, artifacts hold %d samples", len(rd.KVUsage), samples)
	}
	if !slices.IsSortedFunc(rd.KVUsage, func(a, b UsagePoint) int { return cmp.Compare(a.TMS, b.TMS) }) {
		t.Error("KV usage points are not in time order")
	}
}

func TestCollectVerdictsAcrossRepetitions(t *testing.T) {
	b, c := load(t, filepath.Join(compareDir, "baseline")), load(t, filepath.Join(compareDir, "candidate"))
	d := Collect("t", "g", []*runs.Run{b, c}, nil)
	if v := d.Runs[0].Verdicts[0]; v.Verdict != "cpu_reload" || !v.Agree || !slices.Equal(v.Repetitions, []string{"cpu_reload", "cpu_reload"}) {
		t.Errorf("baseline %+v", v)
	}
	if v := d.Runs[1].Verdicts[0]; v.Verdict != "recompute" || !v.Agree || d.Runs[1].Repetitions != 2 {
		t.Errorf("candidate %+v", v)
	}
	// Repetitions that disagree are flagged; the row's verdict stays repetition 0's.
	c.Repetitions[1].Steps[1].Requests[0].Verdict.Verdict = "partial"
	c.Derive(c.Repetitions) // the view is derived from the steps once
	d = Collect("t", "g", []*runs.Run{c}, nil)
	v := d.Runs[0].Verdicts[0]
	if v.Agree || v.Verdict != "recompute" || !slices.Equal(v.Repetitions, []string{"recompute", "partial"}) {
		t.Fatalf("disagreeing repetitions %+v", v)
	}
	page := render(t, d)
	if !strings.Contains(page, "(disagree)") {
		t.Error("the page does not flag the disagreement")
	}
}

// An absent TTFT is null in the data and draws no bar, never a bar of 0.
func TestAbsentTTFTIsNotDrawn(t *testing.T) {
	r := load(t, primaryDir)
	r.Repetitions[0].Steps[0].Requests[2].Result.TimeToFirstOutputMS = nil
	d := Collect("t", "g", []*runs.Run{r}, nil)
	if d.Runs[0].Requests[2].TTFTMS != nil {
		t.Fatalf("absent TTFT collected as %v", *d.Runs[0].Requests[2].TTFTMS)
	}
	page := render(t, d)
	ttft := regexp.MustCompile(`(?s)<svg id="ttft-0".*?</svg>`).FindString(page)
	if n := strings.Count(ttft, `<rect class="bar"`); n != 6 {
		t.Errorf("%d TTFT bars for 6 measured requests", n)
	}
	if !strings.Contains(embedded(t, page), `"time_to_first_output_ms":null`) {
		t.Error("the embedded data does not carry the absent TTFT as null")
	}
}

func render(t *testing.T, d Data) string {
	t.Helper()
	var buf bytes.Buffer
	if err := Render(&buf, d); err != nil {
		t.Fatal(err)
	}
	return buf.String()
}

var dataScript = regexp.MustCompile(`(?s)<script type="application/json" id="kvbench-data">(.*?)</script>`)

func embedded(t *testing.T, page string) string {
	t.Helper()
	m := dataScript.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no kvbench-data script in the page")
	}
	return m[1]
}

// TestRenderIsSelfContained: one HTML page with the run's identity and verdict, nothing to
// fetch, and the drawn numbers embedded as JSON that decodes back to the data.
func TestRenderIsSelfContained(t *testing.T) {
	d := Collect("kvbench report: eviction", "2026-12-01T07:00:00Z", []*runs.Run{load(t, primaryDir)}, nil)
	page := render(t, d)
	for _, want := range []string{
		"<!DOCTYPE html>", "<title>kvbench report: eviction</title>", "generated 2026-12-01T07:00:00Z",
		"eviction-6x150k-replay", `<td class="v-cpu_reload">cpu_reload</td>`, `<svg id="ttft-0"`, `<svg id="kv-0"`,
	} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, `id="comparison"`) {
		t.Error("one run rendered with a comparison")
	}
	for _, ref := range []string{"src=", "href=", "url(", "@import", "<link", "<iframe"} {
		if strings.Contains(page, ref) {
			t.Errorf("page references %q", ref)
		}
	}
	// The only URL is the SVG namespace, which names and fetches nothing.
	for _, u := range regexp.MustCompile(`https?://[^\s"'<>)]+`).FindAllString(page, -1) {
		if u != "http://www.w3.org/2000/svg" {
			t.Errorf("page contains the URL %s", u)
		}
	}
	var back Data
	if err := json.Unmarshal([]byte(embedded(t, page)), &back); err != nil {
		t.Fatalf("embedded data: %v", err)
	}
	if back.Title != d.Title || len(back.Runs) != 1 || len(back.Runs[0].Requests) != len(d.Runs[0].Requests) || back.Runs[0].Verdicts[0].Interpretation != d.Runs[0].Verdicts[0].Interpretation {
		t.Errorf("embedded data does not round-trip: %+v", back)
	}
}

func TestKindOf(t *testing.T) {
	primary, control := load(t, primaryDir), load(t, controlDir)
	base, cand := load(t, filepath.Join(compareDir, "baseline")), load(t, filepath.Join(compareDir, "candidate"))
	other := load(t, filepath.Join(compareDir, "other-scenario"))
	cases := []struct {
		name string
		rs   []*runs.Run
		want Kind
	}{
		{"one run", []*runs.Run{primary}, KindRuns},
		{"two runs of one scenario", []*runs.Run{base, cand}, KindComparison},
		{"a run and itself", []*runs.Run{base, base}, KindComparison},
		{"three runs of one scenario", []*runs.Run{base, cand, base}, KindRuns},
		{"primary and control", []*runs.Run{primary, control}, KindStudy},
		{"control first", []*runs.Run{control, primary}, KindStudy},
		{"two scenarios of one study's shape", []*runs.Run{base, other}, KindStudy},
		{"one scenario differs among three", []*runs.Run{base, cand, other}, KindStudy},
	}
	for _, c := range cases {
		if got := KindOf(c.rs); got != c.want {
			t.Errorf("%s: %s, want %s", c.name, got, c.want)
		}
	}
}

// visibleText is the page less its style, scripts and tags: what a reader sees.
func visibleText(page string) string {
	page = regexp.MustCompile(`(?s)<style>.*?</style>|<script.*?</script>`).ReplaceAllString(page, "")
	text := html.UnescapeString(regexp.MustCompile(`<[^>]*>`).ReplaceAllString(page, " "))
	return strings.Join(strings.Fields(text), " ")
}

// TestStudyIsShownSideBySide: a primary run and its control are a study: each run's
// verdicts, setup and interpretation, and the control's section, side by side, with no
// comparison, so no difference between the setups is called a regression.
func TestStudyIsShownSideBySide(t *testing.T) {
	primary, control := load(t, primaryDir), load(t, controlDir)
	// No AllowMismatch: a study compares nothing, so the scenarios' difference is no error.
	d, err := Build("", "g", []*runs.Run{primary, control}, compareOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindStudy || d.Comparison != nil || d.Title != "kvbench study: eviction-6x150k-replay, offload8-control" {
		t.Fatalf("kind %s, comparison %v, title %q", d.Kind, d.Comparison, d.Title)
	}
	p, c := d.Runs[0], d.Runs[1]
	if p.StudyRole != "primary" || p.Control != nil || c.StudyRole != "control" || c.StudyKey != "offload8_control" || c.Control == nil {
		t.Fatalf("roles: %q %v / %q %q %v", p.StudyRole, p.Control, c.StudyRole, c.StudyKey, c.Control)
	}
	if c.Control.ReplayVerdict != control.Control.ReplayVerdict || c.Control.SetupValid != control.Control.SetupValid ||
		*c.Control.GPUPrefixHitsAfter != *control.Control.GPUPrefixHitsAfter || c.Control.Sequence != "70K, 80K, 100K, then 70K replay" {
		t.Errorf("control section %+v, run.json %+v", c.Control, control.Control)
	}

	page := render(t, d)
	text := visibleText(page)
	for _, bad := range []string{"regression", "mismatch", "Comparison"} {
		if strings.Contains(strings.ToLower(text), strings.ToLower(bad)) {
			t.Errorf("a study's page says %q", bad)
		}
	}
	if strings.Contains(page, `id="comparison"`) || strings.Contains(embedded(t, page), `"comparison"`) {
		t.Error("a study's page carries a comparison")
	}
	if !strings.Contains(text, "Study: 2 runs of different scenarios, side by side") {
		t.Error("no study heading")
	}
	// One card per run, in order, each with its own verdict, setup and interpretation.
	cards := regexp.MustCompile(`(?s)<div class="study-run" id="study-(\d)">(.*?)</div>`).FindAllStringSubmatch(page, -1)
	if len(cards) != 2 || cards[0][1] != "0" || cards[1][1] != "1" {
		t.Fatalf("%d study cards", len(cards))
	}
	for i, want := range []struct {
		run                    *runs.Run
		verdict, setup, absent string
	}{
		{primary, "cpu_reload", "yes", "Control section"},
		{control, "gpu_hit", "no", "cpu_reload"},
	} {
		card := visibleText(cards[i][2])
		rec := want.run.Run.Replay("replay")
		for _, s := range []string{want.run.Scenario.Name, want.verdict, " " + want.setup + " ", rec.Interpretation} {
			if !strings.Contains(card, s) {
				t.Errorf("card %d lacks %q:\n%s", i, s, card)
			}
		}
		if strings.Contains(card, want.absent) {
			t.Errorf("card %d shows %q", i, want.absent)
		}
	}
	controlCard := visibleText(cards[1][2])
	for _, s := range []string{"Control section offload8_control", "70K, 80K, 100K, then 70K replay", "GPU prefix hits after 186192"} {
		if !strings.Contains(controlCard, s) {
			t.Errorf("control card lacks %q:\n%s", s, controlCard)
		}
	}
}

// TestTwoRunsOfOneScenarioKeepTheComparison: a baseline and a candidate of one scenario are
// still compared, regressions and all.
func TestTwoRunsOfOneScenarioKeepTheComparison(t *testing.T) {
	b, c := load(t, filepath.Join(compareDir, "baseline")), load(t, filepath.Join(compareDir, "candidate"))
	d, err := Build("", "g", []*runs.Run{b, c}, compareOptions(true))
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindComparison || d.Comparison == nil || !d.Comparison.Regression || d.Title != "kvbench report: nightly-tiny vs nightly-tiny" {
		t.Fatalf("kind %s, comparison %v, title %q", d.Kind, d.Comparison, d.Title)
	}
	page := render(t, d)
	text := visibleText(page)
	if !strings.Contains(page, `<table id="comparison">`) || !strings.Contains(text, "Comparison: regression (12)") || strings.Contains(page, `class="study"`) {
		t.Error("the comparison is not on the page, or a study is")
	}
	if !strings.Contains(text, "replay: verdict cpu_reload -> recompute") {
		t.Error("the verdict regression is not on the page")
	}
}

func compareOptions(allowMismatch bool) compare.Options {
	return compare.Options{Tolerance: compare.DefaultTolerance, AllowMismatch: allowMismatch}
}

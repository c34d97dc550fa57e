package report

import (
	"context"
	"fmt"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"
	"unicode/utf8"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// box is a label's estimated extent in SVG user units.
type box struct {
	text                   string
	left, right, top, base float64
}

var (
	svgRE     = regexp.MustCompile(`(?s)<svg id="([^"]+)"[^>]*viewBox="0 0 ([\d.]+) [\d.]+"[^>]*>(.*?)</svg>`)
	anyXL     = regexp.MustCompile(`<text class="xl"[^>]*>`)
	xlRE      = regexp.MustCompile(`<text class="xl" x="([\d.-]+)" y="([\d.-]+)" text-anchor="middle">([^<]*)`)
	xlFontRE  = regexp.MustCompile(`svg \.xl[^{]*\{ font-size: (\d+)px`)
	glyphFrac = 0.62 // a generous average glyph width of a sans-serif font, as a share of its size
)

// xLabelBoxes reads every x-axis label of every chart of page with its box: its text's
// length times the font size's glyph estimate, centred on x, one font size tall. A label the
// estimate cannot place (rotated, anchored otherwise) fails the test.
func xLabelBoxes(t *testing.T, page string) map[string][]box {
	t.Helper()
	m := xlFontRE.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no font size for svg .xl in the page's style")
	}
	font, _ := strconv.ParseFloat(m[1], 64)
	out := map[string][]box{}
	for _, svg := range svgRE.FindAllStringSubmatch(page, -1) {
		id, body := svg[1], svg[3]
		width, _ := strconv.ParseFloat(svg[2], 64)
		if n, placed := len(anyXL.FindAllString(body, -1)), len(xlRE.FindAllString(body, -1)); n != placed {
			t.Fatalf("chart %s: %d of its %d x labels are not horizontal and centred", id, n-placed, n)
		}
		for _, l := range xlRE.FindAllStringSubmatch(body, -1) {
			x, _ := strconv.ParseFloat(l[1], 64)
			y, _ := strconv.ParseFloat(l[2], 64)
			text := html.UnescapeString(l[3])
			w := float64(utf8.RuneCountInString(text)) * font * glyphFrac
			b := box{text, x - w/2, x + w/2, y - font, y + font*0.25}
			if b.left < 0 || b.right > width {
				t.Errorf("chart %s: label %q (%.1f..%.1f) is clipped by the chart's edge 0..%g", id, text, b.left, b.right, width)
			}
			out[id] = append(out[id], b)
		}
	}
	return out
}

// checkNoOverlap fails when two x labels of one chart overlap.
func checkNoOverlap(t *testing.T, name, page string) {
	t.Helper()
	charts := xLabelBoxes(t, page)
	if len(charts) == 0 {
		t.Fatalf("%s: no chart with x labels", name)
	}
	for id, bs := range charts {
		for i := range bs {
			for j := i + 1; j < len(bs); j++ {
				a, b := bs[i], bs[j]
				if a.left < b.right && b.left < a.right && a.top < b.base && b.top < a.base {
					t.Errorf("%s, chart %s: labels %q and %q overlap", name, id, a.text, b.text)
				}
			}
		}
	}
}

// curveRun is a reload curve's run of 20 sizes: a sequence request, a replay and its cold
// twin per size, 60 requests with long labels, and its curve.
func curveRun() RunData {
	f := func(v float64) *float64 { return &v }
	yes := true
	rd := RunData{Scenario: "reload-curve", Verdicts: []VerdictRow{}, KVUsage: []UsagePoint{}}
	cd := CurveData{ID: "curve", ChartID: "curve-0-0"}
	for k := 0; k < 20; k++ {
		tokens := 1024 << k
		seq, rep := fmt.Sprintf("curve_%d_sequence", tokens), fmt.Sprintf("curve_%d_replay", tokens)
		rd.Requests = append(rd.Requests,
			RequestPoint{Label: seq + "[0]", Step: seq, TTFTMS: f(float64(100 + k)), CachedFraction: f(0)},
			RequestPoint{Label: rep + "[0]", Step: rep, Replay: true, TTFTMS: f(float64(50 + k)), CachedFraction: f(0.99)},
			RequestPoint{Label: rep + "[0] cold twin", Step: rep, TTFTMS: f(float64(200 + 10*k)), CachedFraction: f(0)})
		rd.Steps = append(rd.Steps, StepBytes{Step: seq, StoreBytes: f(1e6)}, StepBytes{Step: rep, LoadBytes: f(1e6)})
		rd.Verdicts = append(rd.Verdicts, VerdictRow{Step: rep, Verdict: "cpu_reload", Agree: true, SetupValid: "yes"})
		cd.Points = append(cd.Points, record.CurvePoint{Tokens: tokens, ReplayTTFTMS: f(float64(50 + k)), TwinTTFTMS: f(float64(200 + 10*k)), Verdict: verdict.CPUReload, Identical: &yes, Counted: true})
	}
	rd.Curves = []CurveData{cd}
	return rd
}

// traceRun is a trace run of 600 requests.
func traceRun() RunData {
	f := func(v float64) *float64 { return &v }
	rd := RunData{Scenario: "trace", Verdicts: []VerdictRow{}, KVUsage: []UsagePoint{}, Steps: []StepBytes{{Step: "trace", StoreBytes: f(5e9), LoadBytes: f(2e9)}}}
	for i := 0; i < 600; i++ {
		rd.Requests = append(rd.Requests, RequestPoint{Label: fmt.Sprintf("trace[%d]", i), Step: "trace", Index: i, TTFTMS: f(float64(20 + (i*37)%900)), CachedFraction: f(float64(i%10) / 10)})
		rd.KVUsage = append(rd.KVUsage, UsagePoint{TMS: float64(i * 100), KVUsage: float64(i%100) / 100})
	}
	return rd
}

// TestNoTwoAxisLabelsOverlap: whatever the number of bars or the length of their labels, no
// two x-axis labels of a chart overlap and none is cut by the chart's edge: the demo's
// eviction run (long step names), a curve run of 20 sizes (60 requests, 40 steps) and a
// trace of 600 requests.
func TestNoTwoAxisLabelsOverlap(t *testing.T) {
	demoPage := render(t, Collect("t", "g", []*runs.Run{load(t, primaryDir), load(t, controlDir)}, nil))
	checkNoOverlap(t, "demo study", demoPage)
	if !strings.Contains(demoPage, ">eviction_seq") {
		t.Error("the demo's eviction_sequence labels are not drawn")
	}
	curvePage := render(t, Data{Title: "curve", Kind: KindRuns, Runs: []RunData{curveRun()}})
	checkNoOverlap(t, "curve run", curvePage)
	tracePage := render(t, Data{Title: "trace", Kind: KindRuns, Runs: []RunData{traceRun()}})
	checkNoOverlap(t, "trace run", tracePage)

	// The trace is drawn as a distribution, not as 600 bars; the curve's labels are thinned,
	// each kept one whole or shortened with its full text on hover.
	ttft := regexp.MustCompile(`(?s)<svg id="ttft-0".*?</svg>`)
	if tr := ttft.FindString(tracePage); strings.Count(tr, `<rect class="bar"`) != 0 || strings.Count(tr, `<circle class="pt"`) != 600 || !strings.Contains(tr, "distribution per step (600 requests)") {
		t.Error("the trace's TTFT is not drawn as one distribution of its 600 requests")
	}
	cv := ttft.FindString(curvePage)
	if n := strings.Count(cv, `<rect class="bar"`); n != 60 {
		t.Errorf("%d bars for the curve run's 60 requests", n)
	}
	if n := len(xlRE.FindAllString(cv, -1)); n < 4 || n >= 60 {
		t.Errorf("%d labels under 60 bars: not thinned, or thinned to nothing", n)
	}
	if !strings.Contains(cv, "…") || !strings.Contains(cv, "<title>curve_1024_sequence[0]</title></text>") {
		t.Error("a shortened label does not carry its full text")
	}
}

func TestShorten(t *testing.T) {
	for _, c := range []struct {
		in   string
		n    int
		want string
	}{
		{"replay[0]", 12, "replay[0]"},
		{"eviction_sequence[3]", 12, "eviction…[3]"},
		{"curve_1024_replay[0] cold twin", 12, "curve_1024_…"},
		{"abc[12345678901]", 5, "abc[…"},
	} {
		if got := shorten(c.in, c.n); got != c.want || utf8.RuneCountInString(got) > c.n {
			t.Errorf("shorten(%q, %d) = %q, want %q", c.in, c.n, got, c.want)
		}
	}
}

// TestLargePagesRenderInChromium renders the curve run's, the trace's and a sweep's pages in
// headless Chromium: the page's own script checks the drawn charts against the embedded
// data (one bar or one distribution point per measured request) and writes its marker.
func TestLargePagesRenderInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("no /usr/bin/chromium (bash .ci/install-chromium.sh installs it)")
	}
	dir := t.TempDir()
	for name, d := range map[string]Data{
		"curve": {Title: "curve", Kind: KindRuns, Runs: []RunData{curveRun()}},
		"trace": {Title: "trace", Kind: KindRuns, Runs: []RunData{traceRun()}},
	} {
		file := filepath.Join(dir, name+".html")
		if err := os.WriteFile(file, []byte(render(t, d)), 0o644); err != nil {
			t.Fatal(err)
		}
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		cmd := exec.CommandContext(ctx, chromium, "--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir="+t.TempDir(), "--window-size=1200,1600", "--dump-dom", "file://"+file)
		out, err := cmd.Output()
		cancel()
		if err != nil {
			t.Fatalf("%s: chromium: %v", name, err)
		}
		if !strings.Contains(string(out), `data-status="ok"`) {
			t.Errorf("%s: the page's own check did not pass: %s", name, regexp.MustCompile(`<p id="kvbench-status"[^>]*>[^<]*`).FindString(string(out)))
		}
	}
}

// TestInjectedStringsAreEscaped: step names, reasons and findings come from files anyone
// can write; none of them reaches the page as markup, in a table or in a chart.
func TestInjectedStringsAreEscaped(t *testing.T) {
	const evil = `<img src=x onerror=alert(1)>`
	tr := traceRun()
	for i := range tr.Requests {
		tr.Requests[i].Step = evil
		tr.Requests[i].Label = evil + "[0]"
	}
	tr.Steps[0].Step = evil
	tr.Traces = []TraceSplit{{Step: evil, Finding: evil, IdealUnavailable: evil}}
	tr.StepTTFT = []StepTTFT{{Step: evil, Kind: evil}}
	cr := curveRun()
	cr.Requests[0].Label, cr.Curves[0].ID, cr.Verdicts[0].Gain = evil, evil, evil
	d := Data{Title: evil, Kind: KindSweep, Runs: []RunData{tr, cr},
		Answer: &Answer{Gates: []GateRow{{Step: evil, Gate: evil, Reason: evil}}, Why: []string{evil}},
		Sweeps: []record.Sweep{{Scenario: evil, Step: evil, CapacityReason: evil, Levels: []record.SweepLevel{{Status: evil}}}}}
	page := render(t, d)
	if strings.Contains(page, evil) || strings.Contains(page, "<img") {
		t.Error("an injected string reached the page unescaped")
	}
	if !strings.Contains(visibleText(page), evil) {
		t.Error("the injected strings are not shown as text: the test would prove nothing")
	}
}

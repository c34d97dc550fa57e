package report

import (
	"regexp"
	"strconv"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

func TestReloadCurveIsDrawnLogLog(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	yes := true
	be := 2300.0
	cd := CurveData{ID: "curve", BreakEvenTokens: &be, BreakEven: "reloading pays from about 2,300 tokens on", ChartID: "curve-0-0", Points: []record.CurvePoint{
		{Tokens: 1024, ReplayTTFTMS: f(470), TwinTTFTMS: f(225), Gain: f(0.48), Verdict: verdict.CPUReload, Identical: &yes, Counted: true},
		{Tokens: 4096, ReplayTTFTMS: f(485), TwinTTFTMS: f(850), Gain: f(1.75), Verdict: verdict.CPUReload, Identical: &yes, Counted: true},
		{Tokens: 65536, ReplayTTFTMS: f(700), TwinTTFTMS: nil, Verdict: verdict.CPUReload, Excluded: "no cold twin timing"},
	}}
	svg := string(curveChart(cd))
	pts := regexp.MustCompile(`<circle class="pt" data-series="([^"]+)" data-tokens="([^"]+)" data-ms="([^"]+)" cx="([^"]+)" cy="([^"]+)"`).FindAllStringSubmatch(svg, -1)
	if len(pts) != 5 {
		t.Fatalf("%d points drawn, want 5 (three replays, two twins; an absent twin is not drawn)", len(pts))
	}
	coord := func(i, j int) float64 { v, _ := strconv.ParseFloat(pts[i][j], 64); return v }
	// Log x: 1024 -> 4096 (x4) and 4096 -> 65536 (x16) are one and two widths of x4.
	d1, d2 := coord(1, 4)-coord(0, 4), coord(2, 4)-coord(1, 4)
	if d1 <= 0 || d2/d1 < 1.99 || d2/d1 > 2.01 {
		t.Errorf("x spacing %g then %g: not logarithmic", d1, d2)
	}
	// Higher times sit higher (smaller y): the replay at 700 ms above the one at 470 ms.
	if coord(2, 5) >= coord(0, 5) {
		t.Errorf("y of 700 ms %g not above y of 470 ms %g", coord(2, 5), coord(0, 5))
	}
	if !strings.Contains(svg, `class="breakeven"`) || !strings.Contains(svg, "break-even: about 2300 tokens") {
		t.Errorf("no break-even line:\n%s", svg)
	}
	page := render(t, Data{Title: "t", Kind: KindRuns, Runs: []RunData{{Scenario: "reload-curve", Curves: []CurveData{cd},
		Verdicts: []VerdictRow{}, Requests: []RequestPoint{}, Steps: []StepBytes{}, KVUsage: []UsagePoint{}}}})
	for _, want := range []string{`<svg id="curve-0-0"`, "Reload curve: time to first output", "reloading pays from about 2,300 tokens on", `<td class="num">65536</td>`, "no cold twin timing"} {
		if !strings.Contains(page, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(page, "curve curve") {
		t.Error(`a curve whose step is "curve" is headed "Reload curve curve"`)
	}
	if curveHeading("long_prompts") != "Reload curve long_prompts" {
		t.Errorf("heading %q", curveHeading("long_prompts"))
	}
}

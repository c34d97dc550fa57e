package report

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/trace"
)

// sizeReport is a report of five sizes, a calibration's predicted shares at all and its
// measured one at 8,192 tokens, priced by a curve whose small sizes lose time.
func sizeReport() *trace.SizeReport {
	f := func(v float64) *float64 { return &v }
	r := &trace.SizeReport{File: "conv.jsonl", Requests: 1000, PromptTokens: 1e6, BlockTokens: 16, GPUTokens: 4096, Policy: "vllm",
		Prefill: &trace.PrefillSaving{Curve: trace.PrefillCurve{Run: "results/reload-curve-1", ID: "curve", Points: []trace.PrefillPoint{{PromptTokens: 1024, RecomputeMS: 100, ReloadMS: 200}, {PromptTokens: 4096, RecomputeMS: 800, ReloadMS: 300}}},
			TraceSeconds: 3600, OutsideRule: trace.PrefillOutsideRule, GPUHitRule: trace.PrefillGPUHitRule, GPUPrefillSecondsSaved: 12, GPUPrefillSecondsSavedPerHour: f(12)}}
	for i, h := range []int64{0, 2048, 8192, 32768, 131072} {
		share := []float64{0, 0.1, 0.3, 0.38, 0.385}[i]
		s := trace.TierSize{HostTokens: h, HostBlocks: h / 16, IdealShares: record.IdealShares{HostShare: share, GPUShare: 0.2, RecomputeShare: 0.8 - share},
			PredictedHostShare: f(share * 0.8), TierSaving: &trace.TierSaving{PrefillSecondsSaved: []float64{0, -3, 20, 40, 41}[i]}}
		s.PrefillSecondsSavedPerHour = f(s.PrefillSecondsSaved)
		if h == 8192 {
			s.MeasuredHostShare = f(0.25)
		}
		r.Sizes = append(r.Sizes, s)
	}
	r.Knee = &trace.Knee{HostTokens: 32768, HostShare: 0.38, DoubledHostShare: 0.385, Rule: trace.KneeRule}
	return r
}

var sizePointRE = regexp.MustCompile(`<circle class="pt" data-series="([^"]+)" data-tokens="(\d+)" data-value="([^"]+)" cx="([^"]+)" cy="([^"]+)"`)

// TestSizePageDrawsTheSeries: the page draws the ideal and predicted host shares as lines,
// the measured share as a point, the seconds saved (below 0 too) and the knee on both
// charts; its table and embedded JSON carry the same numbers.
func TestSizePageDrawsTheSeries(t *testing.T) {
	r := sizeReport()
	b, err := SizePage(r, time.Date(2026, 12, 2, 5, 0, 0, 0, time.UTC))
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	share, saved := section(t, page, "svg", "size-share"), section(t, page, "svg", "size-saved")
	count := func(svg, series string) (n int, xs map[int64]float64, ys map[int64]float64) {
		xs, ys = map[int64]float64{}, map[int64]float64{}
		for _, m := range sizePointRE.FindAllStringSubmatch(svg, -1) {
			if m[1] == series {
				tokens, _ := strconv.ParseInt(m[2], 10, 64)
				xs[tokens], _ = strconv.ParseFloat(m[4], 64)
				ys[tokens], _ = strconv.ParseFloat(m[5], 64)
				n++
			}
		}
		return n, xs, ys
	}
	ni, ix, iy := count(share, SeriesIdeal)
	np, _, py := count(share, SeriesPredicted)
	nm, _, my := count(share, SeriesMeasured)
	if ni != 5 || np != 5 || nm != 1 {
		t.Fatalf("share chart: %d ideal, %d predicted, %d measured points; want 5, 5, 1", ni, np, nm)
	}
	if !strings.Contains(share, `<polyline class="line" data-series="ideal"`) || !strings.Contains(share, `<polyline class="line" data-series="predicted"`) || strings.Contains(share, `data-series="measured" fill`) {
		t.Error("the ideal and predicted shares are lines, the measured share a point")
	}
	// Log x: 2,048 -> 8,192 -> 32,768 are equal steps; 0 sits left of them all.
	if d1, d2 := ix[8192]-ix[2048], ix[32768]-ix[8192]; d1 <= 0 || d2/d1 < 0.99 || d2/d1 > 1.01 || ix[0] >= ix[2048] {
		t.Errorf("x positions %v: not a log axis with 0 at its left", ix)
	}
	// Higher shares sit higher (smaller y): at 8,192 the ideal 30%, the measured 25%, the
	// predicted 24%.
	if !(iy[8192] < my[8192] && my[8192] < py[8192]) {
		t.Errorf("y at 8,192: ideal %g, measured %g, predicted %g: not ordered as 30%% > 25%% > 24%%", iy[8192], my[8192], py[8192])
	}
	ns, _, sy := count(saved, SeriesSaved)
	if ns != 5 || !(sy[2048] > sy[0] && sy[0] > sy[8192]) {
		t.Errorf("saved chart: %d points, y %v: the -3 s point must sit below 0, which sits below 20", ns, sy)
	}
	for _, svg := range []string{share, saved} {
		if !strings.Contains(svg, `<line class="knee" data-tokens="32768"`) {
			t.Errorf("no knee at 32,768 in %.60s", svg)
		}
	}
	text := visibleText(page)
	for _, want := range []string{"knee: 32,768 host tokens", "predicted host share", "measured host share", "25.0%", "-3.0", `reload curve "curve" of results/reload-curve-1`,
		"clamped", "GPU hits: 12.0 s saved per hour", "ignores queueing, batching and concurrency"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
	var data trace.SizeReport
	if err := json.Unmarshal([]byte(embedded(t, page)), &data); err != nil {
		t.Fatal(err)
	}
	if len(data.Sizes) != 5 || data.Sizes[2].MeasuredHostShare == nil || *data.Sizes[2].MeasuredHostShare != 0.25 || data.Prefill == nil || *data.Sizes[1].PrefillSecondsSavedPerHour != -3 {
		t.Errorf("embedded data %+v", data)
	}
	checkNoOverlap(t, "size page", page)
}

// TestSizePageWithoutCurve: without a curve there is no seconds chart nor column, and no
// calibration columns without a calibration; the page still draws the ideal.
func TestSizePageWithoutCurve(t *testing.T) {
	r := sizeReport()
	r.Prefill = nil
	for i := range r.Sizes {
		r.Sizes[i].TierSaving, r.Sizes[i].PredictedHostShare, r.Sizes[i].MeasuredHostShare = nil, nil, nil
	}
	b, err := SizePage(r, time.Now())
	if err != nil {
		t.Fatal(err)
	}
	page := string(b)
	if strings.Contains(page, `id="size-saved"`) || strings.Contains(page, "prefill s saved") || strings.Contains(page, "predicted host share") || strings.Contains(page, "measured host share") {
		t.Error("columns or charts of what the report does not hold")
	}
	if n := strings.Count(section(t, page, "svg", "size-share"), `data-series="ideal" data-tokens`); n != 5 {
		t.Errorf("%d ideal points", n)
	}
}

package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"

	"github.com/anvil-serving/kvbench/harness/units"
)

// CurveData is one reload curve's chart: the replay's and the cold twin's time to first
// output against the prompt size, both axes logarithmic (sizes double, times span orders of
// magnitude), and the break-even the record found.
type CurveData struct {
	ID              string              `json:"id"`
	Points          []record.CurvePoint `json:"points"`
	BreakEvenTokens *float64            `json:"break_even_tokens"`
	BreakEven       string              `json:"break_even"`
	ChartID         string              `json:"chart_id"`
}

// curveData collects a run's reload curves (chart ids curve-<run>-<k>).
func curveData(run int, curves []record.ReloadCurve) []CurveData {
	var out []CurveData
	for _, c := range curves {
		out = append(out, CurveData{ID: c.ID, Points: c.Points, BreakEvenTokens: c.BreakEvenTokens, BreakEven: c.BreakEven,
			ChartID: fmt.Sprintf("curve-%d-%d", run, len(out))})
	}
	return out
}

// curveHeading names a curve by its step id without saying "curve" twice: the step of a
// scenario's one curve is usually called "curve".
func curveHeading(id string) string {
	if id == "" || strings.EqualFold(id, "curve") || strings.EqualFold(id, "reload_curve") {
		return "Reload curve"
	}
	return "Reload curve " + id
}

// curveChart draws a curve's two time-to-first-output series over prompt size on log axes,
// with the break-even as a vertical line; a point a series did not measure is left out.
func curveChart(cd CurveData) template.HTML {
	var b strings.Builder
	header(&b, cd.ChartID, curveHeading(cd.ID)+": time to first output by prompt size")
	type pt struct{ x, y float64 }
	series := []struct {
		name, color string
		pts         []pt
	}{{"replay (reload)", colorLoad, nil}, {"cold twin (recompute)", colorBar, nil}}
	xMin, xMax, yMin, yMax := math.Inf(1), math.Inf(-1), math.Inf(1), math.Inf(-1)
	for _, p := range cd.Points {
		x := float64(p.Tokens)
		if p.PromptTokens != nil {
			x = float64(*p.PromptTokens)
		}
		for j, v := range []*float64{p.ReplayTTFTMS, p.TwinTTFTMS} {
			if v == nil || *v <= 0 || x <= 0 {
				continue
			}
			series[j].pts = append(series[j].pts, pt{x, *v})
			xMin, xMax, yMin, yMax = math.Min(xMin, x), math.Max(xMax, x), math.Min(yMin, *v), math.Max(yMax, *v)
		}
	}
	if math.IsInf(xMin, 1) {
		fmt.Fprintf(&b, `<text class="na" x="%.1f" y="%.1f" text-anchor="middle">no point was timed</text></svg>`, chartW/2, chartH/2)
		return template.HTML(b.String())
	}
	// Decades that hold every point.
	lx0, lx1 := math.Floor(math.Log10(xMin)), math.Ceil(math.Log10(xMax))
	ly0, ly1 := math.Floor(math.Log10(yMin)), math.Ceil(math.Log10(yMax))
	lx1, ly1 = math.Max(lx1, lx0+1), math.Max(ly1, ly0+1)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	px := func(x float64) float64 { return padL + plotW*(math.Log10(x)-lx0)/(lx1-lx0) }
	py := func(y float64) float64 { return chartH - padB - plotH*(math.Log10(y)-ly0)/(ly1-ly0) }
	for d := ly0; d <= ly1; d++ {
		y := py(math.Pow(10, d))
		fmt.Fprintf(&b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y, y)
		fmt.Fprintf(&b, `<text class="yl" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, units.Compact(math.Pow(10, d)))
	}
	fmt.Fprintf(&b, `<text class="yl" x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">ms</text>`, padT+plotH/2, padT+plotH/2)
	for d := lx0; d <= lx1; d++ {
		l := units.Compact(math.Pow(10, d))
		xLabel(&b, px(math.Pow(10, d)), chartH-padB+16, l, l)
	}
	xLabel(&b, padL+plotW/2, chartH-padB+32, "prompt tokens (log scale; times too)", "prompt tokens (log scale; times too)")
	if be := cd.BreakEvenTokens; be != nil && *be > 0 {
		x := px(*be)
		fmt.Fprintf(&b, `<line class="breakeven" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"><title>break-even: about %s tokens</title></line>`,
			x, x, padT, chartH-padB, colorHi, units.Compact(*be))
	}
	for j, s := range series {
		var seg []string
		for _, p := range s.pts {
			x, y := px(p.x), py(p.y)
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle class="pt" data-series="%s" data-tokens="%g" data-ms="%g" cx="%.1f" cy="%.1f" r="2.2" fill="%s"><title>%s tokens: %s %s ms</title></circle>`,
				html.EscapeString(s.name), p.x, p.y, x, y, s.color, units.Compact(p.x), html.EscapeString(s.name), units.Compact(p.y))
		}
		if len(seg) > 1 {
			fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.color, strings.Join(seg, " "))
		}
		// The legend sits in the plot's top left, which short prompts' low times leave empty.
		ly := padT + 6 + float64(j)*14
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text class="lg" x="%.1f" y="%.1f">%s</text>`,
			padL+8, ly, s.color, padL+22, ly+9, html.EscapeString(s.name))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

package report

import (
	"bytes"
	"fmt"
	"html"
	"html/template"
	"math"
	"slices"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Series of the size charts, as their points' data-series name them.
const (
	SeriesIdeal     = "ideal"
	SeriesPredicted = "predicted"
	SeriesMeasured  = "measured"
	SeriesSaved     = "host tier"
)

// SizePage renders kvbench trace size's report as one self-contained page: host share
// against host-tier size (the ideal, and where a calibration gave them the predicted line
// and the measured points), the prefill seconds saved against size when a curve priced
// them, the knee marked on both, and the table. The report is embedded as JSON.
func SizePage(r *trace.SizeReport, now time.Time) ([]byte, error) {
	title := "kvbench trace size"
	if r.File != "" {
		title += ": " + r.File
	}
	var predicted, measured bool
	for _, s := range r.Sizes {
		predicted, measured = predicted || s.PredictedHostShare != nil, measured || s.MeasuredHostShare != nil
	}
	var buf bytes.Buffer
	err := sizePage.Execute(&buf, struct {
		Title, Generated    string
		R                   *trace.SizeReport
		Predicted, Measured bool
		Style               template.CSS
		Share, Saved        template.HTML
	}{title, now.UTC().Format(time.RFC3339), r, predicted, measured, template.CSS(pageStyle), shareChart(r), savedChart(r)})
	if err != nil {
		return nil, fmt.Errorf("rendering the size page: %w", err)
	}
	return buf.Bytes(), nil
}

// pageStyle is the runs page's style, so that both pages read alike.
var pageStyle = func() string {
	s := pageTemplate[strings.Index(pageTemplate, "<style>")+len("<style>"):]
	return s[:strings.Index(s, "</style>")]
}()

// sizeAxis places host-tier sizes on a log axis; a tier of 0 tokens, which a log axis has no
// place for, sits one step left of the smallest size and is labelled 0.
type sizeAxis struct {
	lo, hi float64 // log10 of the smallest and largest size > 0
	zero   bool    // a size of 0 is drawn
}

func newSizeAxis(sizes []trace.TierSize) sizeAxis {
	a := sizeAxis{lo: math.Inf(1), hi: math.Inf(-1)}
	for _, s := range sizes {
		if s.HostTokens <= 0 {
			a.zero = true
			continue
		}
		l := math.Log10(float64(s.HostTokens))
		a.lo, a.hi = math.Min(a.lo, l), math.Max(a.hi, l)
	}
	if math.IsInf(a.lo, 1) { // only a tier of 0
		a.lo, a.hi = 0, 1
	}
	return a
}

// x is a size's position in the plot.
func (a sizeAxis) x(tokens int64) float64 {
	plotW := chartW - padL - padR
	left, width := padL+plotW*0.04, plotW*0.92
	if a.zero {
		left, width = padL+plotW*0.14, plotW*0.82
	}
	if tokens <= 0 {
		return padL + plotW*0.04
	}
	if a.hi == a.lo {
		return left + width/2
	}
	return left + width*(math.Log10(float64(tokens))-a.lo)/(a.hi-a.lo)
}

// labels writes the x labels: each listed size, left to right, one that would overlap the
// last written left out.
func (a sizeAxis) labels(b *strings.Builder, sizes []trace.TierSize) {
	ticks := slices.Sorted(func(yield func(int64) bool) {
		for _, s := range sizes {
			if !yield(max(s.HostTokens, 0)) {
				return
			}
		}
	})
	last := math.Inf(-1)
	for _, t := range slices.Compact(ticks) {
		l := units.Compact(float64(t))
		x := a.x(t)
		if x-last < labelWidth(l)+8 {
			continue
		}
		xLabel(b, x, chartH-padB+16, l, l)
		last = x
	}
	xLabel(b, padL+(chartW-padL-padR)/2, chartH-padB+32, "host-tier size, tokens (log scale)", "host-tier size, tokens (log scale)")
}

// yAxis writes a value axis over lo..hi (lo < 0 when values are negative) in four or more
// steps of a round size, and returns the position of a value.
func yAxis(b *strings.Builder, lo, hi float64, unit string, format func(float64) string) func(float64) float64 {
	if hi <= lo {
		hi = lo + 1
	}
	step := niceCeil((hi - lo) / 4)
	lo, hi = math.Floor(lo/step)*step, math.Ceil(hi/step)*step
	plotH := chartH - padT - padB
	py := func(v float64) float64 { return chartH - padB - plotH*(v-lo)/(hi-lo) }
	for v := lo; v <= hi+step/2; v += step {
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, py(v), py(v))
		fmt.Fprintf(b, `<text class="yl" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-6, py(v)+4, format(v))
	}
	fmt.Fprintf(b, `<text class="yl" x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`, padT+plotH/2, padT+plotH/2, html.EscapeString(unit))
	return py
}

// sizePoint is one value of a size chart's series.
type sizePoint struct {
	tokens int64
	v      float64
}

// sizeSeries draws one series: its points, joined by a line unless points is set; the
// legend row k names it.
func sizeSeries(b *strings.Builder, a sizeAxis, py func(float64) float64, name, color string, pts []sizePoint, points bool, k int) {
	slices.SortFunc(pts, func(p, q sizePoint) int { return int(p.tokens - q.tokens) })
	var seg []string
	for _, p := range pts {
		x, y := a.x(p.tokens), py(p.v)
		seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
		r := 2.2
		if points {
			r = 3.2
		}
		fmt.Fprintf(b, `<circle class="pt" data-series="%s" data-tokens="%d" data-value="%g" cx="%.1f" cy="%.1f" r="%.1f" fill="%s"><title>%s host tokens: %s %s</title></circle>`,
			html.EscapeString(name), p.tokens, p.v, x, y, r, color, units.Grouped(int(p.tokens)), html.EscapeString(name), units.Compact(p.v))
	}
	if !points && len(seg) > 1 {
		fmt.Fprintf(b, `<polyline class="line" data-series="%s" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, html.EscapeString(name), color, strings.Join(seg, " "))
	}
	ly := padT + 6 + float64(k)*14
	fmt.Fprintf(b, `<rect x="%.1f" y="%.1f" width="10" height="10" fill="%s"/><text class="lg" x="%.1f" y="%.1f">%s</text>`,
		chartW-padR-150, ly, color, chartW-padR-136, ly+9, html.EscapeString(name))
}

// knee marks the knee's size with a dashed vertical line.
func knee(b *strings.Builder, a sizeAxis, r *trace.SizeReport) {
	k := r.Knee
	if k == nil {
		return
	}
	x := a.x(k.HostTokens)
	fmt.Fprintf(b, `<line class="knee" data-tokens="%d" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f" stroke="%s" stroke-dasharray="4 3"><title>knee: %s host tokens</title></line>`,
		k.HostTokens, x, x, padT, chartH-padB, colorHi, units.Grouped(int(k.HostTokens)))
	lx, anchor := x+3, "start"
	if x > chartW-padR-40 { // no room right of the line
		lx, anchor = x-3, "end"
	}
	fmt.Fprintf(b, `<text class="lg" x="%.1f" y="%.1f" text-anchor="%s">knee</text>`, lx, padT+10, anchor)
}

// shareChart draws host share against host-tier size.
func shareChart(r *trace.SizeReport) template.HTML {
	var b strings.Builder
	header(&b, "size-share", "Host share of prompt tokens by host-tier size")
	a := newSizeAxis(r.Sizes)
	var ideal, predicted, measured []sizePoint
	top := 0.0
	for _, s := range r.Sizes {
		ideal = append(ideal, sizePoint{s.HostTokens, s.HostShare})
		top = math.Max(top, s.HostShare)
		if p := s.PredictedHostShare; p != nil {
			predicted, top = append(predicted, sizePoint{s.HostTokens, *p}), math.Max(top, *p)
		}
		if m := s.MeasuredHostShare; m != nil {
			measured, top = append(measured, sizePoint{s.HostTokens, *m}), math.Max(top, *m)
		}
	}
	py := yAxis(&b, 0, math.Min(niceCeil(top), 1), "host share", func(v float64) string { return units.Share(v) })
	a.labels(&b, r.Sizes)
	knee(&b, a, r)
	sizeSeries(&b, a, py, SeriesIdeal, colorBar, ideal, false, 0)
	k := 1
	if len(predicted) > 0 {
		sizeSeries(&b, a, py, SeriesPredicted, colorLoad, predicted, false, k)
		k++
	}
	if len(measured) > 0 {
		sizeSeries(&b, a, py, SeriesMeasured, colorHi, measured, true, k)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// savedChart draws the host tier's prefill seconds saved per hour against its size (the GPU
// hits' saving, the same at every size, is stated under the table); empty without a curve.
func savedChart(r *trace.SizeReport) template.HTML {
	p := r.Prefill
	if p == nil {
		return ""
	}
	var b strings.Builder
	header(&b, "size-saved", "Prefill seconds saved per hour of trace time by host-tier size")
	a := newSizeAxis(r.Sizes)
	var pts []sizePoint
	lo, hi := 0.0, 0.0
	for _, s := range r.Sizes {
		if v := s.PrefillSecondsSavedPerHour; v != nil {
			pts = append(pts, sizePoint{s.HostTokens, *v})
			lo, hi = math.Min(lo, *v), math.Max(hi, *v)
		}
	}
	if len(pts) == 0 {
		fmt.Fprintf(&b, `<text class="na" x="%.1f" y="%.1f" text-anchor="middle">n/a: the requests span no trace time (one instant)</text></svg>`, chartW/2, chartH/2)
		return template.HTML(b.String())
	}
	// Below 0: a tier whose reloads are slower than recomputing costs time.
	py := yAxis(&b, lo, hi, "s saved / hour", units.Compact)
	a.labels(&b, r.Sizes)
	knee(&b, a, r)
	sizeSeries(&b, a, py, SeriesSaved, colorLine, pts, false, 0)
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

var sizePage = template.Must(template.New("size").Funcs(template.FuncMap{
	"share": func(p *float64) string {
		if p == nil {
			return units.NotApplicable
		}
		return units.Share(*p)
	},
	"shareOf": units.Share,
	"int64":   func(n int) int64 { return int64(n) },
	"grouped": func(n int64) string { return units.Grouped(int(n)) },
	"bytes": func(p *int64) string {
		if p == nil {
			return units.NotApplicable
		}
		return units.GiBs(float64(*p))
	},
	"sec": func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return units.Sec(*p)
	},
	"cost": func(p *float64) string {
		if p == nil {
			return "n/a"
		}
		return fmt.Sprintf("%.4f", *p)
	},
}).Parse(sizePageTemplate))

const sizePageTemplate = `<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<meta name="viewport" content="width=device-width, initial-scale=1">
<title>{{.Title}}</title>
<style>{{.Style}}</style>
</head>
<body>
<h1>{{.Title}}</h1>
<p class="meta">generated {{.Generated}} by kvbench trace size from the trace alone{{with .R.Prefill}} and the reload curve of {{.Curve.Run}}{{end}}; no network is needed to view this page.</p>
{{with .R}}<p class="meta" id="size-setup">{{grouped (int64 .Requests)}} requests{{with .Window}} ({{.String}}){{end}}, {{grouped .PromptTokens}} prompt tokens, blocks of {{.BlockTokens}} tokens; GPU tier {{grouped .GPUTokens}} tokens; policy {{.Policy}}{{if .PoolHoldsOutput}}; the GPU pool also holds each request's output{{end}}</p>
<p class="interp" id="size-knee"><b>knee:</b> {{with .Knee}}{{grouped .HostTokens}} host tokens (host share {{shareOf .HostShare}}; twice the size: {{shareOf .DoubledHostShare}}): {{.Rule}}{{else}}none among these sizes: doubling the largest still adds a point of host share or more{{end}}</p>
{{end}}<div class="charts">
{{.Share}}
{{.Saved}}
</div>
<table id="sizes">
<tr><th>host tokens</th>{{if .R.BytesPerToken}}<th>host bytes</th>{{end}}<th>GPU share</th><th>host share (ideal)</th>{{if .Predicted}}<th>predicted host share</th>{{end}}{{if .Measured}}<th>measured host share</th>{{end}}<th>recompute</th><th>stored tokens</th>{{if .R.Prefill}}<th>prefill s saved / hour</th>{{if .R.Prefill.GPUHourCost}}<th>cost saved / hour</th>{{end}}<th>requests priced outside the curve</th>{{end}}</tr>
{{range .R.Sizes}}<tr><td class="num">{{grouped .HostTokens}}</td>{{if $.R.BytesPerToken}}<td class="num">{{bytes .HostBytes}}</td>{{end}}<td class="num">{{shareOf .GPUShare}}</td><td class="num">{{shareOf .HostShare}}</td>{{if $.Predicted}}<td class="num">{{share .PredictedHostShare}}</td>{{end}}{{if $.Measured}}<td class="num">{{share .MeasuredHostShare}}</td>{{end}}<td class="num">{{shareOf .RecomputeShare}}</td><td class="num">{{grouped .StoredTokens}}</td>{{if $.R.Prefill}}<td class="num">{{sec .PrefillSecondsSavedPerHour}}</td>{{if $.R.Prefill.GPUHourCost}}<td class="num">{{cost .CostSavedPerHour}}</td>{{end}}<td class="num">{{.ClampedRequests}}</td>{{end}}</tr>
{{end}}</table>
{{with .R.Prefill}}<div class="interp" id="size-prefill">
<p><b>prefill saved:</b> each request's host-tier tokens priced at its prompt size by reload curve {{printf "%q" .Curve.ID}} of {{.Curve.Run}}{{with .Curve.Model}} ({{.}}{{with $.R.Prefill.Curve.Engine}}, {{.}}{{end}}){{end}}: recompute less reload time, linear between its {{len .Curve.Points}} measured sizes; {{.OutsideRule}} ({{.ClampedRequests}} of {{$.R.Requests}} requests).</p>
<p>GPU hits: {{sec .GPUPrefillSecondsSavedPerHour}} s saved per hour at every size ({{.GPUHitRule}}). Trace time: {{printf "%.1f" .TraceSeconds}} s, first arrival to last.</p>
<p>The estimate ignores queueing, batching and concurrency, and a reload that overlaps other work: it prices each request alone, as the curve measured it.</p>
</div>{{end}}
<script type="application/json" id="kvbench-data">{{.R}}</script>
</body>
</html>
`

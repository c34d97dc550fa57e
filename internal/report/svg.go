package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"strings"

	"github.com/anvil-serving/kvbench/harness/units"
)

// Chart geometry, in SVG user units; the SVG scales to its container.
const (
	chartW, chartH          = 560.0, 240.0
	padL, padR, padT, padB  = 64.0, 12.0, 28.0, 56.0
	colorBar, colorHi       = "#4c78a8", "#e45756"
	colorStore, colorLoad   = "#4c78a8", "#f58518"
	colorLine, colorMissing = "#54a24b", "#bbbbbb"
)

// Series is one named set of bar values; nil values are absent measurements.
type Series struct {
	Name   string
	Color  string
	Values []*float64
}

// barChart draws grouped bars, one group per label; highlight marks groups drawn in the
// highlight colour (the replay). Absent values get a grey "n/a" tick, never a zero bar.
func barChart(id, title, unit string, labels []string, series []Series, highlight []bool) template.HTML {
	var b strings.Builder
	maxV := 0.0
	for _, s := range series {
		for _, v := range s.Values {
			if v != nil {
				maxV = math.Max(maxV, *v)
			}
		}
	}
	top := niceCeil(maxV)
	header(&b, id, title)
	axes(&b, top, unit)
	plotW := chartW - padL - padR
	groupW := plotW / float64(max(len(labels), 1))
	barW := groupW * 0.8 / float64(max(len(series), 1))
	for i, label := range labels {
		x0 := padL + float64(i)*groupW + groupW*0.1
		for j, s := range series {
			x := x0 + float64(j)*barW
			color := s.Color
			if len(series) == 1 && i < len(highlight) && highlight[i] {
				color = colorHi
			}
			if i >= len(s.Values) || s.Values[i] == nil {
				fmt.Fprintf(&b, `<text class="na" x="%.1f" y="%.1f" text-anchor="middle">n/a</text>`, x+barW/2, chartH-padB-4)
				continue
			}
			v := *s.Values[i]
			h := 0.0
			if top > 0 {
				h = (chartH - padT - padB) * v / top
			}
			fmt.Fprintf(&b, `<rect class="bar" data-series="%s" data-value="%g" x="%.1f" y="%.1f" width="%.1f" height="%.1f" fill="%s"><title>%s %s: %s %s</title></rect>`,
				html.EscapeString(s.Name), v, x, chartH-padB-h, math.Max(barW-1, 1), h, color,
				html.EscapeString(label), html.EscapeString(s.Name), units.Compact(v), unit)
		}
		fmt.Fprintf(&b, `<text class="xl" x="%.1f" y="%.1f" text-anchor="end" transform="rotate(-35 %.1f %.1f)">%s</text>`,
			x0+groupW*0.4, chartH-padB+14, x0+groupW*0.4, chartH-padB+14, html.EscapeString(label))
	}
	if len(series) > 1 {
		for j, s := range series {
			fmt.Fprintf(&b, `<rect x="%.1f" y="8" width="10" height="10" fill="%s"/><text class="lg" x="%.1f" y="17">%s</text>`,
				chartW-200+float64(j)*100, s.Color, chartW-186+float64(j)*100, html.EscapeString(s.Name))
		}
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// lineChart draws y over x (ms since the run started) as a polyline with its points.
func lineChart(id, title, unit string, xs, ys []float64, yTop float64) template.HTML {
	var b strings.Builder
	header(&b, id, title)
	axes(&b, yTop, unit)
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text class="na" x="%.1f" y="%.1f" text-anchor="middle">no samples: the server exposes no KV usage gauge</text></svg>`, chartW/2, chartH/2)
		return template.HTML(b.String())
	}
	xMax := 0.0
	for _, x := range xs {
		xMax = math.Max(xMax, x)
	}
	xMax = math.Max(niceCeil(xMax), 1)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	var pts []string
	for i := range xs {
		x := padL + plotW*xs[i]/xMax
		y := chartH - padB - plotH*math.Min(ys[i], yTop)/yTop
		pts = append(pts, fmt.Sprintf("%.1f,%.1f", x, y))
	}
	fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, colorLine, strings.Join(pts, " "))
	for i, p := range pts {
		xy := strings.Split(p, ",")
		fmt.Fprintf(&b, `<circle class="pt" cx="%s" cy="%s" r="1.6" fill="%s"><title>t=%s ms: %s</title></circle>`, xy[0], xy[1], colorLine, units.Compact(xs[i]), units.Compact(ys[i]))
	}
	for _, f := range []float64{0, 0.5, 1} {
		fmt.Fprintf(&b, `<text class="xl" x="%.1f" y="%.1f" text-anchor="middle">%s s</text>`, padL+plotW*f, chartH-padB+16, units.Compact(xMax*f/1000))
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

func header(b *strings.Builder, id, title string) {
	fmt.Fprintf(b, `<svg id="%s" class="chart" viewBox="0 0 %.0f %.0f" role="img" aria-label="%s" xmlns="http://www.w3.org/2000/svg">`, id, chartW, chartH, html.EscapeString(title))
	fmt.Fprintf(b, `<text class="title" x="%.1f" y="16">%s</text>`, padL, html.EscapeString(title))
}

func axes(b *strings.Builder, top float64, unit string) {
	plotH := chartH - padT - padB
	for i := 0; i <= 4; i++ {
		y := chartH - padB - plotH*float64(i)/4
		fmt.Fprintf(b, `<line class="grid" x1="%.1f" x2="%.1f" y1="%.1f" y2="%.1f"/>`, padL, chartW-padR, y, y)
		fmt.Fprintf(b, `<text class="yl" x="%.1f" y="%.1f" text-anchor="end">%s</text>`, padL-6, y+4, units.Compact(top*float64(i)/4))
	}
	fmt.Fprintf(b, `<text class="yl" x="12" y="%.1f" transform="rotate(-90 12 %.1f)" text-anchor="middle">%s</text>`, padT+plotH/2, padT+plotH/2, html.EscapeString(unit))
}

// niceCeil rounds v up to 1, 2 or 5 times a power of ten (0 stays 1).
func niceCeil(v float64) float64 {
	if v <= 0 || math.IsNaN(v) {
		return 1
	}
	p := math.Pow(10, math.Floor(math.Log10(v)))
	for _, m := range []float64{1, 2, 5, 10} {
		if v <= m*p {
			return m * p
		}
	}
	return 10 * p
}

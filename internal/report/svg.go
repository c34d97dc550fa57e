package report

import (
	"fmt"
	"html"
	"html/template"
	"math"
	"sort"
	"strings"
	"unicode/utf8"

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
	every, fit := thinLabels(labels, groupW)
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
		if i%every == 0 {
			xLabel(&b, x0+groupW*0.4, chartH-padB+14, shorten(label, fit), label)
		}
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
		l := units.Compact(xMax*f/1000) + " s"
		xLabel(&b, padL+plotW*f, chartH-padB+16, l, l)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// labelCharW is a generous average glyph width of the 10px x labels (svg .xl), so a label's
// estimated box is never narrower than the one drawn: the overlap test relies on it.
const labelCharW = 6.2

// minLabelChars is the fewest characters a thinned label keeps: fewer says nothing.
const minLabelChars = 12

func labelWidth(s string) float64 { return float64(utf8.RuneCountInString(s)) * labelCharW }

// thinLabels decides which of n evenly spaced labels, groupW apart, are written (every
// every-th one) and how many characters each keeps (fit), so that no two overlap however
// many bars there are: labels are thinned until each has room for its text or for
// minLabelChars, and truncated to that room.
func thinLabels(labels []string, groupW float64) (every, fit int) {
	longest := 0
	for _, l := range labels {
		longest = max(longest, utf8.RuneCountInString(l))
	}
	need := float64(min(longest, minLabelChars))*labelCharW + 6
	every = max(1, int(math.Ceil(need/math.Max(groupW, 0.01))))
	return every, max(1, int((groupW*float64(every)-6)/labelCharW))
}

// shorten truncates s to n characters with an ellipsis, keeping an index suffix
// ("eviction_seq…[3]") since it tells bars of one step apart.
func shorten(s string, n int) string {
	r := []rune(s)
	if len(r) <= n {
		return s
	}
	suffix := []rune{}
	if i := strings.LastIndex(s, "["); i > 0 && !strings.Contains(s[i:], " ") {
		suffix = []rune(s[i:])
	}
	head := n - 1 - len(suffix)
	if head < 1 {
		return string(r[:max(n-1, 0)]) + "…"
	}
	return string(r[:head]) + "…" + string(suffix)
}

// xLabel writes an x-axis label centred on x, moved inside the chart where it would cross
// an edge; full, when the label was shortened, is shown on hover.
func xLabel(b *strings.Builder, x, y float64, text, full string) {
	w := labelWidth(text)
	x = math.Max(w/2+2, math.Min(x, chartW-w/2-2))
	fmt.Fprintf(b, `<text class="xl" x="%.1f" y="%.1f" text-anchor="middle">%s`, x, y, html.EscapeString(text))
	if full != text {
		fmt.Fprintf(b, `<title>%s</title>`, html.EscapeString(full))
	}
	b.WriteString(`</text>`)
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

// maxBars is the most requests drawn one bar each; past it a chart of requests shows each
// step's distribution instead, which stays readable at any count.
const maxBars = 64

// palette colours a distribution chart's groups in turn.
var palette = []string{colorBar, colorLoad, colorLine, colorHi, "#b279a2", "#9d755d"}

// Group is one set of values of a distribution chart; nil values are absent, left out.
type Group struct {
	Name   string
	Values []*float64
}

// cdfChart draws each group's values as an empirical distribution: the share of the
// group's values at most x, one point per value. xTop 0 scales x to the largest value.
func cdfChart(id, title, unit string, groups []Group, xTop float64) template.HTML {
	var b strings.Builder
	header(&b, id, title)
	axes(&b, 1, "share of requests")
	top := xTop
	if top <= 0 {
		for _, g := range groups {
			for _, v := range g.Values {
				if v != nil {
					top = math.Max(top, *v)
				}
			}
		}
		top = niceCeil(top)
	}
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	for j, g := range groups {
		var vs []float64
		for _, v := range g.Values {
			if v != nil {
				vs = append(vs, *v)
			}
		}
		sort.Float64s(vs)
		color := palette[j%len(palette)]
		var seg []string
		for i, v := range vs {
			x, y := padL+plotW*math.Min(v, top)/top, chartH-padB-plotH*float64(i+1)/float64(len(vs))
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle class="pt" data-series="%s" data-value="%g" cx="%.1f" cy="%.1f" r="1.4" fill="%s"><title>%s: %s %s</title></circle>`,
				html.EscapeString(g.Name), v, x, y, color, html.EscapeString(g.Name), units.Compact(v), html.EscapeString(unit))
		}
		if len(seg) > 1 {
			fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" stroke-width="1.2" points="%s"/>`, color, strings.Join(seg, " "))
		}
		// The legend sits in the plot's top left, a row each, which a rising curve leaves empty.
		ly := padT + 4 + float64(j)*13
		name := shorten(fmt.Sprintf("%s (%d)", g.Name, len(vs)), 30)
		fmt.Fprintf(&b, `<rect x="%.1f" y="%.1f" width="9" height="9" fill="%s"/><text class="lg" x="%.1f" y="%.1f">%s</text>`,
			padL+8, ly, color, padL+21, ly+8, html.EscapeString(name))
	}
	for _, f := range []float64{0, 0.5, 1} {
		l := strings.TrimSpace(units.Compact(top*f) + " " + unit)
		xLabel(&b, padL+plotW*f, chartH-padB+16, l, l)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

// requestGroups groups a run's requests by step, a step's cold twins on their own, in
// order, for a distribution chart of one of their values.
func requestGroups(qs []RequestPoint, value func(RequestPoint) *float64) []Group {
	var out []Group
	at := map[string]int{}
	for _, q := range qs {
		name := q.Step
		if strings.HasSuffix(q.Label, " cold twin") {
			name += " cold twins"
		}
		k, ok := at[name]
		if !ok {
			k, at[name] = len(out), len(out)
			out = append(out, Group{Name: name})
		}
		out[k].Values = append(out[k].Values, value(q))
	}
	return out
}

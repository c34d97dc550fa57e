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

// ConversationData is one conversation step's charts: TTFT over time and, per scrape
// interval, the share of the prompt tokens each tier served.
type ConversationData struct {
	Step        string             `json:"step"`
	Users       int                `json:"users"`
	TTFTMS      record.Percentiles `json:"time_to_first_output_ms"`
	Tiers       record.TierShares  `json:"tiers"`
	TTFT        []record.TTFTPoint `json:"ttft_series"`
	Shares      []SharePoint       `json:"shares"`
	ChartPrefix string             `json:"chart_prefix"`
}

// SharePoint is one interval's tier shares; a share is null when its counter is absent or
// no prompt token was served in the interval.
type SharePoint struct {
	TMS       float64  `json:"t_ms"`
	GPU       *float64 `json:"gpu_share"`
	Host      *float64 `json:"host_share"`
	Recompute *float64 `json:"recompute_share"`
}

// conversationData collects a run's conversation sections (chart ids conv-<run>-<k>-*).
func conversationData(run int, secs []record.Section) []ConversationData {
	var out []ConversationData
	for _, s := range secs {
		cs := s.Conversation
		if cs == nil {
			continue
		}
		cd := ConversationData{Step: s.Step, Users: cs.Users, TTFTMS: cs.TTFTMS, Tiers: cs.Tiers, TTFT: cs.TTFTSeries, Shares: []SharePoint{},
			ChartPrefix: fmt.Sprintf("conv-%d-%d", run, len(out))}
		for _, p := range cs.Series {
			sh := record.TierSplit{PromptTokens: p.PromptTokens, GPUHitTokens: p.GPUHitTokens, HostHitTokens: p.HostHitTokens, RecomputeTokens: p.RecomputeTokens}.Shares()
			if sh.GPU == nil && sh.Host == nil && sh.Recompute == nil {
				continue // nothing served in the interval, or no counters
			}
			cd.Shares = append(cd.Shares, SharePoint{TMS: p.AtMS, GPU: sh.GPU, Host: sh.Host, Recompute: sh.Recompute})
		}
		out = append(out, cd)
	}
	return out
}

// conversationCharts renders one conversation's two charts.
func conversationCharts(cd ConversationData) template.HTML {
	var xs, ys []float64
	top := 0.0
	for _, p := range cd.TTFT {
		xs, ys = append(xs, p.AtMS), append(ys, p.TTFTMS)
		top = math.Max(top, p.TTFTMS)
	}
	ttft := lineChart(cd.ChartPrefix+"-ttft", fmt.Sprintf("%s, %d users: time to first output over the step", cd.Step, cd.Users), "ms", xs, ys, niceCeil(top))
	var sx []float64
	gpu, host, rec := make([]*float64, 0, len(cd.Shares)), make([]*float64, 0, len(cd.Shares)), make([]*float64, 0, len(cd.Shares))
	for _, p := range cd.Shares {
		sx = append(sx, p.TMS)
		gpu, host, rec = append(gpu, p.GPU), append(host, p.Host), append(rec, p.Recompute)
	}
	shares := linesChart(cd.ChartPrefix+"-tiers", fmt.Sprintf("%s, %d users: share of prompt tokens per tier over the step", cd.Step, cd.Users), "share", sx,
		[]Series{{"GPU", colorBar, gpu}, {"host tier", colorLoad, host}, {"recomputed", colorHi, rec}})
	return ttft + shares
}

// linesChart draws several series over x (ms) on a 0..1 axis; a nil value breaks its line.
func linesChart(id, title, unit string, xs []float64, series []Series) template.HTML {
	var b strings.Builder
	header(&b, id, title)
	axes(&b, 1, unit)
	if len(xs) == 0 {
		fmt.Fprintf(&b, `<text class="na" x="%.1f" y="%.1f" text-anchor="middle">no intervals: the server exposes no prefix-cache counters</text></svg>`, chartW/2, chartH/2)
		return template.HTML(b.String())
	}
	xMax := 0.0
	for _, x := range xs {
		xMax = math.Max(xMax, x)
	}
	xMax = math.Max(niceCeil(xMax), 1)
	plotW, plotH := chartW-padL-padR, chartH-padT-padB
	for j, s := range series {
		var seg []string
		flush := func() {
			if len(seg) > 1 {
				fmt.Fprintf(&b, `<polyline class="line" fill="none" stroke="%s" stroke-width="1.5" points="%s"/>`, s.Color, strings.Join(seg, " "))
			}
			seg = nil
		}
		for i, v := range s.Values {
			if v == nil {
				flush()
				continue
			}
			x, y := padL+plotW*xs[i]/xMax, chartH-padB-plotH*math.Min(*v, 1)
			seg = append(seg, fmt.Sprintf("%.1f,%.1f", x, y))
			fmt.Fprintf(&b, `<circle class="pt" data-series="%s" cx="%.1f" cy="%.1f" r="1.6" fill="%s"><title>t=%s ms: %s %s</title></circle>`,
				html.EscapeString(s.Name), x, y, s.Color, units.Compact(xs[i]), html.EscapeString(s.Name), units.Compact(*v))
		}
		flush()
		fmt.Fprintf(&b, `<rect x="%.1f" y="8" width="10" height="10" fill="%s"/><text class="lg" x="%.1f" y="17">%s</text>`,
			chartW-270+float64(j)*90, s.Color, chartW-256+float64(j)*90, html.EscapeString(s.Name))
	}
	for _, f := range []float64{0, 0.5, 1} {
		l := units.Compact(xMax*f/1000) + " s"
		xLabel(&b, padL+plotW*f, chartH-padB+16, l, l)
	}
	b.WriteString(`</svg>`)
	return template.HTML(b.String())
}

package compare

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// compareRow is one line of the comparison table.
type compareRow struct {
	step, req, metric, base, cand, change, threshold, status string
}

func (res *Result) rows() []compareRow {
	var rows []compareRow
	for _, st := range res.Steps {
		if st.Verdict != nil {
			rows = append(rows, compareRow{st.Step, "0", "verdict", strings.Join(st.Verdict.Baseline, ", "), strings.Join(st.Verdict.Candidate, ", "), "-", "-", string(st.Verdict.Status)})
		}
		for _, m := range st.Distribution {
			rows = append(rows, metricRow(st.Step, "all", m))
		}
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				rows = append(rows, metricRow(st.Step, fmt.Sprint(q.Index), m))
			}
		}
	}
	return rows
}

// metricRow is one judged metric's line; req is a request's index, or "all" for a step
// compared as a whole.
func metricRow(step, req string, m MetricValue) compareRow {
	change, threshold := "-", units.Share(m.Threshold)
	if m.Relative != nil {
		change = units.SignedShare(*m.Relative)
	}
	return compareRow{step, req, m.Metric, m.Baseline.Text(), m.Candidate.Text(), change, threshold, string(m.Judgement)}
}

// WriteText prints the comparison as a table with the regressions found.
func (res *Result) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { res.writeText(w) })
}

// writeText writes what WriteText writes.
func (res *Result) writeText(w io.Writer) {
	fmt.Fprintf(w, "baseline:  %s (%s, %s, %d repetition(s))\n", res.Baseline.Dir, res.Baseline.Scenario, res.Baseline.ObservedAt, res.Baseline.Repetitions)
	fmt.Fprintf(w, "candidate: %s (%s, %s, %d repetition(s))\n", res.Candidate.Dir, res.Candidate.Scenario, res.Candidate.ObservedAt, res.Candidate.Repetitions)
	fmt.Fprintf(w, "tolerance %s; noise %s\n", units.Share(res.Tolerance), res.Noise)
	if res.Salted != "" {
		fmt.Fprintf(w, "prompts: %s\n", res.Salted)
	}
	for _, n := range res.unfinished() {
		fmt.Fprintf(w, "INCOMPLETE (allowed): %s\n", n)
	}
	for _, m := range res.Mismatches {
		fmt.Fprintf(w, "MISMATCH (allowed): %s: baseline %q, candidate %q\n", m.Field, m.Baseline, m.Candidate)
	}
	for _, m := range res.ServerChanges {
		fmt.Fprintf(w, "SERVER CHANGED: %s: baseline %q, candidate %q\n", m.Field, m.Baseline, m.Candidate)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREQ\tMETRIC\tBASELINE\tCANDIDATE\tCHANGE\tTHRESHOLD\tSTATUS")
	for _, r := range res.rows() {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.step, r.req, r.metric, r.base, r.cand, r.change, r.threshold, r.status)
	}
	tw.Flush()
	fmt.Fprintln(w)
	for _, warning := range res.Warnings {
		fmt.Fprintf(w, "WARNING: %s\n", warning)
	}
	if len(res.Warnings) > 0 {
		fmt.Fprintln(w)
	}
	if !res.Regression {
		fmt.Fprintln(w, "no regression")
		return
	}
	fmt.Fprintf(w, "REGRESSION (%d):\n", len(res.Findings))
	for _, f := range res.Findings {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

// WriteWarnings prints each warning as a line of its own, for stderr beside a JSON or
// Markdown document.
func (res *Result) WriteWarnings(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) {
		for _, warning := range res.Warnings {
			fmt.Fprintf(w, "kvbench: warning: %s\n", warning)
		}
	})
}

// WriteMarkdown prints the comparison as Markdown, e.g. for a CI job summary.
func (res *Result) WriteMarkdown(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { res.writeMarkdown(w) })
}

// writeMarkdown writes what WriteMarkdown writes.
func (res *Result) writeMarkdown(w io.Writer) {
	headline := "No regression"
	if res.Regression {
		headline = fmt.Sprintf("Regression: %d finding(s)", len(res.Findings))
	}
	fmt.Fprintf(w, "## kvbench compare: %s\n\n", headline)
	fmt.Fprintf(w, "| | run | scenario | observed | repetitions |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| baseline | `%s` | %s | %s | %d |\n", res.Baseline.Dir, res.Baseline.Scenario, res.Baseline.ObservedAt, res.Baseline.Repetitions)
	fmt.Fprintf(w, "| candidate | `%s` | %s | %s | %d |\n\n", res.Candidate.Dir, res.Candidate.Scenario, res.Candidate.ObservedAt, res.Candidate.Repetitions)
	fmt.Fprintf(w, "Tolerance %s; noise %s.\n\n", units.Share(res.Tolerance), res.Noise)
	if res.Salted != "" {
		fmt.Fprintf(w, "Prompts: %s.\n\n", res.Salted)
	}
	for _, n := range res.unfinished() {
		fmt.Fprintf(w, "> **Incomplete (allowed):** %s\n\n", n)
	}
	for _, m := range res.Mismatches {
		fmt.Fprintf(w, "> **Mismatch (allowed):** %s: baseline `%s`, candidate `%s`\n\n", m.Field, m.Baseline, m.Candidate)
	}
	for _, m := range res.ServerChanges {
		fmt.Fprintf(w, "> **Server changed:** %s: baseline `%s`, candidate `%s`\n\n", m.Field, m.Baseline, m.Candidate)
	}
	if res.Regression {
		for _, f := range res.Findings {
			fmt.Fprintf(w, "- **%s**\n", f)
		}
		fmt.Fprintln(w)
	}
	for _, warning := range res.Warnings {
		fmt.Fprintf(w, "> **Cannot tell:** %s\n\n", warning)
	}
	fmt.Fprintln(w, "| step | req | metric | baseline | candidate | change | threshold | status |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---|")
	for _, r := range res.rows() {
		status := r.status
		if status == string(stats.Regressed) {
			status = "**" + status + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.step, r.req, r.metric, r.base, r.cand, r.change, r.threshold, status)
	}
}

// unfinished describes each side whose run did not finish.
func (res *Result) unfinished() []string {
	var out []string
	for _, side := range []struct {
		name string
		ref  RunRef
	}{{"baseline", res.Baseline}, {"candidate", res.Candidate}} {
		if side.ref.Status != "" && side.ref.Status != "completed" {
			out = append(out, fmt.Sprintf("%s is %s: %s", side.name, side.ref.Status, side.ref.StopReason))
		}
	}
	return out
}

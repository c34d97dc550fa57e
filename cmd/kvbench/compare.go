package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/claims"
	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/stats"
)

func init() {
	register(command{name: "compare", summary: "compare a candidate run with a baseline run (exit 4 on regression)", run: runCompare})
}

func runCompare(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("compare", "BASELINE_RUN CANDIDATE_RUN [flags]",
		"kvbench compare baselines/eviction-6x150k-replay results/eviction-6x150k-replay-20260802T061907Z\nkvbench compare base/ cand/ --format markdown >> \"$GITHUB_STEP_SUMMARY\"", stdout)
	format := fs.String("format", "text", "output: text (table), json or markdown")
	tolerance := fs.Float64("tolerance", compare.DefaultTolerance, "relative change below which nothing counts (0.10 = 10%), whatever the noise")
	allow := fs.Bool("allow-mismatch", false, "compare runs of different scenarios, models or prompt identities anyway")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 2 {
		return usageErrorf("compare: want a baseline and a candidate run directory, got %d arguments", len(args))
	}
	if *format != "text" && *format != "json" && *format != "markdown" {
		return usageErrorf("compare: --format must be text, json or markdown")
	}
	if *tolerance < 0 {
		return usageErrorf("compare: --tolerance must not be negative")
	}
	loaded, err := loadRunDirs(args)
	if err != nil {
		return err
	}
	res, err := compare.Compare(loaded[0], loaded[1], compare.Options{Tolerance: *tolerance, AllowMismatch: *allow})
	if err != nil {
		if errors.Is(err, compare.ErrMismatch) {
			return usageError(err)
		}
		return err
	}
	switch *format {
	case "json":
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(res); err != nil {
			return err
		}
	case "markdown":
		printCompareMarkdown(stdout, res)
	default:
		printCompareText(stdout, res)
	}
	return compareError(res)
}

// compareError maps a regression to its exit code.
func compareError(res *compare.Result) error {
	if !res.Regression {
		return nil
	}
	return &exitError{code: exitRegression, err: fmt.Errorf("%d regression(s): %s", len(res.Findings), strings.Join(res.Findings, "; "))}
}

// compareRow is one line of the comparison table.
type compareRow struct {
	step, req, metric, base, cand, change, threshold, status string
}

func compareRows(res *compare.Result) []compareRow {
	var rows []compareRow
	for _, st := range res.Steps {
		if st.Verdict != nil {
			rows = append(rows, compareRow{st.Step, "0", "verdict", strings.Join(st.Verdict.Baseline, ", "), strings.Join(st.Verdict.Candidate, ", "), "-", "-", string(st.Verdict.Status)})
		}
		for _, q := range st.Requests {
			for _, m := range q.Metrics {
				change, threshold := "-", compare.Share(m.Threshold)
				if m.Relative != nil {
					change = compare.Percent(*m.Relative)
				}
				rows = append(rows, compareRow{st.Step, fmt.Sprint(q.Index), m.Metric, summaryText(m.Baseline), summaryText(m.Candidate), change, threshold, string(m.Judgement)})
			}
		}
	}
	return rows
}

// summaryText is a median with its relative spread when repeated: "120.3 (spread 4.1%, n=3)".
func summaryText(s stats.Summary) string {
	if s.N == 0 {
		return "absent"
	}
	text := claims.Number(*s.Median)
	if s.N > 1 && s.RelativeSpread != nil {
		text += fmt.Sprintf(" (spread %.1f%%, n=%d)", *s.RelativeSpread*100, s.N)
	}
	return text
}

func printCompareText(w io.Writer, res *compare.Result) {
	fmt.Fprintf(w, "baseline:  %s (%s, %s, %d repetition(s))\n", res.Baseline.Dir, res.Baseline.Scenario, res.Baseline.ObservedAt, res.Baseline.Repetitions)
	fmt.Fprintf(w, "candidate: %s (%s, %s, %d repetition(s))\n", res.Candidate.Dir, res.Candidate.Scenario, res.Candidate.ObservedAt, res.Candidate.Repetitions)
	fmt.Fprintf(w, "tolerance %s; noise %s\n", compare.Share(res.Tolerance), res.Noise)
	for _, m := range res.Mismatches {
		fmt.Fprintf(w, "MISMATCH (allowed): %s: baseline %q, candidate %q\n", m.Field, m.Baseline, m.Candidate)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tREQ\tMETRIC\tBASELINE\tCANDIDATE\tCHANGE\tTHRESHOLD\tSTATUS")
	for _, r := range compareRows(res) {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\t%s\t%s\t%s\n", r.step, r.req, r.metric, r.base, r.cand, r.change, r.threshold, r.status)
	}
	tw.Flush()
	fmt.Fprintln(w)
	if !res.Regression {
		fmt.Fprintln(w, "no regression")
		return
	}
	fmt.Fprintf(w, "REGRESSION (%d):\n", len(res.Findings))
	for _, f := range res.Findings {
		fmt.Fprintf(w, "  - %s\n", f)
	}
}

func printCompareMarkdown(w io.Writer, res *compare.Result) {
	headline := "No regression"
	if res.Regression {
		headline = fmt.Sprintf("Regression: %d finding(s)", len(res.Findings))
	}
	fmt.Fprintf(w, "## kvbench compare: %s\n\n", headline)
	fmt.Fprintf(w, "| | run | scenario | observed | repetitions |\n|---|---|---|---|---|\n")
	fmt.Fprintf(w, "| baseline | `%s` | %s | %s | %d |\n", res.Baseline.Dir, res.Baseline.Scenario, res.Baseline.ObservedAt, res.Baseline.Repetitions)
	fmt.Fprintf(w, "| candidate | `%s` | %s | %s | %d |\n\n", res.Candidate.Dir, res.Candidate.Scenario, res.Candidate.ObservedAt, res.Candidate.Repetitions)
	fmt.Fprintf(w, "Tolerance %s; noise %s.\n\n", compare.Share(res.Tolerance), res.Noise)
	for _, m := range res.Mismatches {
		fmt.Fprintf(w, "> **Mismatch (allowed):** %s: baseline `%s`, candidate `%s`\n\n", m.Field, m.Baseline, m.Candidate)
	}
	if res.Regression {
		for _, f := range res.Findings {
			fmt.Fprintf(w, "- **%s**\n", f)
		}
		fmt.Fprintln(w)
	}
	fmt.Fprintln(w, "| step | req | metric | baseline | candidate | change | threshold | status |")
	fmt.Fprintln(w, "|---|---:|---|---:|---:|---:|---:|---|")
	for _, r := range compareRows(res) {
		status := r.status
		if status == string(stats.Regressed) {
			status = "**" + status + "**"
		}
		fmt.Fprintf(w, "| %s | %s | %s | %s | %s | %s | %s | %s |\n", r.step, r.req, r.metric, r.base, r.cand, r.change, r.threshold, status)
	}
}

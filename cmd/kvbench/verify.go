package main

import (
	"context"
	"encoding/json"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvil-serving/kvbench/harness/claims"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

func init() {
	register(command{name: "verify", summary: "check a recipe's claimed numbers against runs (exit 3 unless all reproduced)", run: runVerify})
}

// verifyRecord is what kvbench verify writes: the claim, the runs it was checked against, a
// result per claimed value, and the claim's source in seed 001's sources shape.
type verifyRecord struct {
	Schema        string          `json:"schema"`
	CheckedAt     string          `json:"checked_at"`
	Claim         claimRef        `json:"claim"`
	Runs          []verifiedRun   `json:"runs"`
	Results       []claims.Result `json:"results"`
	Reproduced    int             `json:"reproduced"`
	NotReproduced int             `json:"not_reproduced"`
	NotMeasurable int             `json:"not_measurable"`
	AllReproduced bool            `json:"all_reproduced"`
	Sources       []any           `json:"sources"`
	Kvbench       map[string]any  `json:"kvbench"`
}

type claimRef struct {
	Path        string `json:"path"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

type verifiedRun struct {
	Dir         string `json:"dir"`
	Scenario    string `json:"scenario"`
	ObservedAt  string `json:"observed_at"`
	Status      string `json:"status"`
	Repetitions int    `json:"repetitions"`
}

func runVerify(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("verify", "CLAIM.toml RUN_DIR... [flags]",
		"kvbench verify claims/ds4-offload16.toml results/eviction-6x150k-replay-20260802T061907Z\nkvbench verify claim.toml results/a results/b --format json --out results/verify.json", stdout)
	format := fs.String("format", "text", "output: text (table) or json (the verify record)")
	out := fs.String("out", "", "also write the verify record to this file (never overwritten)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) < 2 {
		return usageErrorf("verify: want a claim file and at least one run directory, got %d arguments", len(args))
	}
	if *format != "text" && *format != "json" {
		return usageErrorf("verify: --format must be text or json")
	}
	claim, err := claims.Load(args[0])
	if err != nil {
		return usageError(err)
	}
	loaded, err := loadRunDirs(args[1:])
	if err != nil {
		return err
	}
	rec := verifyRecord{
		Schema:    claims.Schema,
		CheckedAt: time.Now().UTC().Format(time.RFC3339),
		Claim:     claimRef{Path: claim.Path, Title: claim.Title, Description: claim.Description},
		Kvbench:   map[string]any{"version": kvbenchVersion()},
	}
	for _, r := range loaded {
		rec.Runs = append(rec.Runs, verifiedRun{Dir: r.Dir, Scenario: r.Scenario.Name, ObservedAt: r.ObservedAt, Status: r.Status, Repetitions: len(r.Repetitions)})
	}
	for _, e := range claim.Expect {
		rec.Results = append(rec.Results, claims.Evaluate(e, claims.Measure(loaded, e)))
	}
	rec.Reproduced, rec.NotReproduced, rec.NotMeasurable = claims.Counts(rec.Results)
	rec.AllReproduced = rec.Reproduced == len(rec.Results)
	rec.Sources = append(rec.Sources, claim.Source)
	for _, r := range loaded {
		rec.Sources = append(rec.Sources, map[string]string{"path": r.Dir + "/run.json", "evidence_type": "kvbench run record", "observed_date": dateOf(r.ObservedAt)})
	}
	if *out != "" {
		if _, err := record.WriteJSON(*out, rec); err != nil {
			return err
		}
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		if err := enc.Encode(rec); err != nil {
			return err
		}
	} else {
		printVerify(stdout, claim, rec)
	}
	if !rec.AllReproduced {
		return &exitError{code: exitGateFailed, err: fmt.Errorf("%d of %d claimed values reproduced (%d not reproduced, %d not measurable)",
			rec.Reproduced, len(rec.Results), rec.NotReproduced, rec.NotMeasurable)}
	}
	return nil
}

func printVerify(w io.Writer, claim *claims.File, rec verifyRecord) {
	fmt.Fprintf(w, "claim: %s (%s)\n", orDash(claim.Title), claim.Path)
	s := claim.Source
	fmt.Fprintf(w, "source: %s (observed %s, %s)\n", s.URL, s.ObservedDate, orDash(s.EvidenceType))
	if s.Recipe != "" {
		fmt.Fprintf(w, "recipe: %s\n", s.Recipe)
	}
	for _, r := range rec.Runs {
		fmt.Fprintf(w, "run: %s (%s, %s, %d repetition(s))\n", r.Dir, r.Scenario, r.ObservedAt, r.Repetitions)
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tMETRIC\tCLAIMED\tMEASURED (median, min..max, spread)\tSTATUS")
	for _, r := range rec.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Step, r.Metric, r.Claimed, measuredText(r), r.Status)
	}
	tw.Flush()
	for _, r := range rec.Results {
		fmt.Fprintf(w, "%s %s: %s: %s\n", r.Step, r.Metric, r.Status, r.Why)
	}
	fmt.Fprintf(w, "%d of %d claimed values reproduced\n", rec.Reproduced, len(rec.Results))
}

func measuredText(r claims.Result) string {
	if r.Measured == nil {
		if len(r.Values) == 0 {
			return "-"
		}
		return strings.Join(r.Values, ", ")
	}
	m := r.Measured
	if m.N == 0 {
		return "absent"
	}
	if m.N == 1 {
		return claims.Number(*m.Median)
	}
	spread := "-"
	if m.RelativeSpread != nil {
		spread = claims.Number(*m.RelativeSpread*100) + "%"
	}
	return fmt.Sprintf("%s (%s..%s, %s, n=%d)", claims.Number(*m.Median), claims.Number(*m.Min), claims.Number(*m.Max), spread, m.N)
}

// loadRunDirs loads run directories; an unreadable or changed run is bad input (exit 2).
func loadRunDirs(dirs []string) ([]*runs.Run, error) {
	var out []*runs.Run
	for _, d := range dirs {
		r, err := runs.Load(d)
		if err != nil {
			return nil, usageError(err)
		}
		out = append(out, r)
	}
	return out, nil
}

func dateOf(rfc3339 string) string {
	if len(rfc3339) >= 10 {
		return rfc3339[:10]
	}
	return rfc3339
}

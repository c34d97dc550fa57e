package claims

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Record is what kvbench verify writes: the claim, the runs it was checked against, a
// result per claimed value, and the claim's source in the seed records' sources shape.
type Record struct {
	Schema        string        `json:"schema"`
	CheckedAt     string        `json:"checked_at"`
	Claim         ClaimRef      `json:"claim"`
	Runs          []VerifiedRun `json:"runs"`
	Results       []Result      `json:"results"`
	Reproduced    int           `json:"reproduced"`
	NotReproduced int           `json:"not_reproduced"`
	NotMeasurable int           `json:"not_measurable"`
	AllReproduced bool          `json:"all_reproduced"`
	Sources       []any         `json:"sources"`
	Kvbench       struct {
		Version string `json:"version"`
	} `json:"kvbench"`

	claim *File
}

// ClaimRef names the claim file checked.
type ClaimRef struct {
	Path        string `json:"path"`
	Title       string `json:"title"`
	Description string `json:"description,omitempty"`
}

// VerifiedRun names one run the claim was checked against.
type VerifiedRun struct {
	Dir         string `json:"dir"`
	Scenario    string `json:"scenario"`
	ObservedAt  string `json:"observed_at"`
	Status      string `json:"status"`
	StopReason  string `json:"stop_reason,omitempty"`
	Repetitions int    `json:"repetitions"`
}

// RunSource is a run record in a verify record's sources.
type RunSource struct {
	Path         string `json:"path"`
	EvidenceType string `json:"evidence_type"`
	ObservedDate string `json:"observed_date"`
}

// Verify checks every expectation of claim against every repetition of rs.
func Verify(claim *File, rs []*runs.Run, kvbenchVersion string, now time.Time) *Record {
	rec := &Record{
		Schema:    Schema,
		CheckedAt: now.UTC().Format(time.RFC3339),
		Claim:     ClaimRef{Path: claim.Path, Title: claim.Title, Description: claim.Description},
		claim:     claim,
	}
	rec.Kvbench.Version = kvbenchVersion
	for _, r := range rs {
		rec.Runs = append(rec.Runs, VerifiedRun{Dir: r.Dir, Scenario: r.Scenario.Name, ObservedAt: r.ObservedAt, Status: r.Status, StopReason: r.StopReason, Repetitions: len(r.Repetitions)})
	}
	for _, e := range claim.Expect {
		rec.Results = append(rec.Results, Evaluate(e, Measure(rs, e)))
	}
	rec.Reproduced, rec.NotReproduced, rec.NotMeasurable = Counts(rec.Results)
	rec.AllReproduced = rec.Reproduced == len(rec.Results)
	rec.Sources = append(rec.Sources, claim.Source)
	for _, r := range rs {
		rec.Sources = append(rec.Sources, RunSource{Path: r.Dir + "/run.json", EvidenceType: "kvbench run record", ObservedDate: dateOf(r.ObservedAt)})
	}
	return rec
}

// VerifyFiles loads the claim file and the runs in dirs and checks the claim against them
// (Verify). Every error is bad input: a claim or a run that does not load.
func VerifyFiles(claimPath string, dirs []string, kvbenchVersion string, now time.Time) (*Record, error) {
	claim, err := Load(claimPath)
	if err != nil {
		return nil, err
	}
	rs, err := runs.LoadAll(dirs)
	if err != nil {
		return nil, err
	}
	return Verify(claim, rs, kvbenchVersion, now), nil
}

// Summary says in one line how many claimed values reproduced.
func (rec *Record) Summary() string {
	return fmt.Sprintf("%d of %d claimed values reproduced (%d not reproduced, %d not measurable)",
		rec.Reproduced, len(rec.Results), rec.NotReproduced, rec.NotMeasurable)
}

// WriteText prints the verification for a person: claim, source, runs, a row per value.
func (rec *Record) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { rec.writeText(w) })
}

// writeText writes what WriteText writes.
func (rec *Record) writeText(w io.Writer) {
	claim := rec.claim
	fmt.Fprintf(w, "claim: %s (%s)\n", units.Text(claim.Title), claim.Path)
	s := claim.Source
	fmt.Fprintf(w, "source: %s (observed %s, %s)\n", s.URL, s.ObservedDate, units.Text(s.EvidenceType))
	if s.Recipe != "" {
		fmt.Fprintf(w, "recipe: %s\n", s.Recipe)
	}
	for _, r := range rec.Runs {
		fmt.Fprintf(w, "run: %s (%s, %s, %d repetition(s))\n", r.Dir, r.Scenario, r.ObservedAt, r.Repetitions)
		if r.Status != "completed" {
			fmt.Fprintf(w, "  this run is %s: %s; its values come only from the steps it measured\n", strings.ToUpper(r.Status), r.StopReason)
		}
	}
	fmt.Fprintln(w)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	fmt.Fprintln(tw, "STEP\tMETRIC\tCLAIMED\tMEASURED (median, min..max, spread)\tSTATUS")
	for _, r := range rec.Results {
		fmt.Fprintf(tw, "%s\t%s\t%s\t%s\t%s\n", r.Step, r.Metric, r.Claimed, r.MeasuredText(), r.Status)
	}
	tw.Flush()
	for _, r := range rec.Results {
		fmt.Fprintf(w, "%s %s: %s: %s\n", r.Step, r.Metric, r.Status, r.Why)
	}
	fmt.Fprintf(w, "%d of %d claimed values reproduced\n", rec.Reproduced, len(rec.Results))
}

// MeasuredText is the measured value as the table shows it: the median with its range and
// spread when repeated, the words for a textual claim, "absent" when nothing measured it.
func (r Result) MeasuredText() string {
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
		return units.Number(*m.Median)
	}
	spread := "-"
	if m.RelativeSpread != nil {
		spread = units.Number(*m.RelativeSpread*100) + "%"
	}
	return fmt.Sprintf("%s (%s..%s, %s, n=%d)", units.Number(*m.Median), units.Number(*m.Min), units.Number(*m.Max), spread, m.N)
}

func dateOf(rfc3339 string) string {
	if len(rfc3339) >= 10 {
		return rfc3339[:10]
	}
	return rfc3339
}

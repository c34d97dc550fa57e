package compare

import (
	"encoding/json"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// Write prints res as format: "json" (the comparison record), "markdown" (WriteMarkdown) or
// text (WriteText).
func (res *Result) Write(w io.Writer, format string) error {
	return write(w, format, res, res.WriteText, res.WriteMarkdown)
}

// Write prints r as format: "json", "markdown" or text, as a run comparison prints.
func (r *SweepResult) Write(w io.Writer, format string) error {
	return write(w, format, r, r.WriteText, r.WriteMarkdown)
}

// write is the one choice of format for both comparisons; JSON is indented as every kvbench
// --format json is.
func write(w io.Writer, format string, v any, text, markdown func(io.Writer) error) error {
	switch format {
	case "json":
		enc := json.NewEncoder(w)
		enc.SetIndent("", "  ")
		return enc.Encode(v)
	case "markdown":
		return markdown(w)
	}
	return text(w)
}

// Regressions returns the regressions res found as one error; nil when there are none.
func (res *Result) Regressions() error {
	if !res.Regression {
		return nil
	}
	return fmt.Errorf("%d regression(s): %s", len(res.Findings), strings.Join(res.Findings, "; "))
}

// Regressions returns the capacity regression r found as one error; nil when there is none.
func (r *SweepResult) Regressions() error {
	if !r.Regression {
		return nil
	}
	return fmt.Errorf("capacity regression: %s", strings.Join(r.Findings, "; "))
}

// SweepDirs compares the sweeps in two directories (each holding sweep.json, its levels
// checked by runs.LoadSweep), each side named by its directory. Every error is bad input:
// a sweep that does not load, or sweeps that do not compare (CompareSweeps).
func SweepDirs(baseDir, candDir string, tolerance float64, allowMismatch bool) (*SweepResult, error) {
	base, err := runs.LoadSweep(baseDir)
	if err != nil {
		return nil, err
	}
	cand, err := runs.LoadSweep(candDir)
	if err != nil {
		return nil, err
	}
	return CompareSweeps(base, cand, baseDir, candDir, tolerance, allowMismatch)
}

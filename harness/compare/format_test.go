package compare

import (
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

// TestWriteChoosesTheFormat: a run comparison and a sweep comparison print each format the
// same way: json is the comparison indented as kvbench writes JSON, markdown and text are
// WriteMarkdown's and WriteText's.
func TestWriteChoosesTheFormat(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	sweep, err := CompareSweeps(sweepOf(20, 40, 90, 300), sweepOf(20, 40, 180, 400), "b", "c", DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	for _, c := range []struct {
		name           string
		v              any
		write          func(io.Writer, string) error
		text, markdown func(io.Writer) error
	}{
		{"runs", res, res.Write, res.WriteText, res.WriteMarkdown},
		{"sweeps", sweep, sweep.Write, sweep.WriteText, sweep.WriteMarkdown},
	} {
		js, err := json.MarshalIndent(c.v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		var text, md bytes.Buffer
		c.text(&text)
		c.markdown(&md)
		for format, want := range map[string]string{"json": string(js) + "\n", "markdown": md.String(), "text": text.String()} {
			var got bytes.Buffer
			if err := c.write(&got, format); err != nil {
				t.Fatal(err)
			}
			if got.String() != want || want == "" {
				t.Errorf("%s as %s:\n%s\nwant:\n%s", c.name, format, got.String(), want)
			}
		}
	}
}

func TestRegressionsAsAnError(t *testing.T) {
	res := mustCompare(t, load(t, "baseline"), load(t, "candidate"), Options{Tolerance: DefaultTolerance})
	err := res.Regressions()
	if err == nil || !strings.HasPrefix(err.Error(), "12 regression(s): ") || !strings.Contains(err.Error(), "; "+res.Findings[1]) {
		t.Errorf("regressions: %v", err)
	}
	if err := mustCompare(t, load(t, "baseline"), load(t, "baseline"), Options{Tolerance: DefaultTolerance}).Regressions(); err != nil {
		t.Errorf("a self-comparison: %v", err)
	}
	lost, err := CompareSweeps(sweepOf(20, 40, 90, 300), sweepOf(150, 200, 300, 400), "b", "c", DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	if err := lost.Regressions(); err == nil || err.Error() != "capacity regression: "+strings.Join(lost.Findings, "; ") {
		t.Errorf("capacity lost: %v", err)
	}
	same, _ := CompareSweeps(sweepOf(20, 40, 90, 300), sweepOf(20, 40, 90, 300), "b", "c", DefaultTolerance, false)
	if err := same.Regressions(); err != nil {
		t.Errorf("the same sweep: %v", err)
	}
}

// writeSweep writes s as dir/sweep.json; its levels name no run directory, so none is checked.
func writeSweep(t *testing.T, s *record.Sweep) string {
	t.Helper()
	dir := t.TempDir()
	data, err := json.Marshal(s)
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "sweep.json"), data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestSweepDirsLoadsAndCompares: the sweeps are read from their directories, each side named
// by its directory; a directory without sweep.json and sweeps that do not compare are errors.
func TestSweepDirsLoadsAndCompares(t *testing.T) {
	base, cand := writeSweep(t, sweepOf(20, 40, 90, 300)), writeSweep(t, sweepOf(20, 40, 180, 400))
	res, err := SweepDirs(base, cand, DefaultTolerance, false)
	if err != nil {
		t.Fatal(err)
	}
	if res.Baseline != base || res.Candidate != cand || !res.Regression {
		t.Errorf("baseline %s, candidate %s, regression %v; want %s, %s, true", res.Baseline, res.Candidate, res.Regression, base, cand)
	}
	if _, err := SweepDirs(base, t.TempDir(), DefaultTolerance, false); err == nil || !strings.Contains(err.Error(), "not a sweep directory") {
		t.Errorf("no sweep.json: %v", err)
	}
	other := sweepOf(20)
	other.Scenario = "other"
	if _, err := SweepDirs(base, writeSweep(t, other), DefaultTolerance, false); !errors.Is(err, ErrMismatch) {
		t.Errorf("different scenarios: %v, want ErrMismatch", err)
	}
}

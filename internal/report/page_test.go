package report

import (
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// TestPageShowsWhatDiffersRatherThanRefusing: two runs of one scenario whose models differ
// and one of which did not finish, which compare refuses, are still compared on the page,
// with the time it was generated in UTC.
func TestPageShowsWhatDiffersRatherThanRefusing(t *testing.T) {
	b, c := load(t, filepath.Join(compareDir, "baseline")), load(t, filepath.Join(compareDir, "candidate"))
	other := *c.Run
	other.Model.Repo, other.Status = "another/model", record.StatusInterrupted
	c.Run = &other
	if _, err := Build("", "g", []*runs.Run{b, c}, compareOptions(false)); err == nil {
		t.Fatal("the fixture compares without being allowed: the test would prove nothing")
	}
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.FixedZone("CET", 3600))
	page, err := Page("", []*runs.Run{b, c}, 0.10, at)
	if err != nil {
		t.Fatal(err)
	}
	text := visibleText(string(page))
	for _, want := range []string{"generated 2026-12-01T08:00:00Z", "Comparison: regression", "another/model"} {
		if !strings.Contains(text, want) {
			t.Errorf("the page lacks %q", want)
		}
	}
}

package report

import (
	"fmt"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/units"
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
	page, err := Page("", []*runs.Run{b, c}, nil, 0.10, at)
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

// section is the HTML of the page element with id, up to its closing tag name.
func section(t *testing.T, page, tag, id string) string {
	t.Helper()
	m := regexp.MustCompile(`(?s)<` + tag + `[^>]* id="` + regexp.QuoteMeta(id) + `".*?</` + tag + `>`).FindString(page)
	if m == "" {
		t.Fatalf("the page has no <%s id=%q>", tag, id)
	}
	return m
}

// TestPageLeadsWithTheAnswer: the page opens with PASS or FAIL, every gate with its reason,
// then per replay its verdict, offload gain, fidelity, reload bandwidth and setup; each
// step's TTFT percentiles follow, the run's own numbers.
func TestPageLeadsWithTheAnswer(t *testing.T) {
	r := load(t, primaryDir)
	ratio, saved := 3.25, 1.2
	replay, twin := 400.0, 1300.0
	r.Replay("replay").OffloadGain = &record.OffloadGain{ColdTwin: "cache_salt", TwinMissed: record.AnswerYes, ReplayTTFTMS: &replay, TwinTTFTMS: &twin, TTFTRatio: &ratio, PrefillSecondsSaved: &saved}
	page := render(t, Collect("t", "g", []*runs.Run{r}, nil))
	answer := section(t, page, "div", "answer")
	if !strings.Contains(answer, `<p class="answer pass">PASS</p>`) || strings.Index(page, `id="answer"`) > strings.Index(page, `<table class="identity">`) {
		t.Fatalf("the page does not lead with PASS:\n%s", answer)
	}
	gates := visibleText(section(t, page, "table", "gates"))
	for _, want := range r.CheckGates() {
		if !want.Passed || !strings.Contains(gates, want.Gate.Step) || !strings.Contains(gates, want.Reason) {
			t.Errorf("gate %s (%s) not on the page: %s", want.Gate.Step, want.Reason, gates)
		}
	}
	if !strings.Contains(gates, "verdict=cpu_reload") || strings.Count(gates, " pass ") != 2 {
		t.Errorf("gates table %s", gates)
	}
	sec := r.Replay("replay")
	replays := visibleText(section(t, page, "table", "replays"))
	for _, want := range []string{"cpu_reload", sec.OffloadGain.Words(), sec.ReloadFidelity.Words(), "290 GB/s", "yes: " + sec.SetupReason} {
		if !strings.Contains(replays, visibleText(want)) {
			t.Errorf("replays table lacks %q: %s", want, replays)
		}
	}
	if !strings.Contains(replays, "3.25") {
		t.Errorf("the gain's ratio is not shown: %s", replays)
	}

	// TTFT percentiles per step are the artifacts' nearest ranks.
	var ttft []float64
	for _, q := range readArtifact(t, primaryDir, "step-01-eviction_sequence.json").Requests {
		ttft = append(ttft, *q.Result.TTFT)
	}
	want := derive.PercentilesOf(ttft)
	steps := visibleText(section(t, page, "table", "step-ttft-0"))
	row := fmt.Sprintf("eviction_sequence sequence 6 %s %s %s", units.Value(want.P50), units.Value(want.P90), units.Value(want.P99))
	if !strings.Contains(steps, row) {
		t.Errorf("TTFT table lacks %q: %s", row, steps)
	}

	// A gate that fails turns the answer to FAIL with the gate's reason.
	r.Scenario.Gates[1].MinCachedFraction = 1
	page = render(t, Collect("t", "g", []*runs.Run{r}, nil))
	answer = visibleText(section(t, page, "div", "answer"))
	if !strings.HasPrefix(answer, "FAIL") || !strings.Contains(answer, "gate replay (") || !strings.Contains(answer, ">= 1") {
		t.Errorf("a failed gate does not fail the page: %s", answer)
	}
}

// TestNightlyPageShowsServerChangesAndGates: a nightly's comparison shows, beside its
// regressions, what changed on the server and the answer they make: FAIL.
func TestNightlyPageShowsServerChangesAndGates(t *testing.T) {
	b, c := load(t, filepath.Join(compareDir, "baseline")), load(t, filepath.Join(compareDir, "candidate"))
	// The candidate's gate is the night's; the baseline's, its own night's answer, is not.
	b.Scenario.Gates = []record.Gate{{Step: "replay", Verdict: "gpu_hit"}}
	c.Scenario.Gates = []record.Gate{{Step: "replay", Verdict: "cpu_reload"}}
	page, err := Page("", []*runs.Run{b, c}, nil, 0.10, time.Unix(0, 0))
	if err != nil {
		t.Fatal(err)
	}
	text := visibleText(string(page))
	if !strings.Contains(text, "server changed: cache.cpu_offload_gib: baseline 0.015625, candidate 0.00390625") {
		t.Errorf("no server change on the page: %s", text)
	}
	answer := visibleText(section(t, string(page), "div", "answer"))
	if !strings.HasPrefix(answer, "FAIL") || !strings.Contains(answer, "regression: replay: verdict cpu_reload -> recompute") ||
		!strings.Contains(answer, "1 gate(s); compared with the baseline") || !strings.Contains(answer, "gate replay (verdict=cpu_reload) on nightly-tiny: verdict recompute") {
		t.Errorf("answer %s", answer)
	}
	if strings.Contains(answer, "gpu_hit") {
		t.Errorf("the baseline's gate is in the answer: %s", answer)
	}
}

// TestSweepPageShowsItsCapacityTable: a sweep's page is framed as a sweep, with a row per
// level and its capacity, not as a study of a primary run and controls.
func TestSweepPageShowsItsCapacityTable(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	yes, no := true, false
	users := 4
	sw := &record.Sweep{Scenario: "chat", Step: "chat", Status: "completed", TTFTP90ThresholdMS: f(500), CapacityUsers: &users, CapacityReason: "4 users is the most within TTFT p90 500 ms",
		Levels: []record.SweepLevel{
			{Users: 4, Status: "completed", Requests: 40, TTFTMS: record.Percentiles{N: 40, P50: f(120), P90: f(410), P99: f(480)}, Tiers: record.TierShares{Host: f(0.25)}, WithinThreshold: &yes},
			{Users: 8, Status: "completed", Requests: 80, FailedRequests: 1, TTFTMS: record.Percentiles{N: 79, P50: f(300), P90: f(900), P99: f(1500)}, WithinThreshold: &no},
		}}
	primary, control := load(t, primaryDir), load(t, controlDir)
	d, err := BuildSweeps("", "g", []*runs.Run{primary, control}, []*record.Sweep{sw}, compareOptions(false))
	if err != nil {
		t.Fatal(err)
	}
	if d.Kind != KindSweep || d.Title != "kvbench sweep: chat chat" {
		t.Fatalf("kind %s title %q", d.Kind, d.Title)
	}
	page := render(t, d)
	text := visibleText(page)
	if strings.Contains(text, "Study:") || strings.Contains(text, "primary run and its controls") {
		t.Error("a sweep's page is framed as a study")
	}
	table := visibleText(section(t, page, "table", "sweep-0"))
	for _, want := range []string{"4 users completed 40 0 120 410 480 0.2500", "8 users completed 80 1 300 900 1500 absent", "(p90 ≤ 500 ms)", "true", "false"} {
		if !strings.Contains(table, want) {
			t.Errorf("capacity table lacks %q: %s", want, table)
		}
	}
	if c := visibleText(section(t, page, "p", "capacity-0")); c != "capacity: 4 users: 4 users is the most within TTFT p90 500 ms" {
		t.Errorf("capacity line %q", c)
	}
}

// TestTraceShowsItsTierSplitAgainstTheIdeal: a trace step's measured split sits beside the
// ideal's, and the TTFT table reads the trace section's percentiles.
func TestTraceShowsItsTierSplitAgainstTheIdeal(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	rd := RunData{Scenario: "trace", Verdicts: []VerdictRow{}, Requests: []RequestPoint{}, Steps: []StepBytes{}, KVUsage: []UsagePoint{},
		StepTTFT: []StepTTFT{{Step: "trace", Kind: "trace", TTFTMS: record.Percentiles{N: 600, P50: f(80), P90: f(240), P99: f(990)}}},
		Traces: []TraceSplit{{Step: "trace", Requests: 600, Measured: record.TierShares{GPU: f(0.4), Host: f(0.1), Recompute: f(0.5)},
			Ideal: &record.IdealTiers{IdealShares: record.IdealShares{GPUShare: 0.45, HostShare: 0.3, RecomputeShare: 0.25}}, Finding: "the host tier served a third of what an ideal one would"}}}
	page := render(t, Data{Title: "t", Kind: KindRuns, Runs: []RunData{rd}})
	text := visibleText(page)
	for _, want := range []string{"Trace trace: measured tier split against the ideal", "measured (600 requests) 0.4000 0.1000 0.5000",
		"ideal at the server's pool sizes 0.4500 0.3000 0.2500", "the host tier served a third", "trace trace 600 80 240 990"} {
		if !strings.Contains(text, want) {
			t.Errorf("page lacks %q", want)
		}
	}
	if strings.Contains(text, "no replay step") {
		t.Error(`a trace run's page says "no replay step"`)
	}
}

package main

import (
	"context"
	"encoding/json"
	"html"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
)

// reportData is the part of the embedded chart data the tests check.
type reportData struct {
	Kind string `json:"kind"`
	Runs []struct {
		Scenario string `json:"scenario"`
		Verdicts []struct {
			Step        string   `json:"step"`
			Verdict     string   `json:"verdict"`
			Repetitions []string `json:"repetitions"`
		} `json:"verdicts"`
		Requests []struct {
			Label  string   `json:"label"`
			Replay bool     `json:"replay"`
			TTFTMS *float64 `json:"time_to_first_output_ms"`
			Cached *float64 `json:"cached_fraction"`
		} `json:"requests"`
		Steps []struct {
			Step  string   `json:"step"`
			Store *float64 `json:"gpu_to_cpu_bytes_delta"`
			Load  *float64 `json:"cpu_to_gpu_bytes_delta"`
		} `json:"steps"`
		KVUsage []struct {
			TMS     float64 `json:"t_ms"`
			KVUsage float64 `json:"kv_usage"`
		} `json:"kv_usage"`
	} `json:"runs"`
	Comparison *struct {
		Regression bool     `json:"regression"`
		Findings   []string `json:"regressions"`
	} `json:"comparison"`
}

var dataScript = regexp.MustCompile(`(?s)<script type="application/json" id="kvbench-data">(.*?)</script>`)

// writeFixtureReport renders the baseline and candidate fixtures as one report.
func writeFixtureReport(t *testing.T) (string, string) {
	t.Helper()
	file := filepath.Join(t.TempDir(), "report.html")
	_, stderr, code := runCLI(t, "report", filepath.Join("testdata", "compare", "baseline"), filepath.Join("testdata", "compare", "candidate"), "-o", file)
	if code != cli.ExitOK {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	return file, string(page)
}

// TestReportChartsCarryTheArtifactsNumbers: the page embeds exactly the numbers of the runs'
// artifacts, draws one bar per measured request, highlights the replay, and fetches nothing.
func TestReportChartsCarryTheArtifactsNumbers(t *testing.T) {
	_, page := writeFixtureReport(t)
	m := dataScript.FindStringSubmatch(page)
	if m == nil {
		t.Fatal("no kvbench-data script in the page")
	}
	var d reportData
	if err := json.Unmarshal([]byte(m[1]), &d); err != nil {
		t.Fatalf("embedded data is not JSON: %v", err)
	}
	if len(d.Runs) != 2 || d.Kind != "comparison" || d.Comparison == nil || !d.Comparison.Regression {
		t.Fatalf("runs %d, kind %q, comparison %+v", len(d.Runs), d.Kind, d.Comparison)
	}
	base, cand := d.Runs[0], d.Runs[1]
	if base.Verdicts[0].Verdict != "cpu_reload" || cand.Verdicts[0].Verdict != "recompute" || len(base.Verdicts[0].Repetitions) != 2 {
		t.Fatalf("verdicts %+v / %+v", base.Verdicts, cand.Verdicts)
	}
	// The chart data is the artifacts' own numbers.
	seq := readArtifact(t, filepath.Join("testdata", "compare", "baseline"), "step-01-sequence.json")
	rep := readArtifact(t, filepath.Join("testdata", "compare", "baseline"), "step-02-replay.json")
	var samples int
	for i, q := range append(seq["requests"].([]any), rep["requests"].([]any)...) {
		res := q.(map[string]any)["result"].(map[string]any)
		if got, want := *base.Requests[i].TTFTMS, res["time_to_first_output_ms"].(float64); got != want {
			t.Errorf("request %d TTFT %v, artifact %v", i, got, want)
		}
		for _, s := range q.(map[string]any)["samples"].(map[string]any)["series"].([]any) {
			if s.(map[string]any)["kv_usage"] != nil {
				samples++
			}
		}
	}
	if len(base.Requests) != 5 || !base.Requests[4].Replay || base.Requests[4].Label != "replay[0]" || base.Requests[0].Replay {
		t.Fatalf("requests %+v", base.Requests)
	}
	if len(base.KVUsage) != samples || samples == 0 {
		t.Fatalf("%d KV usage points, artifacts hold %d samples", len(base.KVUsage), samples)
	}
	if base.Steps[0].Store == nil || *base.Steps[0].Store <= 0 || base.Steps[1].Load == nil || *base.Steps[1].Load <= 0 {
		t.Fatalf("store/load bytes %+v", base.Steps)
	}
	if cand.Steps[1].Load != nil && *cand.Steps[1].Load != 0 {
		t.Fatalf("a recomputed replay loaded %v bytes", *cand.Steps[1].Load)
	}
	// One bar per measured request, the replay's in the highlight colour.
	ttft := regexp.MustCompile(`(?s)<svg id="ttft-0".*?</svg>`).FindString(page)
	if n := strings.Count(ttft, `<rect class="bar"`); n != 5 {
		t.Fatalf("%d TTFT bars, want 5", n)
	}
	if strings.Count(ttft, `fill="#e45756"`) != 1 {
		t.Fatal("the replay is not highlighted")
	}
	// Self-contained: nothing to fetch at view time.
	for _, ref := range []string{"src=", "href=", "url(", "@import", "<link"} {
		if strings.Contains(page, ref) {
			t.Errorf("page references %q", ref)
		}
	}
	if !strings.Contains(page, html.EscapeString("replay: verdict cpu_reload -> recompute")) {
		t.Error("the comparison's verdict regression is not on the page")
	}
}

// TestReportOfAStudy: a primary run and its control (a kvbench demo output) measure different
// scenarios on purpose: the report shows them side by side and calls nothing a regression.
func TestReportOfAStudy(t *testing.T) {
	demo := filepath.Join("..", "..", "internal", "study", "testdata", "demo")
	file := filepath.Join(t.TempDir(), "study.html")
	_, stderr, code := runCLI(t, "report", filepath.Join(demo, "eviction-6x150k-replay-20261201T060008Z"), filepath.Join(demo, "offload8-control-20261201T060010Z"), "-o", file)
	if code != cli.ExitOK {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	m := dataScript.FindSubmatch(page)
	if m == nil {
		t.Fatal("no kvbench-data script in the page")
	}
	var d reportData
	if err := json.Unmarshal(m[1], &d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != "study" || d.Comparison != nil || len(d.Runs) != 2 {
		t.Fatalf("kind %q, comparison %+v, %d runs", d.Kind, d.Comparison, len(d.Runs))
	}
	if d.Runs[0].Verdicts[0].Verdict != "cpu_reload" || d.Runs[1].Verdicts[0].Verdict != "gpu_hit" {
		t.Fatalf("verdicts %+v / %+v", d.Runs[0].Verdicts, d.Runs[1].Verdicts)
	}
	text := string(page)
	for _, s := range []string{"<title>kvbench study: eviction-6x150k-replay, offload8-control</title>", `<div class="study-run" id="study-1">`, "Control section offload8_control"} {
		if !strings.Contains(text, s) {
			t.Errorf("page lacks %q", s)
		}
	}
	for _, s := range []string{"mismatch (allowed)", `id="comparison"`, "Comparison:"} {
		if strings.Contains(text, s) {
			t.Errorf("a study's page has %q", s)
		}
	}
}

// TestReportRendersInChromium renders the report in headless Chromium: the inline script
// checks the drawn charts against the embedded data and writes its marker, and the console
// shows no error. It also leaves a screenshot (KVBENCH_REPORT_SCREENSHOT names a copy).
func TestReportRendersInChromium(t *testing.T) {
	const chromium = "/usr/bin/chromium"
	if _, err := os.Stat(chromium); err != nil {
		t.Skip("no /usr/bin/chromium (bash .ci/install-chromium.sh installs it)")
	}
	file, _ := writeFixtureReport(t)
	browse := func(extra ...string) (string, string) {
		ctx, cancel := context.WithTimeout(context.Background(), 90*time.Second)
		defer cancel()
		args := append([]string{"--headless", "--no-sandbox", "--disable-gpu", "--no-first-run",
			"--disable-background-networking", "--disable-component-update", "--disable-sync",
			"--user-data-dir=" + t.TempDir(), "--enable-logging=stderr", "--v=0", "--window-size=1200,1600"}, extra...)
		cmd := exec.CommandContext(ctx, chromium, append(args, "file://"+file)...)
		var out, errb strings.Builder
		cmd.Stdout, cmd.Stderr = &out, &errb
		if err := cmd.Run(); err != nil {
			t.Fatalf("chromium: %v\n%s", err, errb.String())
		}
		return out.String(), errb.String()
	}
	dom, stderr := browse("--dump-dom")
	if !strings.Contains(dom, `data-status="ok"`) || !strings.Contains(dom, "kvbench-render-ok") {
		m := regexp.MustCompile(`<p id="kvbench-status"[^>]*>[^<]*`).FindString(dom)
		t.Fatalf("the page's own check did not pass: %s\nstderr:\n%s", m, stderr)
	}
	for _, line := range strings.Split(stderr, "\n") {
		if strings.Contains(line, "CONSOLE") || strings.Contains(line, "Uncaught") {
			t.Errorf("console: %s", line)
		}
	}
	shot := filepath.Join(t.TempDir(), "report.png")
	browse("--screenshot=" + shot)
	info, err := os.Stat(shot)
	if err != nil || info.Size() < 10000 {
		t.Fatalf("screenshot %v (%v)", info, err)
	}
	if keep := os.Getenv("KVBENCH_REPORT_SCREENSHOT"); keep != "" {
		data, _ := os.ReadFile(shot)
		os.WriteFile(keep, data, 0o644)
	}
}

// warmCopy is a copy of the candidate fixture whose cold sequence came back cached in both
// repetitions (an earlier run's prompts still in the server), its sha256s updated: a run
// compare refuses whatever it is allowed.
func warmCopy(t *testing.T) string {
	t.Helper()
	dir := copyRunDir(t, filepath.Join("testdata", "compare", "candidate"))
	runJSON, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"step-01-sequence.json", "repeat-01-step-01-sequence.json"} {
		path := filepath.Join(dir, name)
		old, _ := runs.FileSHA256(path)
		data, err := os.ReadFile(path)
		if err != nil {
			t.Fatal(err)
		}
		var art record.StepArtifact
		if err := json.Unmarshal(data, &art); err != nil {
			t.Fatal(err)
		}
		for i := range art.Requests {
			r := &art.Requests[i].Result
			cached := *r.PromptTokens - 8
			r.CachedPromptTokens = &cached
		}
		if data, err = json.Marshal(art); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, data, 0o644); err != nil {
			t.Fatal(err)
		}
		sum, _ := runs.FileSHA256(path)
		runJSON = []byte(strings.ReplaceAll(string(runJSON), old, sum))
	}
	if err := os.WriteFile(filepath.Join(dir, "run.json"), runJSON, 0o644); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestReportOfRunsThatDoNotCompare: a baseline and a candidate that do not compare (the
// candidate measured warm caches) still get the candidate's page, the reason at its top,
// and the command exits 2 naming it.
func TestReportOfRunsThatDoNotCompare(t *testing.T) {
	file := filepath.Join(t.TempDir(), "report.html")
	cand := warmCopy(t)
	stdout, stderr, code := runCLI(t, "report", filepath.Join("testdata", "compare", "baseline"), cand, "-o", file)
	if code != cli.ExitUsage || !strings.Contains(stderr, "the runs do not compare: candidate (") || !strings.Contains(stderr, "measured warm caches") {
		t.Fatalf("exit %d, want 2: %s", code, stderr)
	}
	page, err := os.ReadFile(file)
	if err != nil {
		t.Fatalf("no page written (stdout %q): %v", stdout, err)
	}
	m := dataScript.FindStringSubmatch(string(page))
	if m == nil {
		t.Fatal("no embedded data")
	}
	var d struct {
		reportData
		NotCompared string `json:"not_compared"`
	}
	if err := json.Unmarshal([]byte(html.UnescapeString(m[1])), &d); err != nil {
		t.Fatal(err)
	}
	if d.Kind != "runs" || len(d.Runs) != 1 || d.Comparison != nil || !strings.Contains(d.NotCompared, "not compared with the baseline") {
		t.Errorf("kind %s, %d runs, comparison %v, not compared %q", d.Kind, len(d.Runs), d.Comparison, d.NotCompared)
	}
	if i, j := strings.Index(string(page), `id="not-compared"`), strings.Index(string(page), "<h2>"); i < 0 || (j >= 0 && j < i) {
		t.Errorf("the reason is not at the top of the page (at %d, first heading at %d)", i, j)
	}
	if !strings.Contains(stdout, "report: ") {
		t.Errorf("stdout %q does not name the page", stdout)
	}
}

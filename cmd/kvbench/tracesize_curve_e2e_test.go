package main

import (
	"context"
	"encoding/json"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// curveRunDir runs the reload-curve scenario on the embedded engine and returns its run
// directory.
func curveRunDir(t *testing.T, override func(*sim.Profile)) string {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: override})
	out := t.TempDir()
	if _, stderr, code := runJSON(t, context.Background(), "run", "reload-curve", "--endpoint", srv.URL()+"/v1", "--out", out); code != cli.ExitOK {
		t.Fatalf("reload-curve run: exit %d: %s", code, stderr)
	}
	return filepath.Join(out, onlyEntry(t, out))
}

// TestTraceSizeCurve: trace size --curve prices every size by a reload curve the embedded
// engine measured, --gpu-hour-cost turns the seconds into cost, and --html draws the sizes.
func TestTraceSizeCurve(t *testing.T) {
	dir := curveRunDir(t, curveProfile)
	page := filepath.Join(t.TempDir(), "size.html")
	args := []string{"trace", "size", "testdata/trace-small.jsonl", "--block-tokens", "16", "--gpu-tokens", "1024", "--host", "0,1024,4096,16384", "--curve", dir}
	stdout, stderr, code := runCLI(t, append(args, "--gpu-hour-cost", "3", "--html", page, "--format", "json")...)
	if code != cli.ExitOK {
		t.Fatalf("trace size --curve: exit %d %s", code, stderr)
	}
	var got struct {
		Sizes []struct {
			HostTokens  int64    `json:"host_tokens"`
			HostShare   float64  `json:"host_share"`
			Saved       *float64 `json:"prefill_seconds_saved"`
			SavedPerH   *float64 `json:"prefill_seconds_saved_per_hour"`
			CostPerHour *float64 `json:"cost_saved_per_hour"`
		} `json:"sizes"`
		Prefill *struct {
			Curve struct {
				Run    string `json:"run"`
				Points []struct {
					PromptTokens int     `json:"prompt_tokens"`
					RecomputeMS  float64 `json:"recompute_ms"`
					ReloadMS     float64 `json:"reload_ms"`
				} `json:"points"`
			} `json:"curve"`
			TraceSeconds float64  `json:"trace_seconds"`
			GPUPerHour   *float64 `json:"gpu_prefill_seconds_saved_per_hour"`
			Outside      string   `json:"outside_curve"`
		} `json:"prefill"`
		HTML string `json:"html"`
	}
	if err := json.Unmarshal([]byte(stdout), &got); err != nil {
		t.Fatal(err)
	}
	p := got.Prefill
	if p == nil || p.Curve.Run != dir || len(p.Curve.Points) != 3 || p.TraceSeconds <= 0 || p.GPUPerHour == nil || *p.GPUPerHour <= 0 || !strings.Contains(p.Outside, "clamped") {
		t.Fatalf("prefill %+v", p)
	}
	for _, pt := range p.Curve.Points {
		if pt.RecomputeMS <= 0 || pt.ReloadMS <= 0 {
			t.Errorf("curve point %+v not measured", pt)
		}
	}
	for _, s := range got.Sizes {
		if s.Saved == nil || s.SavedPerH == nil || s.CostPerHour == nil {
			t.Fatalf("size %d: unpriced %+v", s.HostTokens, s)
		}
		if want := *s.Saved * 3600 / p.TraceSeconds; math.Abs(*s.SavedPerH-want) > 1e-9*math.Abs(want) {
			t.Errorf("size %d: %g s/h, want %g", s.HostTokens, *s.SavedPerH, want)
		}
		if want := *s.SavedPerH / 3600 * 3; math.Abs(*s.CostPerHour-want) > 1e-12 {
			t.Errorf("size %d: cost %g, want %g", s.HostTokens, *s.CostPerHour, want)
		}
		if (s.HostShare == 0) != (*s.Saved == 0) {
			t.Errorf("size %d: host share %g but %g s saved", s.HostTokens, s.HostShare, *s.Saved)
		}
	}
	if got.HTML != page {
		t.Errorf("html %q", got.HTML)
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<svg id="size-share"`, `<svg id="size-saved"`, `id="kvbench-data"`} {
		if !strings.Contains(string(html), want) {
			t.Errorf("the page lacks %s", want)
		}
	}
	if n := strings.Count(string(html), `data-series="ideal"`); n != 4+1 { // four points and their line
		t.Errorf("%d ideal host-share marks, want 4 points and a line", n)
	}

	// The text table gains the column; the page is never overwritten.
	stdout, _, code = runCLI(t, args...)
	if code != cli.ExitOK || !strings.Contains(stdout, "prefill s saved/h") || !strings.Contains(stdout, "ignores queueing, batching") {
		t.Errorf("text: exit %d\n%s", code, stdout)
	}
	_, stderr, code = runCLI(t, append(args, "--html", page)...)
	if code != cli.ExitUsage || !strings.Contains(stderr, "--html "+page+" exists") {
		t.Errorf("an existing page: exit %d %s", code, stderr)
	}
}

// TestTraceSizeBadCurve: a run without a curve, or with a curve of one point, is bad input:
// one line, exit 2.
func TestTraceSizeBadCurve(t *testing.T) {
	onePoint := curveRunDir(t, func(p *sim.Profile) {
		curveProfile(p)
		p.MaxModelLen = 1104 // 1104 less max_tokens 16 and the margin 64: the curve's one size, 1024
	})
	base := []string{"trace", "size", "testdata/trace-small.jsonl", "--block-tokens", "16", "--gpu-tokens", "1024"}
	for _, c := range []struct {
		args []string
		msg  string
	}{
		{[]string{"--curve", onePoint}, "--curve " + onePoint + `: reload curve "curve" has 1 usable point(s)`},
		{[]string{"--curve", "testdata/compare/baseline"}, "--curve testdata/compare/baseline: the run (nightly-tiny) has no reload curve"},
		{[]string{"--curve", filepath.Join(t.TempDir(), "none")}, "--curve "},
		{[]string{"--gpu-hour-cost", "2"}, "--gpu-hour-cost prices the seconds --curve gives"},
		{[]string{"--gpu-hour-cost", "-1"}, `"-1" is not a price per GPU-hour`},
	} {
		_, errOut, code := runCLI(t, append(base, c.args...)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.msg) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d %q, want exit 2 and one line with %q", c.args, code, errOut, c.msg)
		}
	}
}

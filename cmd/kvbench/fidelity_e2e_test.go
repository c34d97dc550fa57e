package main

import (
	"bytes"
	"context"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// curveProfile is a small server whose reload curve crosses: a 8,192-token GPU pool, a
// 32,768-token CPU tier, 4,096 tokens of context, recompute at 20,000 tokens/s against a
// reload that costs a fixed 100 ms beyond its copy.
func curveProfile(p *sim.Profile) {
	p.NumGPUBlocks, p.MaxModelLen = 512, 4096
	p.CPUOffloadGiB = 0.0625 // 64 MiB / (2048 B/token x 16) = 2048 blocks
	p.PrefillTokensPerSecond, p.PrefillSlowdownPer100k = 20000, 0.5
	p.ReloadLatency = 100 * time.Millisecond
	p.DefaultMaxTokens = 16
}

// TestReloadCurveOnTheEmbeddedEngine: kvbench run reload-curve expands the curve to the
// server's max_model_len and pool at preflight, measures every point (store, evict, reload,
// cold twin), writes the curve, and kvbench report draws it.
func TestReloadCurveOnTheEmbeddedEngine(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: curveProfile})
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", "reload-curve", "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	curves := section(t, rec, "reload_curves")
	c, ok := curves["curve"].(map[string]any)
	if !ok {
		t.Fatalf("reload_curves %v", curves)
	}
	spec := c["curve"].(map[string]any)
	if num(t, spec, "max_model_len") != 4096 || spec["max_model_len_source"] != "server (/v1/models)" || num(t, spec, "gpu_kv_tokens") != 8192 {
		t.Errorf("curve bounds %v", spec)
	}
	points := c["points"].([]any)
	var sizes []float64
	for _, p := range points {
		pt := p.(map[string]any)
		sizes = append(sizes, num(t, pt, "planned_tokens"))
		if pt["verdict"] != "cpu_reload" || pt["counted"] != true || pt["identical_output"] != true {
			t.Errorf("point %v", pt)
		}
		for _, k := range []string{"replay_time_to_first_output_ms", "cold_twin_time_to_first_output_ms", "gain", "load_bytes", "prompt_tokens"} {
			if num(t, pt, k) <= 0 {
				t.Errorf("point %v: %s not measured", pt["planned_tokens"], k)
			}
		}
	}
	// 1024, 2048, then the top: 4096 less max_tokens (16) and the counting margin (64).
	if len(sizes) != 3 || sizes[0] != 1024 || sizes[1] != 2048 || sizes[2] != 4016 {
		t.Fatalf("sizes %v", sizes)
	}
	if _, ok := c["break_even_tokens"]; !ok || c["break_even"] == "" {
		t.Errorf("curve lacks its break-even: %v", c)
	}
	// Each point stored its prompt, evicted it and replayed it: a sequence and a replay step.
	for _, id := range []string{"curve_1k", "curve_1k_replay", "curve_4k_replay"} {
		section(t, rec, id)
	}

	page := filepath.Join(t.TempDir(), "curve.html")
	dir := filepath.Join(out, onlyEntry(t, out))
	var rout, rerr bytes.Buffer
	if err := run(context.Background(), []string{"report", dir, "-o", page}, &rout, &rerr); err != nil {
		t.Fatalf("report: %v\n%s", err, rerr.String())
	}
	html, _ := os.ReadFile(page)
	svg := string(html)
	if i := strings.Index(svg, `<svg id="curve-0-0"`); i < 0 {
		t.Fatal("the report has no reload curve chart")
	} else {
		svg = svg[i : i+strings.Index(svg[i:], "</svg>")]
	}
	if n := strings.Count(svg, `<circle class="pt"`); n != 6 {
		t.Errorf("%d curve points drawn, want 3 sizes x (replay, cold twin)", n)
	}
	if !strings.Contains(string(html), "<h3>Reload curve</h3>") || !strings.Contains(string(html), `"reload_curves"`) {
		t.Error("the report lacks the curve's table or its embedded data")
	}
	if strings.Contains(string(html), "Reload curve curve") {
		t.Error(`the curve of the step "curve" is headed "Reload curve curve"`)
	}

	// A claim over the curve's points from 2k tokens up, and one of its top point by its size
	// class (4,016 planned tokens here, another size on another server): both reproduce.
	claim := filepath.Join(t.TempDir(), "curve-claim.toml")
	if err := os.WriteFile(claim, []byte(`title = "the curve reloads from 2k tokens up, faster than recomputing"
[source]
url = "https://example.org/curve"
observed_date = "2026-12-01"
[[expect]]
metric = "reload_curve.verdict"
from_tokens = 2048
equals = "cpu_reload"
[[expect]]
metric = "reload_curve.gain"
from_tokens = 2048
at_least = 0.000001
[[expect]]
step = "curve_4k_replay"
metric = "verdict"
equals = "cpu_reload"
`), 0o644); err != nil {
		t.Fatal(err)
	}
	vout, verr, vcode := runCLI(t, "verify", claim, dir, "--format", "json")
	var vrec struct {
		AllReproduced bool `json:"all_reproduced"`
		Results       []struct {
			Status string `json:"status"`
			Why    string `json:"why"`
			Points []struct {
				Step   string `json:"step"`
				Tokens int    `json:"planned_tokens"`
			} `json:"points"`
		} `json:"results"`
	}
	if err := json.Unmarshal([]byte(vout), &vrec); err != nil || vcode != cli.ExitOK || !vrec.AllReproduced || len(vrec.Results) != 3 {
		t.Fatalf("verify: exit %d %s %v\n%s", vcode, verr, err, vout)
	}
	if p := vrec.Results[0].Points; len(p) != 2 || p[0].Step != "curve_2k_replay" || p[0].Tokens != 2048 || p[1].Step != "curve_4k_replay" || p[1].Tokens != 4016 {
		t.Errorf("points in range %+v", p)
	}
}

// corruptScenario is four 1,500-token prompts through tiny's 4,096-token pool, so the first
// comes back from the CPU tier, and a replay gated on giving the same output.
const corruptScenario = `name = "corrupt"
[server]
gpu_kv_tokens = "server"
block_size = "server"
[prompt]
seed = 3
shared_prefix_tokens = 128
token_counting = "server"
[request]
max_tokens = 16
ignore_eos = true
[[step]]
id = "sequence"
requests = 4
planned_context_tokens = [1500]
[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
[[gate]]
step = "replay"
verdict = "cpu_reload"
require_identical_output = true
`

// TestCorruptReloadFailsTheIdenticalOutputGate: kvbench sim --corrupt-reload makes reloaded
// blocks answer differently; the run names the finding, its cold twin (recomputed, so
// faithful) points at the reload, and the gate fails with exit 3.
func TestCorruptReloadFailsTheIdenticalOutputGate(t *testing.T) {
	for _, tc := range []struct {
		flags []string
		code  int
	}{{nil, cli.ExitOK}, {[]string{"--corrupt-reload"}, cli.ExitGateFailed}} {
		t.Run(strings.Join(append([]string{"sim"}, tc.flags...), " "), func(t *testing.T) {
			url, _, _ := startSimCommand(t, append([]string{"--profile", "tiny"}, tc.flags...)...)
			file := filepath.Join(t.TempDir(), "corrupt.toml")
			if err := os.WriteFile(file, []byte(corruptScenario), 0o644); err != nil {
				t.Fatal(err)
			}
			rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", url+"/v1", "--out", t.TempDir())
			if code != tc.code {
				t.Fatalf("exit %d, want %d: %s", code, tc.code, stderr)
			}
			r := section(t, rec, "replay")
			f := r["reload_fidelity"].(map[string]any)
			if r["verdict"] != "cpu_reload" || f["basis"] != "token_ids" || f["cold_twin_identical"] != true {
				t.Fatalf("replay %v, fidelity %v", r["verdict"], f)
			}
			if tc.code == cli.ExitOK {
				if f["identical"] != true {
					t.Fatalf("a faithful reload: fidelity %v", f)
				}
				return
			}
			if f["identical"] != false || f["first_divergence"] == nil || !strings.Contains(f["finding"].(string), "the difference came with the reload") {
				t.Errorf("fidelity %v", f)
			}
			if !strings.Contains(stderr, "FINDING reload fidelity: the replay's output differs from its original's") {
				t.Errorf("console lacks the finding:\n%s", stderr)
			}
			if !strings.Contains(stderr, "output not identical") {
				t.Errorf("exit message lacks the failed gate:\n%s", stderr)
			}
		})
	}
}

package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

const referenceDir = "../../harness/record/testdata/reference"

func readJSON(t *testing.T, path string) map[string]any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return m
}

// sameShape checks that got has every key of want with the same JSON type, recursively.
// free names paths whose content is free-form (only the type is checked); nullable names
// paths kvbench cannot measure, which it writes as null rather than invent.
func sameShape(t *testing.T, path string, want, got any, free, nullable map[string]bool) {
	t.Helper()
	if got == nil && nullable[path] {
		return
	}
	switch w := want.(type) {
	case map[string]any:
		g, ok := got.(map[string]any)
		if !ok {
			t.Errorf("%s: %T, want an object", path, got)
			return
		}
		if free[path] {
			return
		}
		for k, wv := range w {
			gv, ok := g[k]
			if !ok {
				t.Errorf("%s.%s: missing", path, k)
				continue
			}
			sameShape(t, path+"."+k, wv, gv, free, nullable)
		}
	case []any:
		g, ok := got.([]any)
		if !ok {
			t.Errorf("%s: %T, want an array", path, got)
			return
		}
		if free[path] || len(w) == 0 {
			return
		}
		for i, gv := range g {
			sameShape(t, path+"[]", w[min(i, len(w)-1)], gv, free, nullable)
		}
	default:
		if want == nil {
			return
		}
		wt, gt := jsonType(want), jsonType(got)
		if wt != gt {
			t.Errorf("%s: %s, want %s", path, gt, wt)
		}
	}
}

func jsonType(v any) string {
	switch v.(type) {
	case string:
		return "string"
	case float64:
		return "number"
	case bool:
		return "bool"
	case nil:
		return "null"
	case []any:
		return "array"
	}
	return "object"
}

// msPattern matches the demo table's timings (milliseconds, gain ratios, seconds saved and
// decode rates), which vary from run to run.
var msPattern = regexp.MustCompile(`\d+\.\d+( ms|x| s| vs| tokens/s)`)

// TestDemo runs the whole demo on the embedded engines and checks what a newcomer relies on:
// the merged study and the accounting summary have the seed records' structure and the
// verdicts seed study 001 reached.
func TestDemo(t *testing.T) {
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"demo", "--out", out}, &stdout, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
		t.Fatalf("demo: exit %d: %s\n%s", code, stderr.String(), stdout.String())
	}
	dir := filepath.Join(out, onlyEntry(t, out))

	got := readJSON(t, filepath.Join(dir, "study.json"))
	want := readJSON(t, filepath.Join(referenceDir, "001_a767f3ca5b08805d.txt"))
	delete(want, "restoration") // a probe's section; the demo runs no probes
	sameShape(t, "study", want, got, map[string]bool{"study.topology": true, "study.sources": true}, map[string]bool{"study.cache.cpu_mmap_bytes": true})
	for _, k := range []string{"schema", "observed_at", "model", "runtime", "topology", "cache", "eviction_sequence", "replay", "offload8_control", "sources"} {
		if _, ok := got[k]; !ok {
			t.Errorf("study lacks %s", k)
		}
	}
	replay := got["replay"].(map[string]any)
	if replay["verdict"] != "cpu_reload" {
		t.Errorf("replay verdict %v", replay["verdict"])
	}
	// The reload gave the original's output and was timed against its cold twin (a verified
	// miss); which was faster is timing, not asserted here.
	fid, _ := replay["reload_fidelity"].(map[string]any)
	gain, _ := replay["offload_gain"].(map[string]any)
	if fid["identical"] != true || fid["basis"] != "token_ids" || fid["cold_twin_identical"] != true {
		t.Errorf("reload fidelity %v", fid)
	}
	if ratio, _ := gain["ttft_ratio"].(float64); ratio <= 0 || gain["cold_twin"] != "cache_salt" || gain["cold_twin_missed"] != "yes" {
		t.Errorf("offload gain %v: want a ratio against a cold twin that verifiably missed", gain)
	}
	ctl := got["offload8_control"].(map[string]any)
	if ctl["setup_valid"] != "no" || !strings.Contains(ctl["interpretation"].(string), "was not a valid GPU-eviction reload setup") {
		t.Errorf("control %v", ctl)
	}
	// Every source file exists and matches its hash.
	for _, s := range got["sources"].([]any) {
		src := s.(map[string]any)
		if p, ok := src["path"].(string); ok {
			if _, err := os.Stat(filepath.Join(dir, p)); err != nil {
				t.Errorf("source %s: %v", p, err)
			}
		}
	}

	acc := readJSON(t, filepath.Join(dir, "accounting.json"))
	sameShape(t, "accounting", readJSON(t, filepath.Join(referenceDir, "000_784c128d328697ec.txt")), acc,
		map[string]bool{"accounting.rows[].source": true}, nil)
	pool := acc["pool"].(map[string]any)
	total, totalGiB := pool["total_bytes"].(float64), pool["total_gib"].(float64)
	rows := acc["rows"].([]any)
	if len(rows) != 4 {
		t.Fatalf("%d accounting rows, want 4 (two steps of two runs)", len(rows))
	}
	for _, r := range rows {
		row := r.(map[string]any)
		frac := row["sampled_peak_block_occupancy_fraction"].(float64)
		occupied := total / (1 << 30) * frac // the stated derivation
		if frac <= 0 || frac > 1 || math.Abs(row["occupied_gib_estimate"].(float64)-occupied) > 1e-9 ||
			math.Abs(row["unused_pool_gib_estimate"].(float64)-(totalGiB-occupied)) > 1e-9 {
			t.Errorf("row %v does not follow the derivation (total %v bytes)", row, total)
		}
		if row["occupancy_status"] != "measured" || row["sampled_engine_active_max"].(float64) < 1 {
			t.Errorf("row %v", row)
		}
	}

	text := stdout.String()
	i := strings.Index(text, "seed study 001, reproduced")
	j := strings.Index(text[max(i, 0):], "\nrecords: ")
	if i < 0 || j < 0 {
		t.Fatalf("no verdict table in:\n%s", text)
	}
	golden(t, "demo-table.golden", msPattern.ReplaceAllString(text[i:i+j], "<t>$1"))
}

// smokeRun runs the smoke scenario with extra TOML on a tiny engine and returns its directory.
func smokeRun(t *testing.T, srv *sim.Server, out, name, extra string) string {
	t.Helper()
	base, _ := os.ReadFile("../../scenarios/smoke.toml")
	file := filepath.Join(t.TempDir(), name+".toml")
	src := strings.Replace(string(base), `name = "smoke"`, `name = "`+name+`"`, 1) + extra
	if err := os.WriteFile(file, []byte(src), 0o644); err != nil {
		t.Fatal(err)
	}
	_, stderr, code := runCLI(t, "run", file, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("run %s: exit %d %s", name, code, stderr)
	}
	m, _ := filepath.Glob(filepath.Join(out, name+"-*"))
	if len(m) != 1 {
		t.Fatalf("run directories %v", m)
	}
	return m[0]
}

func TestSummarizeRefusesMixedModels(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	out := t.TempDir()
	a := smokeRun(t, srv, out, "model-a", "\n[model]\nrepo = \"org/model-a\"\n")
	b := smokeRun(t, srv, out, "model-b", "\n[model]\nrepo = \"org/model-b\"\n")
	_, stderr, code := runCLI(t, "summarize", a, b)
	if code != cli.ExitUsage || !strings.Contains(stderr, "model.repo") || !strings.Contains(stderr, `"org/model-a"`) || !strings.Contains(stderr, `"org/model-b"`) {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	stdout, stderr, code := runCLI(t, "summarize", a, b, "--allow-mixed")
	if code != cli.ExitUsage || !strings.Contains(stderr, `step "sequence" comes from both`) {
		t.Fatalf("two primary runs with the same step ids must be refused: exit %d %s %s", code, stderr, stdout)
	}
	// A file written by summarize is never overwritten.
	target := filepath.Join(t.TempDir(), "study.json")
	if _, stderr, code := runCLI(t, "summarize", a, "--out", target); code != cli.ExitOK {
		t.Fatalf("summarize one run: %d %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "summarize", a, "--out", target); code != cli.ExitUsage || !strings.Contains(stderr, "never overwrites") {
		t.Fatalf("second write: %d %s", code, stderr)
	}
}

func TestAccountingNamesRunWithoutOccupancy(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	out := t.TempDir()
	dir := smokeRun(t, srv, out, "no-usage", "\n[target.metric_names]\nkv_usage = \"nonexistent:kv_usage\"\n")
	_, stderr, code := runCLI(t, "accounting", dir)
	if code != cli.ExitUsage || !strings.Contains(stderr, "no-usage-") || !strings.Contains(stderr, "no kv_usage sample") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

func TestLoadRunDetectsChangedArtifact(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	dir := smokeRun(t, srv, t.TempDir(), "tamper", "")
	f := filepath.Join(dir, "step-02-replay.json")
	data, _ := os.ReadFile(f)
	os.Chmod(f, 0o644)
	os.WriteFile(f, append(data, ' '), 0o644)
	if _, err := runs.Load(dir); !errors.Is(err, runs.ErrArtifactChanged) {
		t.Fatalf("err %v", err)
	}
}

// TestDemoEngines runs the seed study in each engine's dialect on the embedded engine: the
// replay is a reload wherever the engine can tell, and a cache hit of unknown tier on
// TensorRT-LLM; every gate of the engine's own scenarios passes.
func TestDemoEngines(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	for engineName, want := range map[string]string{"sglang": "cpu_reload", "kvbm": "cpu_reload", "lmcache": "cpu_reload", "trtllm": "cache_hit_tier_unknown"} {
		t.Run(engineName, func(t *testing.T) {
			out := t.TempDir()
			var stdout, stderr bytes.Buffer
			err := run(context.Background(), []string{"demo", "--engine", engineName, "--out", out}, &stdout, &stderr)
			if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
				t.Fatalf("exit %d: %s\n%s", code, stderr.String(), stdout.String())
			}
			if !strings.Contains(stdout.String(), "speaking "+engineName) {
				t.Errorf("stdout does not say the dialect:\n%s", stdout.String())
			}
			got := readJSON(t, filepath.Join(out, onlyEntry(t, out), "study.json"))
			if v := got["replay"].(map[string]any)["verdict"]; v != want {
				t.Errorf("replay verdict %v, want %s", v, want)
			}
		})
	}
	var stderr bytes.Buffer
	err := run(context.Background(), []string{"demo", "--engine", "llamacpp", "--out", t.TempDir()}, &bytes.Buffer{}, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitUsage || !strings.Contains(stderr.String(), "does not speak it") {
		t.Errorf("llamacpp on the embedded engine: exit %d: %s", code, stderr.String())
	}
}

package tierplan

import (
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/trace"
)

// The fixtures are runs of the embedded engine (a 2,048-token GPU pool, a 5,120-token host
// tier, 2,048 bytes per token) replaying testdata/conv.jsonl one request at a time: native
// with vLLM's native connector, store-threshold-2 with store_threshold 2, allocation-fail-8
// with every 8th block store failing for want of room. To re-record one, from this
// directory: `kvbench sim --profile-file testdata/sim-NAME.toml --addr 127.0.0.1:PORT` (the
// tiny profile with those sizes; native has neither fault nor filter), then `kvbench run
// testdata/trace.toml --endpoint http://127.0.0.1:PORT/v1 --out DIR`, and copy the run
// directory here.
const (
	native     = "testdata/native"
	threshold2 = "testdata/store-threshold-2"
	allocFail8 = "testdata/allocation-fail-8"
)

func TestReadRun(t *testing.T) {
	r, err := Read(native)
	if err != nil {
		t.Fatal(err)
	}
	if r.Engine != EngineVLLM || r.Step != "load" || r.TraceFile != "testdata/conv.jsonl" || r.BlockTokens != 16 || r.Format != trace.FormatMooncake {
		t.Errorf("run: engine %q step %q trace %q block %d format %q", r.Engine, r.Step, r.TraceFile, r.BlockTokens, r.Format)
	}
	for name, want := range map[string]struct {
		got  *trace.Sourced
		v    any
		from string
	}{
		"gpu":   {r.GPUTokens, int64(2048), "the run's ideal: server (vllm:cache_config_info)"},
		"host":  {r.HostTokens, int64(5120), "the run's ideal: "},
		"bytes": {r.BytesPerToken, int64(2048), "the run's ideal: its host tier's"},
		"pool":  {r.PoolHoldsOutput, true, "the run's ideal"},
	} {
		if want.got == nil || want.got.Value != want.v || !strings.HasPrefix(want.got.Source, want.from) {
			t.Errorf("%s: %+v, want %v from %q", name, want.got, want.v, want.from)
		}
	}
	if r.StoresSkipped != nil {
		t.Errorf("native connector: stores skipped %v, the engine exposes no such counter", *r.StoresSkipped)
	}
	p, why, err := r.DefaultPolicy()
	if err != nil || p.String() != "vllm" || !strings.Contains(why, "no skipped-stores counter") {
		t.Errorf("default policy %s (%s) %v", p, why, err)
	}

	r, err = Read(threshold2)
	if err != nil {
		t.Fatal(err)
	}
	if r.StoresSkipped == nil || *r.StoresSkipped <= 0 || !strings.Contains(r.StoresSkippedSource, "vllm:kv_offload_stores_skipped_total") {
		t.Fatalf("store_threshold 2: stores skipped %v (%s)", r.StoresSkipped, r.StoresSkippedSource)
	}
	p, why, err = r.DefaultPolicy()
	if err != nil || p.String() != "vllm:store_threshold=2" || !strings.Contains(why, "2 assumed") {
		t.Errorf("default policy %s (%s) %v", p, why, err)
	}
}

// copyRun copies the run in dir to a new directory, passing run.json and the step artifact
// through edit (nil: unchanged); an edited artifact's sha256 is updated in run.json.
func copyRun(t *testing.T, dir string, editRun, editStep func(map[string]any)) string {
	t.Helper()
	out := t.TempDir()
	read := func(name string) map[string]any {
		data, err := os.ReadFile(filepath.Join(dir, name))
		if err != nil {
			t.Fatal(err)
		}
		var m map[string]any
		if err := json.Unmarshal(data, &m); err != nil {
			t.Fatal(err)
		}
		return m
	}
	write := func(name string, m map[string]any) string {
		data, err := json.Marshal(m)
		if err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(filepath.Join(out, name), data, 0o600); err != nil {
			t.Fatal(err)
		}
		sum := sha256.Sum256(data)
		return hex.EncodeToString(sum[:])
	}
	run, step := read("run.json"), read("step-01-load.json")
	if editStep != nil {
		editStep(step)
	}
	sum := write("step-01-load.json", step)
	run["sources"].([]any)[0].(map[string]any)["sha256"] = sum
	if editRun != nil {
		editRun(run)
	}
	write("run.json", run)
	return out
}

func TestDefaultPolicyByEngine(t *testing.T) {
	for engine, want := range map[string]string{"sglang": "sglang-write-through", "lmcache": ""} {
		dir := copyRun(t, native, func(m map[string]any) { m["preflight"].(map[string]any)["backend"] = engine }, nil)
		r, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		p, why, err := r.DefaultPolicy()
		if want == "" {
			if err == nil || !strings.HasPrefix(err.Error(), "--policy: ") {
				t.Errorf("%s: policy %s, error %v; want one naming --policy", engine, p, err)
			}
			cands, note := r.Candidates()
			if len(cands) != MaxFitThreshold+3 || note == "" {
				t.Errorf("%s: %d candidates (%s), want every modelled policy and a note", engine, len(cands), note)
			}
			continue
		}
		if err != nil || p.String() != want || !strings.Contains(why, "assumed") {
			t.Errorf("%s: policy %s (%s) %v, want %s, assumed", engine, p, why, err, want)
		}
	}
}

// TestLlamaCppRun: a llama.cpp run's policy is llamacpp with the slots preflight read, and a
// calibration says it has no measured host share to fit.
func TestLlamaCppRun(t *testing.T) {
	for slots, want := range map[float64]string{1: "llamacpp", 4: "llamacpp:slots=4,kv_unified=1"} {
		dir := copyRun(t, native, func(m map[string]any) {
			pf := m["preflight"].(map[string]any)
			pf["backend"], pf["slots"] = "llamacpp", slots
		}, nil)
		r, err := Read(dir)
		if err != nil {
			t.Fatal(err)
		}
		p, why, err := r.DefaultPolicy()
		if err != nil || p.String() != want || !strings.Contains(why, "llamacpp") {
			t.Errorf("%v slots: policy %s (%s) %v, want %s", slots, p, why, err, want)
		}
		if cands, _ := r.Candidates(); len(cands) != min(int(slots), 2) {
			t.Errorf("%v slots: candidates %v", slots, cands)
		}
	}
}

// plan parses args as trace size's flags and plans the call.
func plan(t *testing.T, args ...string) (*Plan, error) {
	t.Helper()
	fs := flag.NewFlagSet("trace size", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	f := RegisterSizeFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatal(err)
	}
	return f.Plan(fs.Args())
}

func TestCalibrateFixtures(t *testing.T) {
	p, err := plan(t, "--calibrate", native)
	if err != nil {
		t.Fatal(err)
	}
	r, err := p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c := r.Calibration
	// The engine's native connector is the model's vllm policy block for block: no residual.
	if c == nil || c.Policy != "vllm" || c.ResidualPoints != 0 || !c.Fits || c.HostTokens != 5120 || c.GPUTokens != 2048 {
		t.Fatalf("native calibration %+v", c)
	}
	want := []int64{0, 1280, 2560, 5120, 10240, 20480, 40960}
	if len(r.Sizes) != len(want) {
		t.Fatalf("sizes %+v, want %v", r.Sizes, want)
	}
	for i, s := range r.Sizes {
		if s.HostTokens != want[i] || s.PredictedHostShare == nil || *s.PredictedHostShare != s.HostShare || s.Deployed != (s.HostTokens == 5120) {
			t.Errorf("size %d: %+v", i, s)
		}
		if s.Deployed && (s.MeasuredHostShare == nil || *s.MeasuredHostShare != c.MeasuredHostShare) {
			t.Errorf("deployed size: measured %v, the run measured %v", s.MeasuredHostShare, c.MeasuredHostShare)
		}
	}

	// The engine's store_threshold counts what vLLM's connector looks up, as the model does:
	// the threshold is fitted with no residual, and predicts the saturated tier at 1e4.
	p, err = plan(t, "--calibrate", threshold2, "--host", "1e4")
	if err != nil {
		t.Fatal(err)
	}
	r, err = p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c = r.Calibration
	if c.Policy != "vllm:store_threshold=2" || !c.Fits || math.Abs(c.ResidualPoints) > 1e-9 || c.MeasuredHostShare <= 0 {
		t.Errorf("threshold calibration: %s fits %v residual %.2f measured %v: %s", c.Policy, c.Fits, c.ResidualPoints, c.MeasuredHostShare, c.Finding)
	}
	if len(r.Sizes) != 2 || r.Sizes[0].HostTokens != 10000 || !r.Sizes[1].Deployed {
		t.Errorf("--host 1e4 and the deployed size: %+v", r.Sizes)
	}

	// Failed stores (no room in the tier) are something no modelled policy does: the
	// measured share lies between the native connector's and the threshold's, and nothing
	// fits within a point.
	p, err = plan(t, "--calibrate", allocFail8, "--host", "1e4")
	if err != nil {
		t.Fatal(err)
	}
	r, err = p.Run(context.Background())
	if err != nil {
		t.Fatal(err)
	}
	c = r.Calibration
	if c.Fits || !strings.HasPrefix(c.Finding, trace.NoFitFinding) || math.Abs(c.ResidualPoints) <= 1 {
		t.Errorf("allocation-failure calibration: %s fits %v residual %.2f: %s", c.Policy, c.Fits, c.ResidualPoints, c.Finding)
	}
}

// TestFlagsWin: a flag given wins over the run, says so, and is not what the fit uses.
func TestFlagsWin(t *testing.T) {
	p, err := plan(t, "--calibrate", native, "--gpu-tokens", "4096", "--policy", "sglang-write-back")
	if err != nil {
		t.Fatal(err)
	}
	if p.Config.GPUTokens != 4096 || p.From.GPUTokens.Source != "command line (--gpu-tokens)" || p.Config.Policy.Name != trace.PolicySGLangWriteBack {
		t.Errorf("config %+v from %+v", p.Config, p.From.GPUTokens)
	}
	if p.fit.cfg.GPUTokens != 2048 || p.Measured != nil {
		t.Errorf("the fit is at GPU %d, measured %v: want the run's 2048 and no measurement at another pool", p.fit.cfg.GPUTokens, p.Measured)
	}
}

// TestMissingFigures: what neither the run nor a flag gives is an error naming the flag.
func TestMissingFigures(t *testing.T) {
	noIdeal := copyRun(t, native, func(m map[string]any) {
		c := m["cache"].(map[string]any)
		c["gpu_kv_cache_tokens"], c["store_bytes_per_token_measured"] = 0, nil
	}, func(m map[string]any) {
		tr := m["trace"].(map[string]any)
		tr["ideal"], tr["ideal_unavailable"] = nil, "test: no ideal"
	})
	// Without the ideal the bytes per token is the one measured from the store counters
	// (derived from the artifacts again, not taken from run.json), and the deployed tier the
	// cache section's GiB over it.
	p, err := plan(t, "--from", noIdeal, "--gpu-tokens", "2048", "--host", "8MiB")
	if err != nil {
		t.Fatal(err)
	}
	b, d := p.From.BytesPerToken, p.From.DeployedHostTokens
	if b == nil || !strings.HasPrefix(b.Source, "measured by the run") || d == nil || !strings.HasPrefix(d.Source, "the run's cache section") || p.Deployed <= 0 {
		t.Errorf("no ideal: bytes per token %+v, deployed %+v", b, d)
	}
	for _, c := range []struct {
		args []string
		want string
	}{
		{[]string{"--from", noIdeal}, "--gpu-tokens: the run"},
		{[]string{"--calibrate", noIdeal, "--gpu-tokens", "2048"}, "has no ideal"},
		{[]string{"--from", native, "--calibrate", threshold2}, "name different runs"},
		{[]string{"--from", t.TempDir()}, "--from: "},
		{[]string{}, "want one trace file"},
	} {
		_, err := plan(t, c.args...)
		if err == nil || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\n") {
			t.Errorf("%v: error %v, want one line containing %q", c.args, err, c.want)
		}
	}
}

// TestLlamaCppCalibrate: a llama.cpp run has no ideal, so --calibrate needs the deployed
// --cache-ram from --deployed-host and fits at it; a step without a slot split quotes why.
func TestLlamaCppCalibrate(t *testing.T) {
	llama := func(m map[string]any) {
		pf := m["preflight"].(map[string]any)
		pf["backend"], pf["slots"] = "llamacpp", 1
		c := m["cache"].(map[string]any)
		c["cpu_offload_gib"], c["cpu_offload_gib_source"], c["store_bytes_per_token_measured"] = 0, "", nil
	}
	noIdeal := func(m map[string]any) {
		tr := m["trace"].(map[string]any)
		tr["ideal"], tr["ideal_unavailable"] = nil, "the engine keeps one live slot per sequence"
	}
	dir := copyRun(t, native, llama, noIdeal)
	if _, err := plan(t, "--calibrate", dir); err == nil || !strings.HasPrefix(err.Error(), "--deployed-host: ") {
		t.Errorf("no deployed size: error %v, want one naming --deployed-host", err)
	}
	if _, err := plan(t, "--calibrate", dir, "--deployed-host", "1,2"); err == nil || !strings.Contains(err.Error(), "want one size") {
		t.Errorf("two deployed sizes: error %v", err)
	}
	p, err := plan(t, "--calibrate", dir, "--deployed-host", "2MiB", "--bytes-per-token", "512")
	if err != nil {
		t.Fatal(err)
	}
	if p.Deployed != 4096 || p.fit.hostTokens != 4096 || p.fit.cfg.GPUTokens != p.Config.GPUTokens || p.From.DeployedHostTokens.Source != "command line (--deployed-host)" {
		t.Errorf("deployed %d, fit at %d host and %d GPU tokens (plan's %d), from %+v", p.Deployed, p.fit.hostTokens, p.fit.cfg.GPUTokens, p.Config.GPUTokens, p.From.DeployedHostTokens)
	}
	if len(p.fit.candidates) != 1 || p.fit.candidates[0].String() != "llamacpp" {
		t.Errorf("candidates %v", p.fit.candidates)
	}

	// No tier counters and no slot split: the step's reason is quoted.
	r := &Run{Dir: "run", Step: "load", Engine: EngineLlamaCpp, Section: &record.TraceSection{CountersValid: true, Requests: 3, PlannedRequests: 3, SlotSplitUnavailable: "the server has 4 slots"}}
	if _, err := r.Measured(); err == nil || !strings.Contains(err.Error(), "the server has 4 slots") {
		t.Errorf("no slot split: error %v", err)
	}
}

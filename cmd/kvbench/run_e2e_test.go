package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"log"
	"math"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// startSim starts the embedded engine on a free loopback port for one test.
func startSim(t *testing.T, opts sim.Options) *sim.Server {
	t.Helper()
	srv, err := sim.Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { srv.Close() })
	return srv
}

// runJSON runs kvbench with --format json and decodes the run record it prints.
func runJSON(t *testing.T, ctx context.Context, args ...string) (map[string]any, string, int) {
	t.Helper()
	var out, errb bytes.Buffer
	err := run(ctx, append(args, "--format", "json"), &out, &errb)
	code := cli.ExitCode(err, &errb)
	if code != cli.ExitOK && code != cli.ExitGateFailed {
		return nil, errb.String(), code
	}
	var rec map[string]any
	if err := json.Unmarshal(out.Bytes(), &rec); err != nil {
		t.Fatalf("run record is not JSON: %v\n%s\nstderr:\n%s", err, out.String(), errb.String())
	}
	return rec, errb.String(), code
}

func section(t *testing.T, rec map[string]any, key string) map[string]any {
	t.Helper()
	s, ok := rec[key].(map[string]any)
	if !ok {
		t.Fatalf("record has no %q section (keys %v)", key, keys(rec))
	}
	return s
}

func keys(m map[string]any) []string {
	var k []string
	for key := range m {
		k = append(k, key)
	}
	return k
}

func num(t *testing.T, s map[string]any, key string) float64 {
	t.Helper()
	v, ok := s[key].(float64)
	if !ok {
		t.Fatalf("%s = %v (%T), want a number", key, s[key], s[key])
	}
	return v
}

func readArtifact(t *testing.T, dir, name string) map[string]any {
	t.Helper()
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

// TestRunEvictionReplayReloads is the main job end to end: the seed study on the embedded
// engine's 16 GiB profile proves store, eviction and reload from the written records.
func TestRunEvictionReplayReloads(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "dsv4-offload16", Speed: 1000})
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", "eviction-6x150k-replay", "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	if rec["schema"] != "anvil-serving.kv-offload-replay/v1" || rec["status"] != "completed" {
		t.Fatalf("schema %v status %v", rec["schema"], rec["status"])
	}
	seq := section(t, rec, "eviction_sequence")
	if num(t, seq, "gpu_to_cpu_bytes_after") <= 0 || seq["store_proven"] != true {
		t.Fatalf("store not proven: %v", seq)
	}
	if num(t, seq, "requests") != 6 || num(t, seq, "planned_context_tokens_each") != 150000 {
		t.Fatalf("sequence %v", seq)
	}
	r := section(t, rec, "replay")
	if r["verdict"] != "cpu_reload" {
		t.Fatalf("replay verdict %v: %v", r["verdict"], r["verdict_reason"])
	}
	prompt := num(t, r, "prompt_tokens")
	gpu, ext := num(t, r, "gpu_prefix_hits_delta"), num(t, r, "external_prefix_hits_delta")
	// The shared prefix stays hot in GPU memory (vLLM frees a request's tail blocks first), so
	// external hits cover everything beyond it and GPU hits nothing beyond it.
	if gpu > 8000 || ext < 0.95*(prompt-gpu) || gpu+ext < 0.95*prompt {
		t.Fatalf("prompt %v: GPU hits %v, external hits %v", prompt, gpu, ext)
	}
	if load := num(t, r, "cpu_to_gpu_bytes_delta"); load != ext*8833 {
		t.Fatalf("load bytes %v, want hits x 8833 = %v", load, ext*8833)
	}
	cached := num(t, r, "cached_prompt_tokens")
	if frac := num(t, r, "cached_fraction"); math.Abs(frac-cached/prompt) > 1e-12 || cached != gpu+ext {
		t.Fatalf("cached fraction %v, cached %v, prompt %v, hits %v", frac, cached, prompt, gpu+ext)
	}
	if r["setup_valid"] != "yes" || !strings.Contains(r["interpretation"].(string), "valid GPU-eviction reload setup") {
		t.Fatalf("setup %v: %v", r["setup_valid"], r["interpretation"])
	}
	// The replay sent request 0's exact bytes.
	dir := filepath.Join(out, onlyEntry(t, out))
	art := readArtifact(t, dir, "step-01-eviction_sequence.json")
	req0 := art["requests"].([]any)[0].(map[string]any)["prompt"].(map[string]any)
	if r["exact_prompt_identity"] != req0["identity"] || r["identity_matches_original"] != true {
		t.Fatalf("replay identity %v, request 0 %v", r["exact_prompt_identity"], req0["identity"])
	}
	// sources name every artifact with its sha256.
	sources := rec["sources"].([]any)
	first := sources[0].(map[string]any)
	if first["path"] != "step-01-eviction_sequence.json" || len(first["sha256"].(string)) != 64 {
		t.Fatalf("sources %v", sources)
	}
}

func onlyEntry(t *testing.T, dir string) string {
	t.Helper()
	entries, err := os.ReadDir(dir)
	if err != nil || len(entries) != 1 {
		t.Fatalf("%s holds %d entries (%v), want one run directory", dir, len(entries), err)
	}
	return entries[0].Name()
}

// TestRunOffload8ControlCannotProveReload: the control's replay stays a GPU hit and the
// record says the setup could not prove a reload.
func TestRunOffload8ControlCannotProveReload(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "dsv4-offload8", Speed: 1000})
	rec, stderr, code := runJSON(t, context.Background(), "run", "offload8-control", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r := section(t, rec, "replay")
	if r["verdict"] != "gpu_hit" || num(t, r, "cpu_to_gpu_bytes_delta") != 0 {
		t.Fatalf("replay %v, load bytes %v", r["verdict"], r["cpu_to_gpu_bytes_delta"])
	}
	ctl := section(t, rec, "offload8_control")
	interp := ctl["interpretation"].(string)
	if ctl["setup_valid"] != "no" || !strings.Contains(interp, "The replay remained in GPU cache.") || !strings.Contains(interp, "was not a valid GPU-eviction reload setup") {
		t.Fatalf("control %v", ctl)
	}
	if num(t, ctl, "cpu_offload_gib") != 8 || num(t, ctl, "cpu_to_gpu_bytes_after") != 0 {
		t.Fatalf("control %v", ctl)
	}
}

// metricsVariant runs smoke on a tiny-profile engine with a metrics variant and returns the
// replay and sequence sections.
func metricsVariant(t *testing.T, override func(*sim.Profile)) (map[string]any, map[string]any) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: override})
	rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	return section(t, rec, "sequence"), section(t, rec, "replay")
}

// TestMetricGenerationsGiveSameDeltas: legacy names, lazy offload series and two DP engines
// must not change what kvbench measures.
func TestMetricGenerationsGiveSameDeltas(t *testing.T) {
	baseSeq, baseReplay := metricsVariant(t, nil)
	fields := []string{"gpu_prefix_hits_delta", "external_prefix_hits_delta", "cpu_to_gpu_bytes_delta", "gpu_to_cpu_bytes_delta", "verdict", "prompt_tokens"}
	for name, override := range map[string]func(*sim.Profile){
		"legacy names": func(p *sim.Profile) { p.LegacyNames = true },
		"lazy series":  func(p *sim.Profile) { p.LazyOffloadSeries = true },
		"two engines":  func(p *sim.Profile) { p.DataParallelEngines = 2 },
	} {
		t.Run(name, func(t *testing.T) {
			seq, replay := metricsVariant(t, override)
			for _, f := range fields {
				if replay[f] != baseReplay[f] {
					t.Errorf("replay %s = %v, default profile %v", f, replay[f], baseReplay[f])
				}
			}
			if seq["gpu_to_cpu_bytes_delta"] != baseSeq["gpu_to_cpu_bytes_delta"] {
				t.Errorf("store bytes %v, default %v", seq["gpu_to_cpu_bytes_delta"], baseSeq["gpu_to_cpu_bytes_delta"])
			}
		})
	}
}

func TestRunBadInput(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><body>login</body></html>"))
	}))
	defer html.Close()
	dead := httptest.NewServer(http.NotFoundHandler())
	deadURL := dead.URL
	dead.Close()
	cases := []struct {
		name string
		args []string
		msg  string
	}{
		{"unreachable endpoint", []string{"--endpoint", deadURL + "/v1"}, "127.0.0.1"},
		{"metrics URL returns HTML", []string{"--endpoint", srv.URL() + "/v1", "--metrics", html.URL + "/metrics"}, "html"},
		{"unknown model", []string{"--endpoint", srv.URL() + "/v1", "--model", "no-such-model"}, `"no-such-model"`},
		{"unset API key variable", []string{"--endpoint", srv.URL() + "/v1", "--api-key-env", "KVBENCH_TEST_UNSET_KEY"}, "KVBENCH_TEST_UNSET_KEY"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			out := t.TempDir()
			_, stderr, code := runCLI(t, append([]string{"run", "smoke", "--out", out}, c.args...)...)
			if code != cli.ExitUsage || !strings.Contains(strings.ToLower(stderr), strings.ToLower(c.msg)) || strings.Count(stderr, "\n") != 1 {
				t.Fatalf("exit %d, stderr %q; want exit 2 with %q on one line", code, stderr, c.msg)
			}
			if entries, _ := os.ReadDir(out); len(entries) != 0 {
				t.Fatalf("a failed setup left %d entries in %s", len(entries), out)
			}
		})
	}
}

// TestPromptOverMaxModelLen: preflight refuses; with --force the 400 is recorded as a failed
// request and the run goes on to the next one.
func TestPromptOverMaxModelLen(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	file := filepath.Join(t.TempDir(), "too-long.toml")
	os.WriteFile(file, []byte(`name = "too-long"
[server]
gpu_kv_tokens = "server"
[prompt]
shared_prefix_tokens = 100
token_counting = "estimate"
[request]
max_tokens = 8
[[step]]
id = "sequence"
planned_context_tokens = [3000, 500]
`), 0o644)
	_, stderr, code := runCLI(t, "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitUsage || !strings.Contains(stderr, "max_model_len is 2048") {
		t.Fatalf("without --force: exit %d %q", code, stderr)
	}
	// With --force the over-long request fails on the server: recorded, and the run does
	// not pass (no gate of the scenario says failures are expected).
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--force")
	if code != cli.ExitGateFailed || !strings.Contains(stderr, "1 of 2 requests failed") {
		t.Fatalf("with --force: exit %d %s", code, stderr)
	}
	seq := section(t, rec, "sequence")
	failed := seq["failed_request_indices"].([]any)
	if len(failed) != 1 || failed[0] != 0.0 || num(t, seq, "visible_answer_passes") != 1 {
		t.Fatalf("sequence %v", seq)
	}
	gates := rec["gates"].([]any)
	g := gates[len(gates)-1].(map[string]any)
	if g["passed"] != false || g["gate"].(map[string]any)["implicit"] != true {
		t.Fatalf("want the implicit failed-request gate, failed: %v", g)
	}
	// A gate that allows a failure makes the same run pass.
	allowed := filepath.Join(t.TempDir(), "allowed.toml")
	data, _ := os.ReadFile(file)
	os.WriteFile(allowed, append(data, []byte("[[gate]]\nstep = \"sequence\"\nmax_failed_requests = 1\n")...), 0o644)
	if _, stderr, code := runCLI(t, "run", allowed, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--force"); code != cli.ExitOK {
		t.Fatalf("with max_failed_requests = 1: exit %d %s", code, stderr)
	}
}

// TestInterruptedRunKeepsMeasurements cancels a run midway: what was measured is written and
// the record says interrupted. The cancel comes from a proxy in front of the engine when the
// first chat request after step 1's artifact arrives, so it lands inside the replay however
// slowly the machine runs.
func TestInterruptedRunKeepsMeasurements(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "dsv4-offload16", Speed: 20})
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	target, _ := url.Parse(srv.URL())
	forward := httputil.NewSingleHostReverseProxy(target)
	forward.ErrorLog = log.New(io.Discard, "", 0) // the cancelled replay is expected
	proxy := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		if r.URL.Path == "/v1/chat/completions" {
			if m, _ := filepath.Glob(filepath.Join(out, "*", "step-01-*.json")); len(m) > 0 {
				cancel()
			}
		}
		forward.ServeHTTP(w, r)
	}))
	defer proxy.Close()
	var stdout, stderr bytes.Buffer
	err := run(ctx, []string{"run", "offload8-control", "--endpoint", proxy.URL + "/v1", "--out", out}, &stdout, &stderr)
	if err == nil || !strings.Contains(err.Error(), "interrupted") {
		t.Fatalf("err %v", err)
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	rec := readArtifact(t, dir, "run.json")
	if rec["status"] != "interrupted" {
		t.Fatalf("status %v", rec["status"])
	}
	seq := section(t, rec, "prefix_sequence")
	if num(t, seq, "requests") != 3 {
		t.Fatalf("the finished step lost requests: %v", seq)
	}
}

// TestRestartInvalidatesReplay: counters that go down between the scrapes around the replay
// mark it invalid.
func TestRestartInvalidatesReplay(t *testing.T) {
	// smoke sends 2 preflight checks, then requests 3..5 and the replay as the 6th.
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.RestartAtRequest = 6 }})
	// The measurement is data, and the run does not pass: its replay proved nothing.
	rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitGateFailed || !strings.Contains(stderr, "the replay's measurement is invalid") {
		t.Fatalf("exit %d %s", code, stderr)
	}
	r := section(t, rec, "replay")
	if r["verdict"] != "invalid" || !strings.Contains(r["verdict_reason"].(string), "restart") {
		t.Fatalf("replay %v: %v", r["verdict"], r["verdict_reason"])
	}
}

// TestProbesAndGates: a probe's JSON lands in the record, a failing probe is recorded and does
// not lose the run, and a failed gate exits 3 with the gate named.
func TestProbesAndGates(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	file := filepath.Join(t.TempDir(), "probed.toml")
	base, _ := os.ReadFile("../../scenarios/smoke.toml")
	os.WriteFile(file, append(base, []byte(`
[[probe]]
name = "restoration"
when = "after"
command = ["sh", "-c", "echo '{\"remaining_offload_mmap_files\": 0}'"]

[[probe]]
name = "broken"
when = "before"
command = ["sh", "-c", "echo not json; echo oops >&2"]

[[gate]]
step = "replay"
verdict = "cpu_reload"
`)...), 0o644)
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--allow-probes")
	if code != cli.ExitGateFailed || !strings.Contains(stderr, "gate(s) failed: replay: verdict gpu_hit, want cpu_reload") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	probes := section(t, rec, "probes")
	restoration := probes["restoration"].(map[string]any)
	if restoration["ok"] != true || restoration["output"].(map[string]any)["remaining_offload_mmap_files"] != 0.0 {
		t.Fatalf("restoration probe %v", restoration)
	}
	broken := probes["broken"].(map[string]any)
	if broken["ok"] != false || !strings.Contains(broken["error"].(string), "not JSON") || !strings.Contains(broken["stderr_tail"].(string), "oops") {
		t.Fatalf("broken probe %v", broken)
	}
	if section(t, rec, "replay")["verdict"] != "gpu_hit" {
		t.Fatal("the run was lost to a failing probe")
	}
	// --no-probes skips them.
	rec, _, _ = runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--no-probes")
	if _, ok := rec["probes"]; ok {
		t.Fatal("--no-probes ran probes")
	}
}

// TestAPIKeyNeverWritten: the key reaches the server but no file or output.
func TestAPIKeyNeverWritten(t *testing.T) {
	const key = "sk-kvbench-test-secret-0123456789"
	srv := startSim(t, sim.Options{Profile: "tiny", APIKey: key})
	t.Setenv("KVBENCH_TEST_KEY", key)
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", "smoke", "--endpoint", srv.URL() + "/v1", "--out", out, "--api-key-env", "KVBENCH_TEST_KEY"}, &stdout, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	if strings.Contains(stdout.String()+stderr.String(), key) {
		t.Fatal("the API key was printed")
	}
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			data, _ := os.ReadFile(p)
			if bytes.Contains(data, []byte(key)) {
				t.Errorf("the API key is in %s", p)
			}
		}
		return nil
	})
	// A wrong key is a clear usage error.
	t.Setenv("KVBENCH_TEST_KEY", "wrong")
	_, errOut, code := runCLI(t, "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--api-key-env", "KVBENCH_TEST_KEY")
	if code != cli.ExitUsage || !strings.Contains(errOut, "401") {
		t.Fatalf("wrong key: exit %d %s", code, errOut)
	}
}

// TestServerFaultsAreData: a 500, a cut stream and a malformed SSE line are recorded on
// their requests, and the run goes on to the replay.
func TestServerFaultsAreData(t *testing.T) {
	cases := []struct {
		name     string
		override func(*sim.Profile)
		kind     string
	}{
		// Preflight sends 2 requests; the 4th chat request is the sequence's request 1.
		{"500 on every 4th request", func(p *sim.Profile) { p.FailEveryNthRequest = 4 }, "http_status"},
		{"stream cut after 3 tokens", func(p *sim.Profile) { p.CutStreamAfterTokens = 3 }, "stream_cut"},
		{"malformed SSE line", func(p *sim.Profile) { p.MalformedSSEAtToken = 2 }, "malformed_chunk"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			srv := startSim(t, sim.Options{Profile: "tiny", Override: c.override})
			out := t.TempDir()
			// The faults are recorded as data and the run goes on; it then fails its
			// implicit gate, since no gate of smoke allows failed requests.
			rec, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", out)
			if code != cli.ExitGateFailed || !strings.Contains(stderr, "requests failed") {
				t.Fatalf("exit %d: %s", code, stderr)
			}
			seq := section(t, rec, "sequence")
			if failed := seq["failed_request_indices"].([]any); len(failed) == 0 {
				t.Fatalf("no failed request recorded: %v", seq)
			}
			art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-01-sequence.json")
			var kinds []string
			for _, q := range art["requests"].([]any) {
				kinds = append(kinds, q.(map[string]any)["result"].(map[string]any)["error_kind"].(string))
			}
			if !strings.Contains(strings.Join(kinds, ","), c.kind) {
				t.Fatalf("error kinds %v, want %s", kinds, c.kind)
			}
			if _, ok := rec["replay"]; !ok {
				t.Fatal("the run stopped before the replay")
			}
		})
	}
}

// TestConcurrentStepDeltasArePerStep: overlapping requests get one counter delta for the
// step, and the record says so.
func TestConcurrentStepDeltasArePerStep(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) {
		// 24 tokens in about 500 ms: the streams overlap, and the reading the runner asks
		// for at each first output lands while the sequence still runs, however late it comes.
		p.Speed = 1
		p.DecodeTokensPerSecond = 48
	}})
	file := filepath.Join(t.TempDir(), "concurrent.toml")
	os.WriteFile(file, []byte(`name = "concurrent"
[server]
gpu_kv_tokens = "server"
[prompt]
shared_prefix_tokens = 64
token_counting = "estimate"
[request]
max_tokens = 24
[[step]]
id = "burst"
requests = 4
planned_context_tokens = [300]
concurrency = 2
`), 0o644)
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	burst := section(t, rec, "burst")
	if burst["delta_scope"] != "step" || num(t, burst, "requests") != 4 || num(t, burst, "concurrency") != 2 {
		t.Fatalf("burst %v", burst)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-01-burst.json")
	for _, q := range art["requests"].([]any) {
		if _, ok := q.(map[string]any)["counters"]; ok {
			t.Fatal("a request of a concurrent step carries its own counter delta")
		}
	}
	queries := art["counters"].(map[string]any)["counters"].(map[string]any)["gpu_prefix_queries"].(map[string]any)
	var prompts float64
	for _, q := range art["requests"].([]any) {
		prompts += q.(map[string]any)["result"].(map[string]any)["prompt_tokens"].(float64)
	}
	if queries["delta"] != prompts {
		t.Fatalf("step delta of prefix queries %v, the four prompts sum to %v", queries["delta"], prompts)
	}
	if peak := num(t, burst, "sampled_engine_active_max"); peak < 1 || peak > 2 {
		t.Fatalf("sampled active sequences %v with concurrency 2", peak)
	}
}

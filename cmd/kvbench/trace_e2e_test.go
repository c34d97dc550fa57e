package main

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// traceSim is the embedded engine the trace tests replay on: blocks of 16 tokens (the
// traces' block_tokens), a 128-block GPU pool and a 320-block host tier, both under
// pressure from a generated conversation trace at 1/32 scale.
func traceSim(t *testing.T, speed float64) (*sim.Server, int64, int64) {
	t.Helper()
	const gpuBlocks, hostBlocks, storeBytes = 128, 320, 2048
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: speed, Override: func(p *sim.Profile) {
		p.NumGPUBlocks = gpuBlocks
		p.MaxModelLen = gpuBlocks * 16
		p.StoreBytesPerToken = storeBytes
		p.CPUOffloadGiB = float64(hostBlocks*16*storeBytes) / (1 << 30)
	}})
	return srv, gpuBlocks * 16, hostBlocks * 16
}

// writeTrace generates a conversation-shaped trace of n requests (blocks of 16 tokens, 1/32
// of the public trace's lengths, prompts of at most 1200 tokens) at rate requests/s into dir.
func writeTrace(t *testing.T, dir string, n int, rate float64) string {
	t.Helper()
	cfg := trace.DefaultGeneratorConfig()
	cfg.Seed, cfg.Requests, cfg.Rate, cfg.BlockTokens, cfg.Scale, cfg.MaxInputTokens = 7, n, rate, 16, 1.0/32, 1200*32 // scaled to 1200
	cfg.ThinkTime = cfg.ThinkTime / 100
	g, err := trace.NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	var req trace.Request
	for g.Next(&req) == nil {
		b.Write(req.AppendJSON(nil))
		b.WriteByte('\n')
	}
	path := filepath.Join(dir, "conversation.jsonl")
	if err := os.WriteFile(path, b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// traceScenario writes a scenario with one trace step over file (relative to dir).
func traceScenario(t *testing.T, dir, file, step string) string {
	t.Helper()
	text := fmt.Sprintf(`name = "trace-e2e"
[server]
store_bytes_per_token = 2048
[prompt]
seed = 3
token_counting = "estimate"
[request]
timeout = "1m"
[[step]]
id = "load"
kind = "trace"
file = %q
block_tokens = 16
%s
`, file, step)
	path := filepath.Join(dir, "trace.toml")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTraceReplayMatchesIdeal is the two sides of the engine wall held to each other:
// replaying a generated trace one request at a time on the embedded engine, the tier shares
// its counters measure equal, token for token, what 'kvbench trace analyze' computes from the
// trace alone at the engine's pool sizes (the GPU pool holding each request's partial block
// and output, as the engine's does). The trace package and the engine's KV model are written
// apart; this test checks both.
func TestTraceReplayMatchesIdeal(t *testing.T) {
	for _, form := range []string{"token_ids", "text"} {
		t.Run(form, func(t *testing.T) { replayMatchesIdeal(t, form) })
	}
}

// replayMatchesIdeal replays the trace with its prompts in form: token ids, or text blocks,
// which the engine's tokenizer counts exactly (the deviation preflight measured is recorded).
func replayMatchesIdeal(t *testing.T, form string) {
	srv, gpuTokens, hostTokens := traceSim(t, 50)
	dir := t.TempDir()
	file := writeTrace(t, dir, 400, 50)
	sc := traceScenario(t, dir, filepath.Base(file), "concurrency = 1\nprompt_form = \""+form+"\"")
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("run exit %d:\n%s", code, stderr)
	}
	var ts record.TraceSection
	raw, _ := json.Marshal(section(t, rec, "load"))
	if err := json.Unmarshal(raw, &ts); err != nil {
		t.Fatal(err)
	}
	if ts.Requests != 400 || ts.FailedRequests != 0 || !ts.CountersValid || ts.Mode != record.TraceClosedLoop || ts.PromptForm != form {
		t.Fatalf("section: %d requests, %d failed, counters valid %v, mode %s, form %s (%v)", ts.Requests, ts.FailedRequests, ts.CountersValid, ts.Mode, ts.PromptForm, ts.InvalidReasons)
	}
	if ts.Ideal == nil {
		t.Fatalf("no ideal: %s", ts.IdealUnavailable)
	}
	if ts.Ideal.GPUTokens != gpuTokens || ts.Ideal.HostTokens != hostTokens {
		t.Fatalf("ideal at GPU %d host %d tokens, the engine has %d and %d", ts.Ideal.GPUTokens, ts.Ideal.HostTokens, gpuTokens, hostTokens)
	}

	var analyzed bytes.Buffer
	err := run(context.Background(), []string{"trace", "analyze", file, "--block-tokens", "16", "--gpu-tokens", fmt.Sprint(gpuTokens),
		"--host-tokens", fmt.Sprint(hostTokens), "--pool-holds-output", "--capacity-tokens", fmt.Sprint(gpuTokens), "--format", "json"}, &analyzed, os.Stderr)
	if err != nil {
		t.Fatal(err)
	}
	var a trace.Analysis
	if err := json.Unmarshal(analyzed.Bytes(), &a); err != nil {
		t.Fatal(err)
	}
	want := a.Tiers
	got := ts.Tiers
	if got.PromptTokens == nil || got.GPUHitTokens == nil || got.HostHitTokens == nil || got.RecomputeTokens == nil {
		t.Fatalf("measured tiers absent: %+v", got)
	}
	t.Logf("measured GPU %.0f host %.0f recompute %.0f of %.0f; trace analyze GPU %d host %d recompute %d of %d",
		*got.GPUHitTokens, *got.HostHitTokens, *got.RecomputeTokens, *got.PromptTokens, want.GPUHitTokens, want.HostHitTokens, want.RecomputeTokens, a.PromptTokens)
	if int64(*got.PromptTokens) != a.PromptTokens || int64(*got.GPUHitTokens) != want.GPUHitTokens ||
		int64(*got.HostHitTokens) != want.HostHitTokens || int64(*got.RecomputeTokens) != want.RecomputeTokens {
		t.Errorf("measured tiers differ from the ideal at the engine's pool sizes")
	}
	// Both tiers were under pressure, or the equality proves little: the host served some
	// prompt tokens and missed some the unbounded cache would have hit.
	if want.HostHitTokens == 0 || want.GPUHitTokens == 0 || float64(want.GPUHitTokens+want.HostHitTokens) >= a.MaxHitRate*float64(a.PromptTokens) {
		t.Errorf("the trace does not press both tiers: GPU %d host %d hit tokens, unbounded %d", want.GPUHitTokens, want.HostHitTokens, a.MaxHitTokens)
	}
	// The record's ideal is the same computation, from the same window.
	if ts.Ideal.GPUHitTokens != want.GPUHitTokens || ts.Ideal.HostHitTokens != want.HostHitTokens || ts.Ideal.StoredTokens != want.StoredTokens {
		t.Errorf("record's ideal %+v, trace analyze %+v", ts.Ideal, want)
	}
	if !strings.Contains(ts.Finding, "the host tier served") || !strings.Contains(ts.Finding, "an LRU host tier of its size") {
		t.Errorf("finding %q", ts.Finding)
	}
	if ts.DispatchLagMS.N != 400 || ts.TTFTMS.N != 400 || ts.DecodeTokensPerSecond.P50 == nil {
		t.Errorf("percentiles: lag n %d, TTFT n %d, decode %v", ts.DispatchLagMS.N, ts.TTFTMS.N, ts.DecodeTokensPerSecond.P50)
	}

	// The step artifact: every request with its trace line and timings, the series.
	runDir := filepath.Join(out, onlyEntry(t, out))
	r, err := runs.Load(runDir)
	if err != nil {
		t.Fatal(err)
	}
	st := r.Repetitions[0].Steps[0]
	if st.Trace == nil || len(st.Trace.Series) == 0 || st.Trace.SHA256 == "" || st.Trace.PlannedRequests != 400 {
		t.Fatalf("artifact trace section: %+v", st.Trace)
	}
	switch d := st.Trace.TextBlocks; {
	case form == "text" && (d == nil || d.Blocks == 0 || d.ExactBlocks != d.Blocks || d.JoinDeviation != 0):
		t.Errorf("text blocks under the engine's tokenizer: %+v, want measured and exact", d)
	case form == "token_ids" && d != nil:
		t.Errorf("token ids measured as text: %+v", d)
	}
	for i, q := range st.Requests {
		if q.Trace == nil || q.IndexInStep != i || q.Trace.InputLength != q.PlannedTokens || q.Result.PromptTokens == nil || *q.Result.PromptTokens != q.Trace.InputLength {
			t.Fatalf("request %d: %+v (prompt tokens %v)", i, q.Trace, q.Result.PromptTokens)
		}
		if q.Result.OutputTokens != max(q.Trace.OutputLength, 1) || q.Trace.MaxTokens != max(q.Trace.OutputLength, 1) {
			t.Fatalf("request %d: %d output tokens, the trace says %d", i, q.Result.OutputTokens, q.Trace.OutputLength)
		}
	}

	// The trace step's population is a kv-accounting-summary/v1 row.
	stdout, stderr, code := runCLI(t, "accounting", runDir, "--pool-bytes-per-gpu", fmt.Sprint(gpuTokens*2048))
	if code != cli.ExitOK {
		t.Fatalf("accounting: exit %d: %s", code, stderr)
	}
	var acc struct {
		Rows []struct {
			Population  string  `json:"population"`
			Concurrency int     `json:"requested_client_concurrency"`
			Occupancy   float64 `json:"sampled_peak_block_occupancy_fraction"`
			PromptP50   float64 `json:"actual_prompt_tokens_p50"`
		} `json:"rows"`
	}
	if err := json.Unmarshal([]byte(stdout), &acc); err != nil {
		t.Fatal(err)
	}
	if len(acc.Rows) != 1 || !strings.HasSuffix(acc.Rows[0].Population, "/load") || acc.Rows[0].Concurrency != 1 || acc.Rows[0].Occupancy <= 0 || acc.Rows[0].PromptP50 <= 0 {
		t.Errorf("accounting rows %+v", acc.Rows)
	}
}

// TestTraceStepBadInput: a bad trace named by a scenario is one line naming the trace's file
// and line, exit 2, before anything is sent, for validate, plan and run alike; a scenario
// naming a trace outside its directory is refused unless the user names the trace.
func TestTraceStepBadInput(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	good := `{"timestamp": 0, "input_length": 40, "output_length": 4, "hash_ids": [1, 2, 3]}` + "\n"
	cases := []struct {
		name, trace, want string
	}{
		{"timestamp goes back", good + `{"timestamp": 1000, "input_length": 40, "output_length": 4, "hash_ids": [1]}` + "\n" + `{"timestamp": 5, "input_length": 40, "output_length": 4, "hash_ids": [1]}` + "\n",
			"t.jsonl:3: timestamp goes back: 5 ms is before line 2's 1000 ms"},
		{"not JSON", good + "{oops\n", "t.jsonl:2: not a JSON object"},
		{"too many hash ids", good + `{"timestamp": 1, "input_length": 20, "output_length": 4, "hash_ids": [1, 2, 3]}` + "\n", "t.jsonl:2: more hash ids than the input length spans: 3 hash ids for input_length 20, at most ceil(20/16) = 2"},
		{"empty file", "", "t.jsonl: empty trace: no requests"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(c.trace), 0o600); err != nil {
				t.Fatal(err)
			}
			sc := traceScenario(t, dir, "t.jsonl", "concurrency = 1")
			for _, args := range [][]string{{"validate", sc}, {"plan", sc}, {"run", sc, "--endpoint", srv.URL() + "/v1", "--out", t.TempDir()}} {
				var out, errb bytes.Buffer
				err := run(context.Background(), args, &out, &errb)
				if code := cli.ExitCode(err, &errb); code != cli.ExitUsage || !strings.Contains(errb.String(), c.want) || !strings.Contains(errb.String(), "trace.toml:") {
					t.Errorf("%s: exit %d, stderr %q; want exit 2 naming the scenario's line and %q", args[0], code, errb.String(), c.want)
				}
				if n := strings.Count(strings.TrimSpace(errb.String()), "\n"); args[0] != "run" && n > 0 {
					t.Errorf("%s: %d lines: %q", args[0], n+1, errb.String())
				}
			}
		})
	}

	// A stranger's scenario may not read outside its directory; the user may name any trace.
	dir, other := t.TempDir(), t.TempDir()
	secret := filepath.Join(other, "secret.jsonl")
	if err := os.WriteFile(secret, []byte(good), 0o600); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink(secret, filepath.Join(dir, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	for _, file := range []string{"../" + filepath.Base(other) + "/secret.jsonl", secret, "link.jsonl"} {
		sc := traceScenario(t, dir, file, "concurrency = 1")
		var out, errb bytes.Buffer
		err := run(context.Background(), []string{"plan", sc}, &out, &errb)
		if code := cli.ExitCode(err, &errb); code != cli.ExitUsage || !strings.Contains(errb.String(), "outside the scenario file's directory") || !strings.Contains(errb.String(), "--trace") {
			t.Errorf("file %q: exit %d, %q", file, code, errb.String())
		}
		out.Reset()
		errb.Reset()
		err = run(context.Background(), []string{"plan", sc, "--trace", secret}, &out, &errb)
		if code := cli.ExitCode(err, &errb); file == "link.jsonl" && (code != cli.ExitOK || !strings.Contains(out.String(), "named by the command line")) {
			t.Errorf("--trace %s: exit %d, %s%s", secret, code, out.String(), errb.String())
		}
	}
}

// TestSweepTraceOffloadGain is the capacity question on a trace: an open-loop replay of a
// generated conversation trace (six turns a conversation, two seconds apart) at about 20
// requests/s against the embedded engine with its host tier and without it, prefill
// batch-scheduled and a GPU pool of 2,048 tokens that keeps few conversations. With the tier
// the follow-ups' prefixes are reloaded, not recomputed, so the same rate needs under half
// the compute: the tier-off server saturates (its queue grows for the whole window: TTFT p90
// about 6.5 s here, 7 s under -race) while the tier-on one keeps up (about 0.8 s, 1.4 s under
// -race with the client 0.8 s behind at worst). Wall-clock noise only adds time, so the 3 s
// threshold cannot let the tier-off server pass, and leaves the tier-on one more than 1.5 s.
// One level each keeps the test short; record.TestSweepRequestRateCapacity and
// compare.TestCompareRequestRateSweeps hold the decision over several levels.
func TestSweepTraceOffloadGain(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	if testing.Short() {
		t.Skip("runs two sweeps")
	}
	small := func(p *sim.Profile) { p.NumGPUBlocks, p.MaxModelLen = 128, 2048 }
	on := startSim(t, sim.Options{Profile: "chat-offload16", Speed: 1, Override: small})
	off := startSim(t, sim.Options{Profile: "chat-offload0", Speed: 1, Override: small})
	dir := t.TempDir()
	cfg := trace.DefaultGeneratorConfig()
	cfg.Seed, cfg.Requests, cfg.Rate, cfg.BlockTokens, cfg.Scale, cfg.MaxInputTokens = 7, 200, 40, 16, 1.0/32, 1200*32
	cfg.ThinkTime, cfg.Turns = 2*time.Second, 6
	g, err := trace.NewGenerator(cfg)
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if _, err := trace.WriteJSONL(&b, g); err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(filepath.Join(dir, "conversation.jsonl"), b.Bytes(), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := traceScenario(t, dir, "conversation.jsonl", "")
	out := t.TempDir()
	levels := []string{"--time-scales", "0.85", "--ttft-p90-ms", "3000", "--out", out}
	son, dirOn := sweepJSON(t, append([]string{sc, "--endpoint", on.URL() + "/v1"}, levels...)...)
	soff, dirOff := sweepJSON(t, append([]string{sc, "--endpoint", off.URL() + "/v1"}, levels...)...)
	for _, s := range []*record.Sweep{son, soff} {
		if s.Status != record.StatusCompleted || s.Load != record.SweepRequestRate || len(s.Levels) != 1 {
			t.Fatalf("status %s, load %s, %d levels", s.Status, s.Load, len(s.Levels))
		}
		for _, l := range s.Levels {
			if l.FailedRequests != 0 || l.Requests != 200 || !l.CountersValid || l.RequestsPerSecond == nil || l.DispatchLagMS == nil {
				t.Fatalf("level %v: %d/%d requests failed, counters valid %v, rate %v", l.TimeScale, l.FailedRequests, l.Requests, l.CountersValid, l.RequestsPerSecond)
			}
		}
		if r := *s.Levels[0].RequestsPerSecond; r < 15 || r > 30 {
			t.Errorf("the level offers %.1f requests/s", r)
		}
	}
	for i := range son.Levels {
		t.Logf("%.1f requests/s: TTFT p90 %s ms with the tier (host %s, ideal %s, dispatch lag p99 %s ms), %s ms without (lag p99 %s ms)", *son.Levels[i].RequestsPerSecond,
			units.MS(son.Levels[i].TTFTMS.P90), units.MS(son.Levels[i].Tiers.Host), units.MS(son.Levels[i].IdealHostShare), units.MS(son.Levels[i].DispatchLagMS.P99),
			units.MS(soff.Levels[i].TTFTMS.P90), units.MS(soff.Levels[i].DispatchLagMS.P99))
	}
	t.Logf("tier on: %s; tier off: %s", son.CapacityReason, soff.CapacityReason)
	if son.CapacityRequestsPerSecond == nil || soff.CapacityRequestsPerSecond != nil && *soff.CapacityRequestsPerSecond >= *son.CapacityRequestsPerSecond {
		t.Fatalf("capacity with the tier %v requests/s, without %v: want more with it", son.CapacityRequestsPerSecond, soff.CapacityRequestsPerSecond)
	}
	lon, loff := son.Levels[0], soff.Levels[0]
	if lon.Tiers.Host == nil || *lon.Tiers.Host < 0.2 || loff.Tiers.Host == nil || *loff.Tiers.Host != 0 || lon.IdealHostShare == nil || *lon.IdealHostShare < 0.2 {
		t.Fatalf("host share %v with the tier (ideal %v), %v without", lon.Tiers.Host, lon.IdealHostShare, loff.Tiers.Host)
	}
	var cmp, errb bytes.Buffer
	err = run(context.Background(), []string{"compare", dirOff, dirOn, "--format", "json"}, &cmp, &errb)
	if code := cli.ExitCode(err, &errb); code != cli.ExitOK {
		t.Fatalf("compare tier off -> on: exit %d\n%s", code, errb.String())
	}
	var gain compare.SweepResult
	if err := json.Unmarshal(cmp.Bytes(), &gain); err != nil {
		t.Fatal(err)
	}
	if gain.Regression || gain.CandidateCapacityRate == nil || gain.Load != record.SweepRequestRate {
		t.Fatalf("gain: %+v", gain)
	}
	cmp.Reset()
	err = run(context.Background(), []string{"compare", dirOn, dirOff}, &cmp, &errb)
	if code := cli.ExitCode(err, &errb); code != cli.ExitRegression || !strings.Contains(cmp.String(), "REGRESSION") || !strings.Contains(cmp.String(), "requests/s") {
		t.Fatalf("compare tier on -> off: exit %d\n%s%s", code, cmp.String(), errb.String())
	}

	// The sweep's report is framed as a sweep: its capacity table, and its level's trace
	// split against the ideal and TTFT percentiles, drawn as a distribution.
	file := filepath.Join(t.TempDir(), "sweep.html")
	if _, stderr, code := runCLI(t, "report", dirOn, "-o", file); code != cli.ExitOK {
		t.Fatalf("report: exit %d: %s", code, stderr)
	}
	page, err := os.ReadFile(file)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`<table class="capacity" id="sweep-0">`, "Sweep ", ": capacity", "measured tier split against the ideal", "ideal at the server",
		`<table class="step-ttft" id="step-ttft-0">`, "distribution per step (200 requests)", `<p class="answer pass">PASS</p>`} {
		if !strings.Contains(string(page), want) {
			t.Errorf("the sweep's report lacks %q", want)
		}
	}
	if strings.Contains(string(page), "Study:") {
		t.Error("the sweep's report is framed as a study")
	}
}

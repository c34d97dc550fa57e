package runner

import (
	"context"
	"errors"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
)

// offloadServer scripts a server with a CPU tier for unitScenario: the three sequence requests
// compute their prompts and store 1000, 2000 and 3000 bytes; the replay (call 3) hits the
// 64-token shared prefix in GPU memory and reloads the other 236 tokens from the CPU tier.
func offloadServer(m *fakeMetrics) func(int, client.ChatRequest, func(client.Progress)) client.Result {
	return func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.PromptTokens, 300)
		m.add(metrics.GPUPrefixQueries, 300)
		if n%4 < 3 {
			if n%4 > 0 {
				m.add(metrics.GPUPrefixHits, 64)
			}
			m.add(metrics.StoreBytes, float64(1000*(n%4+1)))
			return okResult(300, nil)
		}
		m.add(metrics.GPUPrefixHits, 64)
		m.add(metrics.ExternalPrefixHits, 236)
		m.add(metrics.LoadBytes, 236*1000)
		return okResult(300, intp(300))
	}
}

// TestRunWaitsForIdleServer: a measured request is sent only once the server reports no
// running and no waiting request, before it and after the previous one.
func TestRunWaitsForIdleServer(t *testing.T) {
	m := newFakeMetrics()
	m.busy = 3 // still busy with someone else's requests when the run starts
	chat := &fakeChat{m: m}
	base := offloadServer(m)
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		// The request leaves work queued behind it: the after-scrape must wait it out.
		m.update(func(m *fakeMetrics) { m.busy, m.busyGauge = 2, metrics.RequestsWaiting })
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))

	calls := chat.Calls()
	if len(calls) != 4 {
		t.Fatalf("%d requests sent, want 4", len(calls))
	}
	for i, c := range calls {
		if !c.Idle {
			t.Errorf("request %d was sent while the server reported a running or waiting request", i)
		}
	}
	m.update(func(m *fakeMetrics) {
		if m.busy != 0 || m.busyScrapes != 3+4*2 {
			t.Errorf("%d busy scrapes read, %d left; want all %d read", m.busyScrapes, m.busy, 3+4*2)
		}
	})
	for _, a := range out.Steps {
		for _, r := range a.Requests {
			iso := r.Isolation
			if iso == nil || iso.IdleCheck != "gauges" || iso.TimedOutBefore || iso.TimedOutAfter {
				t.Errorf("%s[%d]: isolation %+v, want idle proven by the gauges without timeouts", a.Step, r.IndexInStep, iso)
			}
		}
	}
}

// TestRunIdleCheckUnavailable: without a running gauge isolation cannot be proven, and the
// record says so instead of claiming an idle server.
func TestRunIdleCheckUnavailable(t *testing.T) {
	m := newFakeMetrics()
	delete(m.gauges, metrics.RequestsRunning)
	chat := &fakeChat{m: m, reply: offloadServer(m)}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	r := out.Steps[0].Requests[0]
	if r.Isolation == nil || r.Isolation.IdleCheck != "unavailable" {
		t.Fatalf("isolation %+v, want idle_check unavailable", r.Isolation)
	}
	if _, ok := deltaOf(r.Counters, metrics.StoreBytes); !ok {
		t.Errorf("counters were still read around the request: %+v", r.Counters)
	}
}

// TestRunIdleTimeout: a server that never goes idle bounds the wait; the request is still
// sent and measured, and the record says the wait timed out.
func TestRunIdleTimeout(t *testing.T) {
	m := newFakeMetrics()
	m.busy = 1 << 30 // busy for good
	chat := &fakeChat{m: m, reply: offloadServer(m)}
	cfg := newConfig(t, unitScenario, chat, m)
	cfg.Scenario.Target.IdleTimeout.Duration = 30 * time.Millisecond
	out := run(t, context.Background(), cfg)
	if n := len(chat.Calls()); n != 4 {
		t.Fatalf("%d requests sent, want 4", n)
	}
	iso := out.Steps[0].Requests[0].Isolation
	if iso == nil || !iso.TimedOutBefore || !iso.TimedOutAfter || iso.IdleCheck != "gauges" {
		t.Fatalf("isolation %+v, want both waits timed out", iso)
	}
}

// TestRunCounterDeltas: each isolated request gets the delta of its own scrapes, and the
// step's delta spans its first before-scrape to its last after-scrape.
func TestRunCounterDeltas(t *testing.T) {
	m := newFakeMetrics()
	m.counters[metrics.StoreBytes] = 5e6 // counters are cumulative over the server's life
	chat := &fakeChat{m: m, reply: offloadServer(m)}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))

	if len(out.Steps) != 2 || out.Interrupted {
		t.Fatalf("%d artifacts, interrupted %v", len(out.Steps), out.Interrupted)
	}
	seq := out.Steps[0]
	if seq.Step != "sequence" || seq.Kind != "sequence" || seq.DeltaScope != record.ScopeRequest || len(seq.Requests) != 3 {
		t.Fatalf("sequence artifact: step %q kind %q scope %q, %d requests", seq.Step, seq.Kind, seq.DeltaScope, len(seq.Requests))
	}
	for i, r := range seq.Requests {
		got, ok := deltaOf(r.Counters, metrics.StoreBytes)
		if want := float64(1000 * (i + 1)); !ok || got != want {
			t.Errorf("request %d: store bytes delta %v (usable %v), want %v", i, got, ok, want)
		}
		if got, _ := deltaOf(r.Counters, metrics.PromptTokens); got != 300 {
			t.Errorf("request %d: prompt tokens delta %v, want 300", i, got)
		}
		if !r.Counters.Valid {
			t.Errorf("request %d: delta invalid: %v", i, r.Counters.InvalidReasons)
		}
	}
	sc := seq.Span
	if got, ok := deltaOf(sc, metrics.StoreBytes); !ok || got != 6000 {
		t.Errorf("step store bytes delta %v (usable %v), want 6000", got, ok)
	}
	if b := sc.Before(metrics.StoreBytes); *b != 5e6 || *b != *seq.Requests[0].Counters.Before(metrics.StoreBytes) {
		t.Errorf("step before %v, want the first request's before (5e6)", *b)
	}
	if a := sc.After(metrics.StoreBytes); *a != 5e6+6000 || *a != *seq.Requests[2].Counters.After(metrics.StoreBytes) {
		t.Errorf("step after %v, want the last request's after (5e6+6000)", *a)
	}

	rp := out.Steps[1]
	if rp.Kind != "replay" || len(rp.Requests) != 1 {
		t.Fatalf("replay artifact: kind %q, %d requests", rp.Kind, len(rp.Requests))
	}
	req := rp.Requests[0]
	if got, _ := deltaOf(req.Counters, metrics.ExternalPrefixHits); got != 236 {
		t.Errorf("replay external hits delta %v, want 236", got)
	}
	if req.Verdict == nil || req.Verdict.Verdict != verdict.CPUReload {
		t.Fatalf("replay verdict %+v, want cpu_reload", req.Verdict)
	}
	if !req.Replay || req.ReplayOf == nil || req.ReplayOf.Step != "sequence" || req.Prompt.Identity != seq.Requests[0].Prompt.Identity {
		t.Errorf("the replay is not request 0's exact prompt: %+v", req.ReplayOf)
	}
	if req.Verdict.Capacity == nil {
		t.Errorf("the replay has no capacity math")
	}

	// The files say the same.
	files := stepFiles(t, out.Dir)
	if !slices.Equal(files, []string{"step-01-sequence.json", "step-02-replay.json"}) {
		t.Fatalf("step files %v", files)
	}
	disk := readArtifact(t, out.Dir, "step-01-sequence.json")
	if disk.Counters != nil {
		t.Errorf("an isolated step's span is written again: %+v", disk.Counters)
	}
	if got, ok := deltaOf(derive.Assemble(disk).Span, metrics.StoreBytes); !ok || got != 6000 {
		t.Errorf("step-01 store bytes delta %v (usable %v), want 6000", got, ok)
	}
	if got, _ := deltaOf(disk.Requests[1].Counters, metrics.StoreBytes); got != 2000 {
		t.Errorf("step-01 request 1 store bytes delta %v, want 2000", got)
	}
	if d := readArtifact(t, out.Dir, "step-02-replay.json"); d.Requests[0].Verdict == nil || d.Requests[0].Verdict.Verdict != verdict.CPUReload {
		t.Errorf("step-02 verdict %+v, want cpu_reload", d.Requests[0].Verdict)
	}
	if s := runFile(t, out.Dir, "status"); s != record.StatusCompleted {
		t.Errorf("run.json status %v, want %s", s, record.StatusCompleted)
	}
}

// TestRunCounterWentDown: a counter that goes down between a request's scrapes (the server
// restarted) makes that request's delta invalid, and a replay measured across it is invalid.
func TestRunCounterWentDown(t *testing.T) {
	m := newFakeMetrics()
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		if n == 1 || n == 3 {
			m.set(metrics.GPUPrefixQueries, 10) // restarted: counters start over
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	seq := out.Steps[0].Requests
	for i, want := range []bool{true, false, true} {
		if seq[i].Counters.Valid != want {
			t.Errorf("request %d: delta valid %v, want %v", i, seq[i].Counters.Valid, want)
		}
	}
	cd := seq[1].Counters.Values[metrics.GPUPrefixQueries]
	if !cd.Decreased || !strings.Contains(cd.Reason, "gpu_prefix_queries went down from 300 to 10") {
		t.Errorf("request 1: %+v, want gpu_prefix_queries decreased 300 -> 10", cd)
	}
	if _, ok := seq[1].Counters.Value(metrics.GPUPrefixQueries); ok {
		t.Errorf("a decreased counter's delta is still usable")
	}
	// Other counters of the same pair are still readable, but the pair is flagged.
	if got, ok := deltaOf(seq[1].Counters, metrics.StoreBytes); !ok || got != 2000 {
		t.Errorf("request 1 store bytes delta %v (usable %v), want 2000", got, ok)
	}

	v := out.Steps[1].Requests[0].Verdict
	if v == nil || v.Verdict != verdict.Invalid || !strings.Contains(v.Reason, "gpu_prefix_queries went down") {
		t.Fatalf("replay verdict %+v, want invalid naming the counter that went down", v)
	}
	if d := readArtifact(t, out.Dir, "step-01-sequence.json"); d.Requests[1].Counters.Valid || !d.Requests[1].Counters.Values[metrics.GPUPrefixQueries].Decreased {
		t.Errorf("step-01 on disk lost the decrease: %+v", d.Requests[1].Counters)
	}
}

// TestRunAbsentCounterStaysAbsent: a counter the server does not serve is absent in every
// delta, on disk as null, never 0; and one that appears mid-request has no delta either.
func TestRunAbsentCounterStaysAbsent(t *testing.T) {
	m := newFakeMetrics()
	delete(m.counters, metrics.ExternalPrefixHits)
	delete(m.counters, metrics.LoadBytes)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.PromptTokens, 300)
		if n == 3 {
			m.add(metrics.GPUPrefixHits, 64)
			m.set(metrics.LoadBytes, 4096) // the family appears with its first load
		}
		return okResult(300, intp(64))
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))

	req := out.Steps[1].Requests[0]
	for _, c := range []metrics.Counter{metrics.ExternalPrefixHits, metrics.LoadBytes} {
		cd, ok := req.Counters.Values[c]
		if !ok || cd.Present() || cd.Delta() != nil {
			t.Errorf("%s: %+v (listed %v), want listed and absent", c, cd, ok)
		}
	}
	if cd := req.Counters.Values[metrics.LoadBytes]; cd.After == nil || *cd.After != 4096 || cd.Before != nil {
		t.Errorf("load_bytes: before %v after %v, want absent then 4096", cd.Before, cd.After)
	}
	v := req.Verdict
	if v == nil || v.MeasuredLoadBytesPerToken != nil || v.ExpectedLoadBytes != nil {
		t.Fatalf("verdict %+v, want no load byte figures from absent counters", v)
	}
	if v.Verdict != verdict.Recompute || !slices.ContainsFunc(v.Notes, func(s string) bool { return strings.Contains(s, "no external prefix-cache hit counter") }) {
		t.Errorf("verdict %s %v, want recompute with a note that a reload could not be seen", v.Verdict, v.Notes)
	}

	data, err := os.ReadFile(filepath.Join(out.Dir, "step-02-replay.json"))
	if err != nil {
		t.Fatal(err)
	}
	for _, re := range []*regexp.Regexp{
		regexp.MustCompile(`"external_prefix_hits":\s*\{\s*"before":\s*null,\s*"after":\s*null,\s*"delta":\s*null,\s*"present":\s*false`),
		regexp.MustCompile(`"load_bytes":\s*\{\s*"before":\s*null,\s*"after":\s*4096,\s*"delta":\s*null,\s*"present":\s*false`),
	} {
		if !re.Match(data) {
			t.Errorf("step-02 does not write an absent side as null: no match for %s", re)
		}
	}
	disk := readArtifact(t, out.Dir, "step-02-replay.json")
	if cd := disk.Requests[0].Counters.Values[metrics.ExternalPrefixHits]; cd.Present() || cd.Before != nil || cd.After != nil {
		t.Errorf("external_prefix_hits read back present: %+v", cd)
	}
}

// TestRunInterrupted: cancelling mid-step keeps what was measured, including the request in
// flight with its after-scrape, sends nothing more, skips the gates and says interrupted.
func TestRunInterrupted(t *testing.T) {
	m := newFakeMetrics()
	ctx, cancel := context.WithCancelCause(context.Background())
	defer cancel(nil)
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		if n == 1 {
			cancel(errors.New("signal: interrupt"))
			res.ErrorKind, res.Error = client.ErrorKindCanceled, "context canceled"
		}
		return res
	}
	src := unitScenario + `
[[gate]]
step = "sequence"
max_failed_requests = 5
`
	out := run(t, ctx, newConfig(t, src, chat, m))

	if !out.Interrupted {
		t.Fatal("Outcome.Interrupted is false")
	}
	if n := len(chat.Calls()); n != 2 {
		t.Errorf("%d requests sent, want 2 (none after the interrupt)", n)
	}
	if len(out.Steps) != 1 {
		t.Fatalf("%d artifacts, want the interrupted step only", len(out.Steps))
	}
	a := out.Steps[0]
	if !a.Interrupted || len(a.Requests) != 2 {
		t.Fatalf("step: interrupted %v, %d requests; want interrupted with 2", a.Interrupted, len(a.Requests))
	}
	last := a.Requests[1]
	if last.Result.ErrorKind != client.ErrorKindCanceled {
		t.Errorf("request 1 error kind %q, want canceled", last.Result.ErrorKind)
	}
	if got, ok := deltaOf(last.Counters, metrics.StoreBytes); !ok || got != 2000 {
		t.Errorf("request 1 store bytes delta %v (usable %v) %q: the in-flight request lost its after-scrape", got, ok, last.CountersError)
	}
	if got, ok := deltaOf(a.Span, metrics.StoreBytes); !ok || got != 3000 {
		t.Errorf("step store bytes delta %v (usable %v), want 3000", got, ok)
	}
	if len(out.Gates) != 0 {
		t.Errorf("gates were judged on an interrupted run: %+v", out.Gates)
	}

	if files := stepFiles(t, out.Dir); !slices.Equal(files, []string{"step-01-sequence.json"}) {
		t.Errorf("step files %v, want the interrupted step only", files)
	}
	if d := readArtifact(t, out.Dir, "step-01-sequence.json"); !d.Interrupted || len(d.Requests) != 2 {
		t.Errorf("step-01 on disk: interrupted %v, %d requests", d.Interrupted, len(d.Requests))
	}
	if s := runFile(t, out.Dir, "status"); s != record.StatusInterrupted {
		t.Errorf("run.json status %v, want %s", s, record.StatusInterrupted)
	}
	if r, _ := runFile(t, out.Dir, "stop_reason").(string); !strings.Contains(r, "signal: interrupt") {
		t.Errorf("run.json stop_reason %q, want the cause", r)
	}
}

// TestRunScrapeFailure: a request whose counters cannot be read keeps its result and says
// why; a replay without counters cannot get a tier verdict.
func TestRunScrapeFailure(t *testing.T) {
	m := newFakeMetrics()
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		if n == 3 {
			m.update(func(m *fakeMetrics) { m.fail = errors.New("connection refused") })
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	req := out.Steps[1].Requests[0]
	if req.Counters != nil || !strings.Contains(req.CountersError, "after the request: connection refused") {
		t.Fatalf("counters %v, error %q; want none and the scrape error", req.Counters, req.CountersError)
	}
	if req.Result.PromptTokens == nil || *req.Result.PromptTokens != 300 {
		t.Errorf("the request's own result was lost: %+v", req.Result.PromptTokens)
	}
	if v := req.Verdict; v == nil || v.Verdict != verdict.Invalid || v.Reason != "no counters were read around the replay (a scrape failed): "+req.CountersError {
		t.Errorf("verdict %+v, want invalid for lack of counters, not called a restart", v)
	}
}

// TestRunConcurrentStep: overlapping requests have no per-request delta; the step's delta
// covers them all, and every request is recorded in step order.
func TestRunConcurrentStep(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(int, client.ChatRequest, func(client.Progress)) client.Result {
		m.add(metrics.StoreBytes, 100)
		return okResult(300, nil)
	}
	src := strings.Replace(unitScenario, "requests = 3\n", "requests = 4\nconcurrency = 2\n", 1)
	out := run(t, context.Background(), newConfig(t, src, chat, m))
	a := out.Steps[0]
	if a.DeltaScope != record.ScopeStep || a.Concurrency != 2 || len(a.Requests) != 4 {
		t.Fatalf("scope %q concurrency %d, %d requests", a.DeltaScope, a.Concurrency, len(a.Requests))
	}
	for i, r := range a.Requests {
		if r.IndexInStep != i || r.Counters != nil {
			t.Errorf("request %d: index %d, counters %v; want in order and no per-request delta", i, r.IndexInStep, r.Counters)
		}
	}
	if got, ok := deltaOf(a.Counters, metrics.StoreBytes); !ok || got != 400 {
		t.Errorf("step store bytes delta %v (usable %v), want 400", got, ok)
	}
}

// TestRunSamplesPeakAtFirstOutput: the KV usage is read when the first output arrives, so a
// short request still records the occupancy it reached.
func TestRunSamplesPeakAtFirstOutput(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, progress func(client.Progress)) client.Result {
		scraped := make(chan struct{}, 1)
		m.update(func(m *fakeMetrics) { m.gauges[metrics.KVUsage], m.scraped = 0.25*float64(n%4+1), scraped })
		progress(client.Progress{Phase: client.PhaseDecode, Tokens: 1})
		select {
		case <-scraped:
		case <-time.After(30 * time.Second):
			t.Errorf("request %d: no scrape after the first output", n)
		}
		m.update(func(m *fakeMetrics) { m.gauges[metrics.KVUsage], m.scraped = 0, nil })
		return okResult(300, nil)
	}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	for i, r := range out.Steps[0].Requests {
		want := 0.25 * float64(i+1)
		if p := r.Samples.PeakKVUsage; p == nil || *p != want {
			t.Errorf("request %d: peak KV usage %v, want %v", i, p, want)
		}
	}
	if p := out.Steps[0].Sampled.PeakKVUsage; p == nil || *p != 0.75 {
		t.Errorf("step peak KV usage %v, want 0.75", p)
	}
}

const gatesTOML = `
[[gate]]
step = "replay"
verdict = "cpu_reload"
min_cached_fraction = 0.9

[[gate]]
step = "replay"
verdict = "gpu_hit"

[[gate]]
step = "sequence"
require_store = true
max_failed_requests = 0
`

// TestRunGates: gates judge the measured verdict, cached fraction, store and failures.
func TestRunGates(t *testing.T) {
	m := newFakeMetrics()
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		if n == 2 {
			res.ErrorKind, res.Error = client.ErrorKindHTTPStatus, "HTTP 500"
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario+gatesTOML, chat, m))
	if len(out.Gates) != 3 {
		t.Fatalf("%d gate results, want 3", len(out.Gates))
	}
	want := []struct {
		passed bool
		reason string
	}{
		{true, "verdict cpu_reload; cached fraction 1.0000 >= 0.9"},
		{false, "verdict cpu_reload, want gpu_hit"},
		{false, "1 failed requests [2], want <= 0"},
	}
	for i, w := range want {
		g := out.Gates[i]
		if g.Passed != w.passed || !strings.Contains(g.Reason, w.reason) {
			t.Errorf("gate %d: passed %v %q, want %v containing %q", i, g.Passed, g.Reason, w.passed, w.reason)
		}
	}
	if failed := out.GatesFailed(); len(failed) != 2 || failed[0].Gate.Verdict != "gpu_hit" {
		t.Errorf("GatesFailed %+v, want the gpu_hit and failures gates", failed)
	}
}

// TestRunRepeat: a repeated run plans repetition k with seed + k, so its prompts are new
// (cold); each repetition writes its own files; a gate must pass in every repetition.
func TestRunRepeat(t *testing.T) {
	m := newFakeMetrics()
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		if n == 7 { // repetition 1's replay: recomputed
			m.add(metrics.PromptTokens, 300)
			return okResult(300, intp(0))
		}
		return base(n, req, p)
	}
	src := unitScenario + `
[[gate]]
step = "replay"
verdict = "cpu_reload"

[[gate]]
step = "replay"
verdict = "gpu_hit"
`
	cfg := newConfig(t, src, chat, m)
	cfg.Repeat = 2
	planner := RepetitionPlanner(cfg.Plan, Target{})
	var asked []int
	var rep1 *plan.Plan
	cfg.Replan = func(ctx context.Context, k int) (*plan.Plan, error) {
		asked = append(asked, k)
		p, err := planner(ctx, k)
		rep1 = p
		return p, err
	}
	out := run(t, context.Background(), cfg)

	if !slices.Equal(asked, []int{1}) {
		t.Fatalf("Replan asked for %v, want [1]", asked)
	}
	if n := len(chat.Calls()); n != 8 {
		t.Errorf("%d requests sent, want 8", n)
	}
	files := stepFiles(t, out.Dir)
	wantFiles := []string{"step-01-sequence.json", "step-02-replay.json", "repeat-01-step-01-sequence.json", "repeat-01-step-02-replay.json"}
	if !slices.Equal(files, wantFiles) {
		t.Fatalf("files %v, want %v", files, wantFiles)
	}
	// Outcome.Artifacts are repetition 0's steps; repetition 1's are on disk.
	if len(out.Steps) != 2 || out.Steps[0].Requests[0].Prompt.Identity != cfg.Plan.Steps[0].Requests[0].Prompt.Identity {
		t.Fatalf("Outcome.Artifacts are not repetition 0's")
	}
	r1 := readArtifact(t, out.Dir, "repeat-01-step-01-sequence.json")
	for i, r := range r1.Requests {
		if r.Prompt.Identity != rep1.Steps[0].Requests[i].Prompt.Identity {
			t.Errorf("repetition 1 request %d is not the planned one", i)
		}
		if r.Prompt.Identity == out.Steps[0].Requests[i].Prompt.Identity {
			t.Errorf("repetition 1 request %d repeats repetition 0's prompt: it would start warm", i)
		}
	}
	seeded := *cfg.Scenario
	seeded.Prompt.Seed = 8
	if p, err := plan.Make(context.Background(), &seeded, plan.Facts{}); err != nil || p.Steps[0].Requests[0].Prompt.Identity != r1.Requests[0].Prompt.Identity {
		t.Errorf("repetition 1 was not planned with seed 7 + 1 (err %v)", err)
	}
	if v := readArtifact(t, out.Dir, "repeat-01-step-02-replay.json").Requests[0].Verdict; v == nil || v.Verdict != verdict.Recompute {
		t.Errorf("repetition 1 replay verdict %+v, want recompute", v)
	}

	// Gate 0 (cpu_reload) passes in repetition 0 and fails in 1: it fails, naming repetition 1.
	if len(out.Gates) != 2 {
		t.Fatalf("%d gates, want 2", len(out.Gates))
	}
	if g := out.Gates[0]; g.Passed || !strings.Contains(g.Reason, "repetition 1: verdict recompute, want cpu_reload") {
		t.Errorf("cpu_reload gate: passed %v %q, want failed in repetition 1", g.Passed, g.Reason)
	}
	if g := out.Gates[1]; g.Passed || strings.Count(g.Reason, "want gpu_hit") != 2 {
		t.Errorf("gpu_hit gate: passed %v %q, want failed in both repetitions", g.Passed, g.Reason)
	}
}

// TestRunRepeatPlanFails: a repetition that cannot be planned fails the run: status failed,
// the finished repetition kept in the repeats section, and the record says why.
func TestRunRepeatPlanFails(t *testing.T) {
	for _, tc := range []struct {
		name   string
		replan func(context.Context, int) (*plan.Plan, error)
		reason string
	}{
		{"no planner", nil, "repetition 2 of 2 could not run: no planner for repetitions"},
		{"planner fails", func(_ context.Context, k int) (*plan.Plan, error) {
			return nil, fmt.Errorf("planning repetition %d: tokenizer down", k)
		}, "repetition 2 of 2 could not run: planning repetition 1: tokenizer down"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMetrics()
			chat := &fakeChat{m: m, reply: offloadServer(m)}
			cfg := newConfig(t, unitScenario, chat, m)
			cfg.Repeat, cfg.Replan = 2, tc.replan
			out := run(t, context.Background(), cfg)
			if out.Interrupted || len(out.Steps) != 2 || len(chat.Calls()) != 4 {
				t.Fatalf("interrupted %v, %d artifacts, %d requests; want repetition 0 complete", out.Interrupted, len(out.Steps), len(chat.Calls()))
			}
			if files := stepFiles(t, out.Dir); len(files) != 2 {
				t.Errorf("files %v, want repetition 0's only", files)
			}
			if r, _ := runFile(t, out.Dir, "stop_reason").(string); r != tc.reason {
				t.Errorf("stop_reason %q, want %q", r, tc.reason)
			}
			if st, _ := runFile(t, out.Dir, "status").(string); st != "failed" || out.Failed != tc.reason {
				t.Errorf("status %q, outcome failed %q: a run that did less than asked must not look complete", st, out.Failed)
			}
			if reps, _ := runFile(t, out.Dir, "repeats").(map[string]any); reps == nil {
				t.Errorf("no repeats section: the finished repetition must be kept")
			}
		})
	}
}

// TestRunSlotAttribution: with token ids (llama.cpp, one slot), cached tokens beyond the
// common prefix with the prompt sent just before the replay came from the host-RAM cache.
func TestRunSlotAttribution(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m}
	chat.reply = func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		if n == 3 {
			return okResult(300, intp(296)) // llama.cpp re-evaluates the last prompt tokens
		}
		return okResult(300, intp(0))
	}
	cfg := newConfig(t, unitScenario, chat, m)
	// Token ids: every prompt shares its first 64 ids (the shared prefix), then differs.
	ids := map[string][]int{}
	for _, r := range cfg.Plan.Steps[0].Requests {
		toks := make([]int, 300)
		for i := range toks {
			toks[i] = i
			if i >= 64 {
				toks[i] += 1000 * (r.IndexInStep + 1)
			}
		}
		ids[fmt.Sprint(r.Prompt.Messages)] = toks
	}
	for _, tc := range []struct {
		name    string
		verdict verdict.Verdict
		reason  string
		idsErr  error
	}{
		{"ids read", verdict.CPUReload, "beyond the 64-token common prefix", nil},
		{"ids unreadable", verdict.TierUnknown, "reading token ids failed", errors.New("tokenize: HTTP 503")},
	} {
		t.Run(tc.name, func(t *testing.T) {
			chat.calls = nil
			cfg.Sinks = runDir(t)
			cfg.Engine = engine.LlamaCpp // attributes a replay by its single slot
			cfg.Slots = 1
			cfg.TokenIDs = func(_ context.Context, msgs []prompts.Message) ([]int, error) {
				if tc.idsErr != nil {
					return nil, tc.idsErr
				}
				toks, ok := ids[fmt.Sprint(msgs)]
				if !ok {
					return nil, errors.New("unknown prompt")
				}
				return toks, nil
			}
			out := run(t, context.Background(), cfg)
			v := out.Steps[1].Requests[0].Verdict
			if v == nil || v.Verdict != tc.verdict || !strings.Contains(v.Reason, tc.reason) {
				t.Fatalf("verdict %+v, want %s: %s", v, tc.verdict, tc.reason)
			}
			if tc.idsErr == nil && (v.Slot == nil || v.Slot.HostTokens == nil || *v.Slot.HostTokens != 296-64) {
				t.Errorf("slot attribution %+v, want %d host-cache tokens", v.Slot, 296-64)
			}
		})
	}
}

// TestStepRecordsClientCost: each step says what it cost kvbench's process, per 1k of the
// output tokens its requests reported.
func TestStepRecordsClientCost(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m, reply: offloadServer(m)}
	out := run(t, context.Background(), newConfig(t, unitScenario, chat, m))
	for _, art := range out.Steps {
		cc := art.Client
		if cc == nil {
			t.Fatalf("step %s: no client cost", art.Step)
		}
		tokens := 0
		for _, q := range art.Requests {
			tokens += q.Result.OutputTokens
		}
		if cc.CPUMS < 0 || cc.Cores < 0 || tokens == 0 || cc.CPUMSPer1kOutputTokens == nil ||
			math.Abs(*cc.CPUMSPer1kOutputTokens-cc.CPUMS*1000/float64(tokens)) > 1e-9 {
			t.Fatalf("step %s: client cost %+v for %d output tokens", art.Step, *cc, tokens)
		}
	}
}

// TestNoClientCostWithEngineInProcess: when the engine shares the process (the demo), its
// CPU time is not the client's, and steps record none.
func TestNoClientCostWithEngineInProcess(t *testing.T) {
	m := newFakeMetrics()
	cfg := newConfig(t, unitScenario, &fakeChat{m: m, reply: offloadServer(m)}, m)
	cfg.EngineInProcess = true
	for _, art := range run(t, context.Background(), cfg).Steps {
		if art.Client != nil {
			t.Fatalf("step %s records a client cost with the engine in process: %+v", art.Step, *art.Client)
		}
	}
}

// TestRunModelMismatch: a request another model answered keeps the name the server gave,
// and in a scenario with gates fails the run.
func TestRunModelMismatch(t *testing.T) {
	m := newFakeMetrics()
	base := offloadServer(m)
	chat := &fakeChat{m: m}
	chat.reply = func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		res := base(n, req, p)
		res.ServerModel = req.Model
		if n == 2 {
			res.ServerModel = "someone-else/other-model"
		}
		return res
	}
	out := run(t, context.Background(), newConfig(t, unitScenario+gatesTOML, chat, m))
	mismatched := 0
	for _, st := range out.Steps {
		for _, q := range st.Requests {
			if q.Result.ModelMismatch() {
				mismatched++
				if q.Result.ServerModel != "someone-else/other-model" {
					t.Errorf("server model %q, want the name the server gave", q.Result.ServerModel)
				}
			}
		}
	}
	if mismatched != 1 {
		t.Errorf("%d requests mismatched, want 1", mismatched)
	}
	found := false
	for _, g := range out.GatesFailed() {
		if g.Gate.Implicit && strings.Contains(g.Reason, "1 of") && strings.Contains(g.Reason, `answered as "someone-else/other-model"`) {
			found = true
		}
	}
	if !found {
		t.Errorf("no failed gate names the other model: %+v", out.Gates)
	}
}

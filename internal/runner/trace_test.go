package runner

import (
	"bytes"
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"math"
	"math/rand/v2"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/scenarios"
)

// fakeCompletions answers every completion at once with its max_tokens as output, counting
// the requests in flight; each call's request is kept.
type fakeCompletions struct {
	m         *fakeMetrics
	hold      time.Duration // how long each request stays in flight
	inFlight  atomic.Int64
	peak      atomic.Int64
	mu        sync.Mutex
	calls     []client.CompletionRequest
	cancelAt  int // cancel is called when this many requests have arrived (0: never)
	cancel    context.CancelFunc
	promptSum float64
	bodies    [][]byte // each call's body as it would go out, where it came encoded
}

func (f *fakeCompletions) StreamCompletion(ctx context.Context, req client.CompletionRequest, _ func(client.Progress)) client.Result {
	n := f.inFlight.Add(1)
	defer f.inFlight.Add(-1)
	for p := f.peak.Load(); n > p && !f.peak.CompareAndSwap(p, n); p = f.peak.Load() {
	}
	var body []byte
	if req.Body != nil {
		body = req.Body.Bytes()
	}
	req = withPrompt(req)
	f.mu.Lock()
	f.calls = append(f.calls, req)
	f.bodies = append(f.bodies, body)
	count := len(f.calls)
	f.mu.Unlock()
	if f.cancelAt > 0 && count == f.cancelAt {
		f.cancel()
	}
	if f.hold > 0 {
		select {
		case <-time.After(f.hold):
		case <-ctx.Done():
			return client.Result{StartedAt: time.Now().UTC(), Model: req.Model, ErrorKind: client.ErrorKindCanceled, Error: "canceled"}
		}
	}
	tokens := len(req.PromptTokenIDs)
	// The fake server serves every prompt token from its GPU cache but the last block.
	f.m.update(func(m *fakeMetrics) {
		m.counters[metrics.PromptTokens] += float64(tokens)
		m.counters[metrics.GPUPrefixQueries] += float64(tokens)
		m.counters[metrics.GPUPrefixHits] += float64(max(tokens-4, 0))
	})
	res := okResult(tokens, nil)
	res.OutputTokens = req.MaxTokens
	return res
}

// withPrompt is req with its prompt in PromptTokenIDs or PromptText, decoded from its body
// where the runner sent it encoded.
func withPrompt(req client.CompletionRequest) client.CompletionRequest {
	if req.Body == nil {
		if req.PromptJSON == nil {
			return req
		}
		req.Body, _ = client.EncodeCompletion(req)
	}
	var body struct {
		Prompt json.RawMessage `json:"prompt"`
	}
	if json.Unmarshal(req.Body.Bytes(), &body) == nil && json.Unmarshal(body.Prompt, &req.PromptTokenIDs) != nil {
		_ = json.Unmarshal(body.Prompt, &req.PromptText)
	}
	return req
}

func (f *fakeCompletions) requests() []client.CompletionRequest {
	f.mu.Lock()
	defer f.mu.Unlock()
	return slices.Clone(f.calls)
}

// traceConfig plans a scenario with one trace step over lines (a trace in blocks of 4
// tokens), the step's fields in step; the trace lies beside the scenario.
func traceConfig(t *testing.T, lines []string, step string, c CompletionStreamer, m MetricsSource) Config {
	t.Helper()
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(strings.Join(lines, "\n")+"\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	src := fmt.Sprintf(`name = "trace-unit"
[target]
endpoint = "http://127.0.0.1:1/v1"
model = "fake-model"
[server]
gpu_kv_tokens = 64
block_size = 4
[prompt]
seed = 7
token_counting = "estimate"
[[step]]
id = "load"
kind = "trace"
file = "t.jsonl"
block_tokens = 4
scrape_interval = "10ms"
%s
`, step)
	sc, err := scenarios.Parse([]byte(src), filepath.Join(dir, "s.toml"))
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(context.Background(), sc, plan.Facts{})
	if err != nil {
		t.Fatal(err)
	}
	return Config{Scenario: sc, Plan: p, Chat: &fakeChat{m: newFakeMetrics()}, Completions: c, Metrics: m, Sinks: runDir(t), BlockSize: 4, NoProbes: true,
		Capacity: []capacity.Figures{plan.ScenarioFigures(sc)}}
}

func traceLine(ms, input, output int, ids ...int) string {
	s := make([]string, len(ids))
	for i, id := range ids {
		s[i] = fmt.Sprint(id)
	}
	return fmt.Sprintf(`{"timestamp": %d, "input_length": %d, "output_length": %d, "hash_ids": [%s]}`, ms, input, output, strings.Join(s, ", "))
}

// TestTraceStepOpenLoop: an open loop sends the window's requests at their timestamps x
// time_scale, each prompt block for block (shared ids, shared tokens), asking for its
// output_length; the long request is dropped and counted, and the record keeps each
// request's trace line, schedule and lag, the series, and the console its progress.
func TestTraceStepOpenLoop(t *testing.T) {
	m := newFakeMetrics()
	f := &fakeCompletions{m: m}
	lines := []string{
		traceLine(1000, 10, 3, 1, 2, 3),
		traceLine(1040, 9, 0, 1, 2, 4),
		traceLine(1100, 400, 5), // over max_input_tokens
		traceLine(1200, 6, 2, 5),
	}
	cfg := traceConfig(t, lines, "time_scale = 0.5\nmax_input_tokens = 100", f, m)
	var con bytes.Buffer
	cfg.Sinks = append(cfg.Sinks, NewConsole(&con, false))
	out := run(t, context.Background(), cfg)
	if out.Record.Status != record.StatusCompleted {
		t.Fatalf("status %s: %s", out.Record.Status, out.Record.StopReason)
	}
	st := out.Steps[0]
	if st.Kind != record.KindTrace || len(st.Requests) != 3 || st.Trace.DroppedRequests != 1 || st.Trace.PlannedRequests != 3 {
		t.Fatalf("step: kind %s, %d requests, trace %+v", st.Kind, len(st.Requests), st.Trace)
	}
	// The schedule is (timestamp - 1000) x 0.5 from when the replay's clock started, once
	// its first prompts were built.
	wantLines, wantScheduled := []int{1, 2, 4}, []float64{0, 20, 100}
	origin := st.Requests[0].Trace.ScheduledMS
	for i, q := range st.Requests {
		tr := q.Trace
		if q.IndexInStep != i || tr.Line != wantLines[i] || math.Abs(tr.ScheduledMS-origin-wantScheduled[i]) > 1e-6 || origin < 0 || tr.DispatchLagMS < 0 {
			t.Errorf("request %d: index %d, trace %+v", i, q.IndexInStep, tr)
		}
		// The fake client is not HTTP: the lag runs to when a worker took the request up.
		if tr.BodyWritten || tr.StartLagMS == nil || *tr.StartLagMS != tr.DispatchLagMS {
			t.Errorf("request %d: lag %v, start lag %v, body written %v", i, tr.DispatchLagMS, tr.StartLagMS, tr.BodyWritten)
		}
		if q.Prompt.Tokens != tr.InputLength || q.Prompt.TokenCounting != scenarios.PromptFormTokenIDs || len(q.Prompt.Identity) != 64 {
			t.Errorf("request %d: prompt %+v", i, q.Prompt)
		}
	}
	calls := f.requests()
	slices.SortFunc(calls, func(a, b client.CompletionRequest) int { return len(b.PromptTokenIDs) - len(a.PromptTokenIDs) })
	a, b, c := calls[0].PromptTokenIDs, calls[1].PromptTokenIDs, calls[2].PromptTokenIDs
	if len(a) != 10 || len(b) != 9 || len(c) != 6 {
		t.Fatalf("prompt lengths %d %d %d", len(a), len(b), len(c))
	}
	if !slices.Equal(a[:8], b[:8]) || slices.Equal(a[8:9], b[8:9]) || slices.Equal(a[:4], c[:4]) {
		t.Errorf("shared ids must share tokens, others not: %v / %v / %v", a, b, c)
	}
	for _, r := range calls {
		want := map[int]int{10: 3, 9: 1, 6: 2}[len(r.PromptTokenIDs)] // output_length 0 asks for 1
		if r.MaxTokens != want || !r.IgnoreEOS {
			t.Errorf("a %d-token prompt asks max_tokens %d ignore_eos %v, want %d", len(r.PromptTokenIDs), r.MaxTokens, r.IgnoreEOS, want)
		}
	}
	sec := out.Record.Trace("load")
	if sec == nil || sec.Mode != record.TraceOpenLoop || *sec.TimeScale != 0.5 || sec.DispatchLagMS.N != 3 || sec.TTFTMS.N != 3 {
		t.Fatalf("section %+v", sec)
	}
	if sec.Tiers.GPUHitTokens == nil || *sec.Tiers.GPUHitTokens != 13 || *sec.Tiers.PromptTokens != 25 {
		t.Errorf("tiers %+v", sec.Tiers)
	}
	// The scenario states a 64-token GPU pool and no CPU tier: the ideal of a server without
	// a host tier, from the same window (the dropped request left out).
	if i := sec.Ideal; i == nil || i.GPUTokens != 64 || i.HostTokens != 0 || i.PromptTokens != 25 || i.HostHitTokens != 0 || !i.PoolHoldsOutput {
		t.Errorf("ideal %+v (%s)", sec.Ideal, sec.IdealUnavailable)
	}
	text := con.String()
	for _, want := range []string{"trace load: 3/3 requests (100%)", "dispatch lag p50", "the host tier served 0.0% of prompt tokens (the GPU prefix cache 52.0%); an LRU host tier of its size (0 tokens) would have served 0.0%"} {
		if !strings.Contains(text, want) {
			t.Errorf("console lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "  [0] planned") {
		t.Errorf("the console printed a line per successful trace request:\n%s", text)
	}
}

// TestTraceLagRunsToBodyWritten: over HTTP a request's dispatch lag runs from its due time
// to its body written, after a worker took it up (its start lag), and the body sent is the
// one encoded ahead.
func TestTraceLagRunsToBodyWritten(t *testing.T) {
	srv := completionServer(t)
	m := newFakeMetrics()
	c := client.New(client.Config{BaseURL: srv.URL + "/v1"})
	lines := []string{traceLine(1000, 10, 3, 1, 2, 3), traceLine(1010, 9, 2, 1, 2, 4), traceLine(1020, 6, 2, 5)}
	cfg := traceConfig(t, lines, "time_scale = 0.5", c, m)
	out := run(t, context.Background(), cfg)
	st := out.Steps[0]
	if len(st.Requests) != 3 {
		t.Fatalf("%d requests", len(st.Requests))
	}
	for i, q := range st.Requests {
		tr := q.Trace
		if q.Result.Failed() || !tr.BodyWritten || tr.StartLagMS == nil || tr.DispatchLagMS < *tr.StartLagMS {
			t.Errorf("request %d: %s; lag %v, start lag %v, body written %v", i, q.Result.Error, tr.DispatchLagMS, tr.StartLagMS, tr.BodyWritten)
		}
		// The fake engine counts the ids it was sent.
		if q.Result.PromptTokens == nil || *q.Result.PromptTokens != tr.InputLength {
			t.Errorf("request %d: the server counted %v prompt tokens, want %d", i, q.Result.PromptTokens, tr.InputLength)
		}
	}
}

// TestTraceBodiesAreTheEncodedPrompts: a trace step's bodies, streamed from the block cache,
// are byte for byte the bodies the same requests encode to with their prompts built whole
// (token ids and text), each prompt one the record's identities name, on many generated
// lines (prompts/stream_test.go covers blocks evicted before they are written).
func TestTraceBodiesAreTheEncodedPrompts(t *testing.T) {
	rng := rand.New(rand.NewPCG(5, 6))
	var lines []string
	for i := range 80 {
		n := 1 + rng.IntN(60)
		ids := make([]int, rng.IntN((n+3)/4+1))
		for j := range ids {
			ids[j] = rng.IntN(40)
		}
		lines = append(lines, traceLine(1000+i, n, 1+rng.IntN(4), ids...))
	}
	for _, form := range []string{scenarios.PromptFormTokenIDs, scenarios.PromptFormText} {
		m := newFakeMetrics()
		f := &fakeCompletions{m: m}
		out := run(t, context.Background(), traceConfig(t, lines, "concurrency = 4\nprompt_form = \""+form+"\"", f, m))
		if out.Record.Status != record.StatusCompleted || len(f.bodies) != len(lines) {
			t.Fatalf("%s: status %s, %d bodies", form, out.Record.Status, len(f.bodies))
		}
		identities := map[string]bool{}
		for _, q := range out.Steps[0].Requests {
			identities[q.Prompt.Identity] = true
		}
		for i, req := range f.requests() {
			whole := req
			whole.Body = nil
			var prompt []byte
			if form == scenarios.PromptFormText {
				prompt = []byte(req.PromptText)
			} else {
				for _, id := range req.PromptTokenIDs {
					prompt = binary.LittleEndian.AppendUint32(prompt, uint32(id))
				}
			}
			want, err := client.EncodeCompletion(whole)
			if err != nil || string(f.bodies[i]) != string(want.Bytes()) {
				t.Fatalf("%s: request %d sent\n%s\nwant\n%s (%v)", form, i, f.bodies[i], want.Bytes(), err)
			}
			if sum := sha256.Sum256(prompt); !identities[hex.EncodeToString(sum[:])] {
				t.Errorf("%s: request %d: its prompt is no request's identity", form, i)
			}
		}
	}
}

// TestTraceStepClosedLoop: with concurrency set, requests go in trace order with at most
// that many in flight, whatever their timestamps.
func TestTraceStepClosedLoop(t *testing.T) {
	m := newFakeMetrics()
	f := &fakeCompletions{m: m, hold: 5 * time.Millisecond}
	var lines []string
	for i := range 12 {
		lines = append(lines, traceLine(i*60_000, 8, 2, i, i+100)) // a minute apart
	}
	cfg := traceConfig(t, lines, "concurrency = 3", f, m)
	out := run(t, context.Background(), cfg)
	st := out.Steps[0]
	if len(st.Requests) != 12 || st.Trace.Mode != record.TraceClosedLoop || st.Trace.Concurrency != 3 || st.Trace.TimeScale != nil {
		t.Fatalf("%d requests, trace %+v", len(st.Requests), st.Trace)
	}
	if p := f.peak.Load(); p > 3 || st.Trace.PeakInFlight > 3 || st.Trace.PeakInFlight < 1 {
		t.Errorf("in flight at once: server saw %d, client %d; at most 3", p, st.Trace.PeakInFlight)
	}
	if st.Concurrency != 3 {
		t.Errorf("step concurrency %d", st.Concurrency)
	}
}

// TestTraceStepInterrupted: a run stopped mid-trace keeps what it measured, marked
// interrupted, and sends nothing after.
func TestTraceStepInterrupted(t *testing.T) {
	m := newFakeMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	f := &fakeCompletions{m: m, hold: 20 * time.Millisecond, cancelAt: 4, cancel: cancel}
	var lines []string
	for i := range 50 {
		lines = append(lines, traceLine(i, 8, 2, i))
	}
	cfg := traceConfig(t, lines, "concurrency = 2", f, m)
	out := run(t, ctx, cfg)
	st := out.Steps[0]
	if !out.Interrupted || !st.Interrupted || len(st.Requests) == 0 || len(st.Requests) > 6 || len(f.requests()) > 6 {
		t.Fatalf("interrupted %v/%v, %d recorded, %d sent", out.Interrupted, st.Interrupted, len(st.Requests), len(f.requests()))
	}
	sec := out.Record.Trace("load")
	if sec.PlannedRequests != 50 || sec.Requests != len(st.Requests) || !sec.Interrupted {
		t.Errorf("section %+v", sec)
	}
	// The ideal covers the requests that completed (8 prompt tokens each), not the window.
	completed := 0
	for _, q := range st.Requests {
		if !q.Result.Failed() {
			completed++
		}
	}
	if i := sec.Ideal; completed > 0 && (i == nil || i.PromptTokens != int64(8*completed)) {
		t.Errorf("ideal %+v (%s), want it over the %d completed requests' %d prompt tokens", i, sec.IdealUnavailable, completed, 8*completed)
	}
	// The requests in flight when the run stopped were cancelled by it, not failed by the
	// server: not measured, so neither recorded nor counted failed (a sweep level reads this).
	for _, q := range st.Requests {
		if q.Result.Failed() {
			t.Errorf("request %d recorded as failed (%s): the run's stop cancelled it", q.IndexInStep, q.Result.ErrorKind)
		}
	}
	if sec.FailedRequests != 0 {
		t.Errorf("%d failed requests counted", sec.FailedRequests)
	}
}

// hookCompletions runs hook as the at-th request arrives, and fails the requests fail
// picks; the rest go to the fake.
type hookCompletions struct {
	*fakeCompletions
	at   int64
	hook func()
	fail func(client.CompletionRequest) bool
	n    atomic.Int64
}

func (h *hookCompletions) StreamCompletion(ctx context.Context, req client.CompletionRequest, p func(client.Progress)) client.Result {
	if h.n.Add(1) == h.at {
		h.hook()
	}
	if h.fail != nil && h.fail(withPrompt(req)) {
		return client.Result{StartedAt: time.Now().UTC(), Model: req.Model, ErrorKind: client.ErrorKindServerError, Error: "fake failure"}
	}
	return h.fakeCompletions.StreamCompletion(ctx, req, p)
}

// TestTraceIdealLeavesOutFailed: a failed request is not in the ideal; had it been, the
// request after it, which shares its first block, would be an ideal hit.
func TestTraceIdealLeavesOutFailed(t *testing.T) {
	m := newFakeMetrics()
	h := &hookCompletions{fakeCompletions: &fakeCompletions{m: m},
		fail: func(r client.CompletionRequest) bool { return len(r.PromptTokenIDs) == 9 }}
	lines := []string{
		traceLine(0, 9, 1, 1, 2, 3), // fails
		traceLine(1, 8, 1, 1, 2),
		traceLine(2, 6, 1, 5),
	}
	cfg := traceConfig(t, lines, "concurrency = 1", h, m)
	out := run(t, context.Background(), cfg)
	sec := out.Record.Trace("load")
	if sec == nil {
		t.Fatal("no trace section")
	}
	if i := sec.Ideal; i == nil || i.PromptTokens != 14 || i.GPUHitTokens != 0 {
		t.Errorf("ideal %+v (%s), want 14 prompt tokens and no hit (the failed request left out)", i, sec.IdealUnavailable)
	}
}

// TestTraceChangedDuringReplay: lines appended to the trace while it replays are not sent,
// and the step fails saying the trace changed; a trace rewritten in place gives no ideal
// from its new content.
func TestTraceChangedDuringReplay(t *testing.T) {
	var lines []string
	for i := range 6 {
		lines = append(lines, traceLine(i, 8, 1, i))
	}
	t.Run("appended", func(t *testing.T) {
		// More lines than the reader's buffer holds, so that it reads on after the append.
		var long []string
		for i := range 4000 {
			long = append(long, traceLine(i, 8, 1, i))
		}
		m := newFakeMetrics()
		h := &hookCompletions{fakeCompletions: &fakeCompletions{m: m}, at: 1}
		cfg := traceConfig(t, long, "concurrency = 1", h, m)
		path := cfg.Scenario.Steps[0].Source.Name()
		h.hook = func() {
			f, err := os.OpenFile(path, os.O_APPEND|os.O_WRONLY, 0)
			if err != nil {
				t.Error(err)
				return
			}
			defer f.Close()
			for i := range 20 {
				fmt.Fprintln(f, traceLine(10_000+i, 8, 1, 10_000+i))
			}
		}
		out := run(t, context.Background(), cfg)
		if n := len(h.requests()); n != len(long) {
			t.Errorf("%d requests sent, %d planned", n, len(long))
		}
		if out.Record.Status != record.StatusFailed || !strings.Contains(out.Record.StopReason, "changed since it was planned") {
			t.Errorf("status %s: %q", out.Record.Status, out.Record.StopReason)
		}
	})
	t.Run("rewritten", func(t *testing.T) {
		m := newFakeMetrics()
		h := &hookCompletions{fakeCompletions: &fakeCompletions{m: m}, at: 1}
		cfg := traceConfig(t, lines, "concurrency = 1", h, m)
		path := cfg.Scenario.Steps[0].Source.Name()
		h.hook = func() {
			same := make([]string, len(lines)) // as many bytes, every request sharing block 7
			for i := range same {
				same[i] = traceLine(i, 8, 1, 7)
			}
			if err := os.WriteFile(path, []byte(strings.Join(same, "\n")+"\n"), 0o600); err != nil {
				t.Error(err)
			}
		}
		out := run(t, context.Background(), cfg)
		sec := out.Record.Trace("load")
		if sec == nil {
			t.Fatal("no trace section")
		}
		if sec.Ideal != nil || !strings.Contains(sec.IdealUnavailable, "changed since it was planned") {
			t.Errorf("ideal %+v (%q): the trace changed, its new content is no ideal of the replay", sec.Ideal, sec.IdealUnavailable)
		}
	})
}

// journalFull refuses every request after the first few, as a run directory whose disk
// filled up does.
type journalFull struct {
	mu       sync.Mutex
	accepted int
	limit    int
}

func (j *journalFull) Handle(e events.Event) error {
	if _, ok := e.(events.RequestDone); !ok {
		return nil
	}
	j.mu.Lock()
	defer j.mu.Unlock()
	if j.accepted == j.limit {
		return fmt.Errorf("journal: no space left on device")
	}
	j.accepted++
	return nil
}

// TestTraceStepKeepsWhatWasJournaled: a request the run directory could not journal is not
// in the step either, so the console's count is the record's.
func TestTraceStepKeepsWhatWasJournaled(t *testing.T) {
	m := newFakeMetrics()
	f := &fakeCompletions{m: m, hold: 2 * time.Millisecond}
	var lines []string
	for i := range 20 {
		lines = append(lines, traceLine(i, 8, 2, i))
	}
	cfg := traceConfig(t, lines, "concurrency = 4", f, m)
	j := &journalFull{limit: 3}
	var con bytes.Buffer
	cfg.Sinks = append(cfg.Sinks, j, NewConsole(&con, false))
	out := run(t, context.Background(), cfg)
	st := out.Steps[0]
	if out.Record.Status != record.StatusFailed || len(st.Requests) != j.accepted {
		t.Fatalf("status %s, %d requests in the step, %d journaled", out.Record.Status, len(st.Requests), j.accepted)
	}
	if want := fmt.Sprintf("interrupted: %d requests measured", j.accepted); !strings.Contains(con.String(), want) {
		t.Errorf("console lacks %q:\n%s", want, con.String())
	}
}

// progressSink keeps every trace progress report.
type progressSink struct {
	mu  sync.Mutex
	got []events.TraceProgress
}

func (s *progressSink) Handle(e events.Event) error {
	if p, ok := e.(events.TraceProgress); ok {
		s.mu.Lock()
		s.got = append(s.got, p)
		s.mu.Unlock()
	}
	return nil
}

// TestTraceFinalProgressIsTheRecordsTiers: the last progress report carries the step's tier
// shares as recorded, though no scrape came after the last request (the scraper's interval
// is longer than the step).
func TestTraceFinalProgressIsTheRecordsTiers(t *testing.T) {
	m := newFakeMetrics()
	f := &fakeCompletions{m: m}
	lines := []string{traceLine(0, 10, 2, 1, 2, 3), traceLine(1, 10, 2, 1, 2, 4), traceLine(2, 8, 2, 5, 6)}
	cfg := traceConfig(t, lines, "concurrency = 1", f, m)
	cfg.Scenario.Steps[0].ScrapeInterval.Duration = time.Hour
	var sink progressSink
	cfg.Sinks = append(cfg.Sinks, &sink)
	out := run(t, context.Background(), cfg)
	sec := out.Record.Trace("load")
	if sec == nil || sec.Tiers.GPU == nil {
		t.Fatalf("section %+v", sec)
	}
	if len(sink.got) == 0 || !sink.got[len(sink.got)-1].Final {
		t.Fatalf("no final progress report: %+v", sink.got)
	}
	last := sink.got[len(sink.got)-1]
	if last.Tiers.GPU == nil || *last.Tiers.GPU != *sec.Tiers.GPU || last.Done != sec.Requests {
		t.Errorf("final report: %d done, GPU %v; recorded %d, GPU %v", last.Done, last.Tiers.GPU, sec.Requests, *sec.Tiers.GPU)
	}
}

// TestBlockSizeNote: what a server block size that is not block_tokens breaks is said.
func TestBlockSizeNote(t *testing.T) {
	for _, c := range []struct {
		b, bt int
		want  string
	}{
		{512, 512, ""},
		{16, 512, "divides block_tokens (512): shared prefixes line up"},
		{48, 512, "does not divide block_tokens (512)"},
		{1024, 512, "larger than block_tokens (512)"},
		{0, 512, "unknown"},
	} {
		if got := blockSizeNote(c.b, c.bt); c.want == "" && got != "" || !strings.Contains(got, c.want) {
			t.Errorf("%d in %d: %q, want %q", c.b, c.bt, got, c.want)
		}
	}
}

package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"math"
	"os"
	"path/filepath"
	"strconv"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/scenarios"
)

// fakeMetrics is a server's /metrics as the runner sees it: counters and gauges that the fake
// chat moves while a request is in flight. A counter or gauge not in its map is absent.
type fakeMetrics struct {
	mu       sync.Mutex
	counters map[metrics.Counter]float64
	gauges   map[metrics.Gauge]float64
	// busy is how many more scrapes report busyGauge at 1 before the server is idle.
	busy      int
	busyGauge metrics.Gauge
	// fail, when set, fails every scrape.
	fail error

	busyScrapes int
	lastIdle    bool // the last successful scrape reported no running or waiting request
	// scraped, when set, receives (without blocking) after each successful scrape.
	scraped chan struct{}
}

func newFakeMetrics() *fakeMetrics {
	return &fakeMetrics{
		counters: map[metrics.Counter]float64{
			metrics.GPUPrefixQueries:   0,
			metrics.GPUPrefixHits:      0,
			metrics.ExternalPrefixHits: 0,
			metrics.StoreBytes:         0,
			metrics.LoadBytes:          0,
			metrics.PromptTokens:       0,
		},
		gauges: map[metrics.Gauge]float64{
			metrics.KVUsage:         0,
			metrics.RequestsRunning: 0,
			metrics.RequestsWaiting: 0,
		},
		busyGauge: metrics.RequestsRunning,
	}
}

// Snapshot reads every normalized counter and gauge, absent ones as Present false, like
// metrics.Profile.Snapshot does.
func (m *fakeMetrics) Snapshot(ctx context.Context) (metrics.Snapshot, error) {
	m.mu.Lock()
	defer m.mu.Unlock()
	if err := ctx.Err(); err != nil {
		return metrics.Snapshot{}, err // a real scrape fails once its context is done
	}
	if m.fail != nil {
		return metrics.Snapshot{}, m.fail
	}
	snap := metrics.Snapshot{
		TakenAt:  time.Now(),
		Backend:  "fake",
		Sources:  []string{"fake"},
		Counters: map[metrics.Counter]metrics.Reading{},
		Gauges:   map[metrics.Gauge]metrics.Reading{},
	}
	for _, c := range metrics.Counters() {
		r := metrics.Reading{}
		if v, ok := m.counters[c]; ok {
			r = metrics.Reading{Value: v, Present: true, Source: "fake:" + string(c)}
			if math.IsNaN(v) || math.IsInf(v, 0) { // as metrics reads a non-finite sample
				r = metrics.Reading{Source: "fake:" + string(c), Unreadable: strconv.FormatFloat(v, 'f', -1, 64)}
			}
		}
		snap.Counters[c] = r
	}
	for _, g := range metrics.Gauges() {
		r := metrics.Reading{}
		if v, ok := m.gauges[g]; ok {
			r = metrics.Reading{Value: v, Present: true, Source: "fake:" + string(g)}
		}
		snap.Gauges[g] = r
	}
	if m.busy > 0 {
		m.busy--
		m.busyScrapes++
		snap.Gauges[m.busyGauge] = metrics.Reading{Value: 1, Present: true, Source: "fake:" + string(m.busyGauge)}
	}
	m.lastIdle = snap.Gauges[metrics.RequestsRunning].Value == 0 && snap.Gauges[metrics.RequestsWaiting].Value == 0
	if m.scraped != nil {
		select {
		case m.scraped <- struct{}{}:
		default:
		}
	}
	return snap, nil
}

// add moves counter c by d; c becomes present when it was absent.
func (m *fakeMetrics) add(c metrics.Counter, d float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters[c] += d
}

func (m *fakeMetrics) set(c metrics.Counter, v float64) {
	m.mu.Lock()
	defer m.mu.Unlock()
	m.counters[c] = v
}

func (m *fakeMetrics) update(f func(m *fakeMetrics)) {
	m.mu.Lock()
	defer m.mu.Unlock()
	f(m)
}

// fakeCall is one request the fake chat received, with what the server looked like then.
type fakeCall struct {
	Req client.ChatRequest
	// Idle: the last scrape before the request reported an idle server.
	Idle bool
}

// fakeChat answers each request with reply(call number, request): the scripted result, after
// whatever the script does to the fake server while the request is in flight.
type fakeChat struct {
	m     *fakeMetrics
	reply func(n int, req client.ChatRequest, progress func(client.Progress)) client.Result

	mu    sync.Mutex
	calls []fakeCall
}

func (c *fakeChat) StreamChat(ctx context.Context, req client.ChatRequest, progress func(client.Progress)) client.Result {
	c.m.mu.Lock()
	idle := c.m.lastIdle
	c.m.mu.Unlock()
	c.mu.Lock()
	n := len(c.calls)
	c.calls = append(c.calls, fakeCall{Req: req, Idle: idle})
	c.mu.Unlock()
	progress(client.Progress{Phase: client.PhasePrefill})
	res := okResult(300, nil)
	if c.reply != nil {
		res = c.reply(n, req, progress)
	}
	progress(client.Progress{Phase: client.PhaseDone, Tokens: res.OutputTokens})
	return res
}

func (c *fakeChat) Calls() []fakeCall {
	c.mu.Lock()
	defer c.mu.Unlock()
	return append([]fakeCall(nil), c.calls...)
}

// okResult is a successful streamed answer to a prompt of promptTokens tokens.
func okResult(promptTokens int, cached *int) client.Result {
	ttft, e2e, decode := 40.0, 90.0, 200.0
	return client.Result{
		StartedAt:             time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC),
		Model:                 "fake-model",
		TimeToFirstOutputMS:   &ttft,
		EndToEndMS:            &e2e,
		StreamMS:              e2e,
		OutputTokens:          10,
		OutputTokensSource:    "usage",
		PromptTokens:          &promptTokens,
		CachedPromptTokens:    cached,
		UsagePresent:          true,
		ContentChunks:         10,
		VisibleAnswer:         true,
		FinishReason:          "length",
		DecodeTokensPerSecond: &decode,
		Answer:                "ok",
	}
}

func intp(v int) *int { return &v }

// unitScenario is three isolated 300-token requests sharing a 64-token prefix, then a
// replay of the first, without its cold twin (twin_test.go runs replays with theirs); extra
// TOML (gates, more steps) is appended.
const unitScenario = `
name = "unit"

[target]
endpoint = "http://127.0.0.1:1/v1"
model = "fake-model"

[server]
gpu_kv_tokens = 1000
block_size = 16

[prompt]
seed = 7
shared_prefix_tokens = 64
token_counting = "estimate"

[request]
max_tokens = 10

[[step]]
id = "sequence"
requests = 3
planned_context_tokens = [300]

[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
cold_twin = false
`

// newConfig parses src and plans it; the run writes under a fresh temporary directory.
func newConfig(t *testing.T, src string, chat ChatStreamer, m MetricsSource) Config {
	t.Helper()
	sc, err := scenarios.Parse([]byte(src), "unit.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(context.Background(), sc, plan.Facts{})
	if err != nil {
		t.Fatal(err)
	}
	return Config{
		Scenario:  p.Scenario,
		Plan:      p,
		Chat:      chat,
		Metrics:   m,
		Sinks:     runDir(t),
		BlockSize: 16,
		NoProbes:  true,
		Now:       func() time.Time { return time.Date(2025, 1, 2, 3, 4, 5, 0, time.UTC) },
	}
}

// runDir is a test run's sinks: its run directory, under a fresh temporary parent.
func runDir(t testing.TB) []events.Sink { return []events.Sink{NewRunDirSink(t.TempDir())} }

// run runs cfg and fails the test when nothing could be recorded.
func run(t *testing.T, ctx context.Context, cfg Config) *Outcome {
	t.Helper()
	out, err := Run(ctx, cfg)
	if err != nil {
		t.Fatal(err)
	}
	return out
}

// readArtifact decodes a step file of the run directory.
func readArtifact(t *testing.T, dir, name string) record.StepArtifact {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, name))
	if err != nil {
		t.Fatal(err)
	}
	var a record.StepArtifact
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatalf("%s: %v", name, err)
	}
	return a
}

// runFile reads one top-level key of run.json: the on-disk contract, whatever the record's
// representation in memory.
func runFile(t *testing.T, dir, key string) any {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(dir, "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var m map[string]any
	if err := json.Unmarshal(data, &m); err != nil {
		t.Fatal(err)
	}
	return m[key]
}

// stepFiles lists the step artifacts written to dir.
func stepFiles(t *testing.T, dir string) []string {
	t.Helper()
	var names []string
	for _, pattern := range []string{"step-*.json", "repeat-*.json"} {
		m, err := filepath.Glob(filepath.Join(dir, pattern))
		if err != nil {
			t.Fatal(err)
		}
		for _, p := range m {
			names = append(names, filepath.Base(p))
		}
	}
	return names
}

// deltaOf is counter c's delta and whether it is usable (present, not decreased).
func deltaOf(c *record.Counters, k metrics.Counter) (float64, bool) {
	return c.Value(k)
}

// errMetrics500 is what a scrape of a /metrics that answers 500 returns.
var errMetrics500 = fmt.Errorf("scrape http://127.0.0.1:1/metrics: %w: 500 Internal Server Error", metrics.ErrScrapeStatus)

package derive

import (
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

func TestStepCounters(t *testing.T) {
	before := snap(map[metrics.Counter]float64{metrics.StoreBytes: 100})
	after := snap(map[metrics.Counter]float64{metrics.StoreBytes: 4196})
	down := errors.New("connection refused")
	tests := []struct {
		name          string
		errB, errA    error
		reset         string
		why           string
		valid         bool
		storeBytes    float64
		invalidReason string
	}{
		{"both read", nil, nil, "", "", true, 4096, ""},
		{"before failed", down, nil, "", "before the step: connection refused", false, 0, ""},
		{"both failed", down, down, "", "before the step: connection refused; after the step: connection refused", false, 0, ""},
		{"reset between", nil, nil, "store_bytes went down at 3 s", "", false, 0, "store_bytes went down at 3 s"},
	}
	for _, tt := range tests {
		c, why := StepCounters(before, after, tt.errB, tt.errA, tt.reset)
		if why != tt.why {
			t.Errorf("%s: why %q, want %q", tt.name, why, tt.why)
			continue
		}
		if tt.why != "" {
			if c != nil {
				t.Errorf("%s: counters without both scrapes", tt.name)
			}
			continue
		}
		if c.Valid != tt.valid {
			t.Errorf("%s: valid %v", tt.name, c.Valid)
		}
		if tt.valid && *c.Delta(metrics.StoreBytes) != tt.storeBytes {
			t.Errorf("%s: store %v", tt.name, c.Delta(metrics.StoreBytes))
		}
		if !tt.valid && (c.Delta(metrics.StoreBytes) != nil || c.InvalidReasons[0] != tt.invalidReason || c.InvalidKinds[0] != metrics.InvalidReset) {
			t.Errorf("%s: %+v", tt.name, c)
		}
	}
}

func TestTraceSection(t *testing.T) {
	scale := 2.0
	ms := func(v float64) *float64 { return &v }
	start := time.Date(2026, 12, 1, 6, 0, 0, 0, time.UTC)
	art := record.StepArtifact{Schema: record.StepSchema, Step: "trace", Kind: record.KindTrace, DeltaScope: record.ScopeStep, StartedAt: start,
		Trace: &record.TraceReplay{File: "t.jsonl", Mode: "open_loop", TimeScale: &scale, PlannedRequests: 4, SpanSeconds: 10, PeakInFlight: 2,
			Ideal: &record.IdealTiers{HostTokens: 1000, GPUTokens: 500, IdealShares: record.IdealShares{HostShare: 0.27, GPUShare: 0.1}, MaxHitRate: 0.6}},
		Counters: NewCounters(snap(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.StoreBytes: 0}),
			snap(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 1000, metrics.GPUPrefixHits: 100, metrics.ExternalPrefixHits: 210, metrics.StoreBytes: 8192})),
		Requests: []record.Request{
			{Trace: &record.TraceRequest{DispatchLagMS: 2}, Result: record.Result{PromptTokens: i(600), CachedPromptTokens: i(200), TimeToFirstOutputMS: ms(40), DecodeTokensPerSecond: ms(30),
				CachedTokensDetails: &record.TierTokens{Device: 50, Host: 150, StorageBackend: "none"}}},
			{Trace: &record.TraceRequest{DispatchLagMS: 4}, Result: record.Result{PromptTokens: i(400), CachedPromptTokens: i(110), TimeToFirstOutputMS: ms(60),
				CachedTokensDetails: &record.TierTokens{Device: 50, Host: 60}}},
			{Trace: &record.TraceRequest{DispatchLagMS: 9}, Result: record.Result{ErrorKind: "http"}},
		},
	}
	s := TraceOf(Assemble(art), "step-01-trace.json")
	if s.Requests != 3 || s.FailedRequests != 1 || *s.PromptTokens != 1000 || *s.CachedPromptTokens != 310 || s.RequestTiers.Host != 210 || s.RequestTiers.Device != 100 {
		t.Fatalf("sums %+v", s)
	}
	if *s.OfferedRequestsPerSecond != 0.2 || *s.TTFTMS.P50 != 40 || *s.DispatchLagMS.Max != 9 || s.DecodeTokensPerSecond.N != 1 {
		t.Fatalf("rates %+v", s)
	}
	if !s.CountersValid || *s.StoreBytesDelta != 8192 || *s.Tiers.Host != 0.21 || *s.Tiers.GPU != 0.1 {
		t.Fatalf("counters %+v %+v", s.StepLoad, s.Tiers)
	}
	want := "the host tier served 21.0% of prompt tokens (the GPU prefix cache 10.0%); an LRU host tier of its size (1000 tokens) would have served 27.0%"
	if !strings.HasPrefix(s.Finding, want) {
		t.Fatalf("finding %q", s.Finding)
	}
	one := 1.0
	findings := []struct {
		tiers record.TierShares
		valid bool
		ideal *record.IdealTiers
		why   string
		want  string
	}{
		{record.TierShares{}, false, nil, "", "the step's counters are not valid, so what each tier served was not measured; the ideal at the server's pool sizes is unknown: no ideal was computed"},
		{record.TierShares{}, true, nil, "the trace has no block ids", "the server exposes no counter that splits prompt tokens by tier; the ideal at the server's pool sizes is unknown: the trace has no block ids"},
		{record.TierShares{GPU: &one}, true, nil, "x", "the GPU prefix cache served 100.0% of prompt tokens; the server exposes no host-tier hit counter; "},
		{record.TierShares{GPU: &one}, true, nil, record.NoPrefixInformation + " (the burstgpt trace names no blocks: lengths and arrivals only)",
			"the GPU prefix cache served 100.0% of prompt tokens; the server exposes no host-tier hit counter; no prefix information: the ideal is unknown (the burstgpt trace names no blocks: lengths and arrivals only)"},
	}
	for _, f := range findings {
		if got := TraceFinding(f.tiers, f.valid, f.ideal, f.why); !strings.HasPrefix(got, f.want) {
			t.Errorf("finding %q, want %q", got, f.want)
		}
	}
}

func TestLoadGates(t *testing.T) {
	p90, store := 800.0, 0.0
	zero := 0
	sections := []record.Section{
		{Step: "chat", Conversation: &record.ConversationSection{TTFTMS: record.Percentiles{P90: &p90}, FailedRequests: 1, StepLoad: record.StepLoad{StoreBytesDelta: &store}}},
		{Step: "trace", Trace: &record.TraceSection{TTFTMS: record.Percentiles{P90: &p90}}},
	}
	tests := []struct {
		gate   scenarios.Gate
		passed bool
		reason string
	}{
		{scenarios.Gate{Step: "chat", MaxTimeToFirstOutputMS: 1000}, true, "TTFT p90 800.0 ms <= 1000"},
		{scenarios.Gate{Step: "trace", MaxTimeToFirstOutputMS: 500}, false, "TTFT p90 800.0 ms, want <= 500"},
		{scenarios.Gate{Step: "chat", MaxFailedRequests: &zero}, false, "1 failed requests, want <= 0"},
		{scenarios.Gate{Step: "chat", RequireStore: true}, false, "no GPU->CPU store bytes during the step"},
		{scenarios.Gate{Step: "trace", Verdict: "cpu_reload"}, false, "verdict, cached fraction, decode rate and setup validity do not apply to trace steps"},
	}
	for _, tt := range tests {
		got := EvaluateGates([]scenarios.Gate{tt.gate}, sections)
		if got[0].Passed != tt.passed || got[0].Reason != tt.reason {
			t.Errorf("%+v: %+v, want %v %q", tt.gate, got[0], tt.passed, tt.reason)
		}
	}
	yes, no := true, false
	n := 12
	outputs := []struct {
		f          *record.ReloadFidelity
		pass, fail string
	}{
		{nil, "", "the replay's output was not compared with its original's"},
		{&record.ReloadFidelity{Reason: "temperature 0.7"}, "", "the replay's output was not compared with its original's: temperature 0.7"},
		{&record.ReloadFidelity{Compared: true, Identical: &no, Finding: "from token 3"}, "", "output not identical: from token 3"},
		{&record.ReloadFidelity{Compared: true, Identical: &yes, ComparedTokens: &n}, "output identical to the original's (12 tokens compared)", ""},
	}
	for _, o := range outputs {
		if pass, fail := identicalOutput(o.f); pass != o.pass || fail != o.fail {
			t.Errorf("%+v: %q %q", o.f, pass, fail)
		}
	}
}

func TestWriteSummaryAndSweep(t *testing.T) {
	r := loadDemoRun(t, "../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z")
	var b strings.Builder
	if err := r.WriteSummary(&b); err != nil {
		t.Fatal(err)
	}
	out := b.String()
	for _, want := range []string{"STEP", "eviction_sequence", "replay", "cpu_reload", "gate"} {
		if !strings.Contains(out, want) {
			t.Errorf("summary lacks %q:\n%s", want, out)
		}
	}
	p50, p90, p99 := 120.0, 200.0, 300.0
	w := true
	sw := &record.Sweep{Scenario: "chat", Step: "chat", Status: record.StatusCompleted, Levels: []record.SweepLevel{
		{Users: 4, Requests: 40, FailedRequests: 2, TTFTMS: record.Percentiles{P50: &p50, P90: &p90, P99: &p99}, WithinThreshold: &w},
	}}
	b.Reset()
	if err := WriteSweep(&b, sw); err != nil {
		t.Fatal(err)
	}
	if out := b.String(); !strings.HasPrefix(out, "sweep chat step chat (completed)\n") || !strings.Contains(out, " users  requests") ||
		!strings.Contains(out, "     4     38/40      120.0      200.0      300.0") || !strings.HasSuffix(out, "  true\ncapacity: \n") {
		t.Errorf("sweep table:\n%s", out)
	}
	if got := Of(r.Run, r.Scenario); got.Run != r.Run || got.Scenario != r.Scenario || got.Repetitions != nil {
		t.Errorf("Of %+v", got)
	}
}

package derive

import (
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

// TestSplitTiers: the by-source counters where the server has them, else queries and hits.
func TestSplitTiers(t *testing.T) {
	bySource := span(map[metrics.Counter]float64{metrics.PromptTokensLocalCacheHit: 0, metrics.PromptTokensExternal: 0, metrics.PromptTokensLocalCompute: 0, metrics.GPUPrefixQueries: 0},
		map[metrics.Counter]float64{metrics.PromptTokensLocalCacheHit: 600, metrics.PromptTokensExternal: 300, metrics.PromptTokensLocalCompute: 100, metrics.GPUPrefixQueries: 5000})
	s := SplitTiers(bySource).Shares()
	if s.Source != record.TierBySource || *s.PromptTokens != 1000 || *s.GPU != 0.6 || *s.Host != 0.3 || *s.Recompute != 0.1 {
		t.Fatalf("by source %+v", s)
	}
	byHits := span(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0},
		map[metrics.Counter]float64{metrics.GPUPrefixQueries: 1000, metrics.GPUPrefixHits: 500, metrics.ExternalPrefixHits: 250})
	s = SplitTiers(byHits).Shares()
	if s.Source != record.TierByHits || *s.RecomputeTokens != 250 || *s.Host != 0.25 {
		t.Fatalf("by hits %+v", s)
	}
	// Without an external hit counter the host share is absent, and recompute is all not hit on GPU.
	noExt := span(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0}, map[metrics.Counter]float64{metrics.GPUPrefixQueries: 1000, metrics.GPUPrefixHits: 500})
	s = SplitTiers(noExt).Shares()
	if s.Host != nil || s.HostHitTokens != nil || *s.RecomputeTokens != 500 {
		t.Fatalf("no external %+v", s)
	}
	if s := SplitTiers(span(nil, nil)).Shares(); s.Source != "" || s.GPU != nil {
		t.Fatalf("nothing %+v", s)
	}
	var p record.SeriesPoint
	SplitTiers(byHits).Point(&p)
	if *p.PromptTokens != 1000 || *p.GPUHitTokens != 500 || *p.HostHitTokens != 250 || *p.RecomputeTokens != 250 {
		t.Fatalf("point %+v", p)
	}
}

func TestPercentilesOf(t *testing.T) {
	p := PercentilesOf([]float64{5, 1, 4, 2, 3, 6, 7, 8, 9, 10})
	if p.N != 10 || *p.P50 != 5 || *p.P90 != 9 || *p.P99 != 10 || *p.Max != 10 {
		t.Fatalf("%+v", p)
	}
	if e := PercentilesOf(nil); e.N != 0 || e.P50 != nil {
		t.Fatalf("empty %+v", e)
	}
}

// TestConversationOf: the section of a conversation step: turns, failures, TTFT
// percentiles and series, tiers from its span.
func TestConversationOf(t *testing.T) {
	start := time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC)
	turn := func(user, n int, ttft float64, at time.Duration) record.Request {
		return record.Request{Step: "chat", IndexInStep: user*2 + n, Turn: &record.Turn{User: user, Turn: n}, Result: record.Result{StartedAt: start.Add(at), TimeToFirstOutputMS: &ttft, CachedPromptTokens: i(10)}}
	}
	c := span(map[metrics.Counter]float64{metrics.GPUPrefixQueries: 0, metrics.GPUPrefixHits: 0, metrics.StoreBytes: 0, metrics.Preemptions: 0},
		map[metrics.Counter]float64{metrics.GPUPrefixQueries: 400, metrics.GPUPrefixHits: 100, metrics.StoreBytes: 9000, metrics.Preemptions: 1})
	failed := record.Request{Step: "chat", IndexInStep: 3, Result: record.Result{ErrorKind: "stream_cut", Error: "cut"}}
	a := record.StepArtifact{Step: "chat", Kind: record.KindConversation, DeltaScope: record.ScopeStep, StartedAt: start, Counters: c, Samples: &record.Samples{PeakRunning: f(2)},
		Requests:     []record.Request{turn(0, 0, 50, 0), turn(0, 1, 70, time.Second), turn(1, 0, 60, 100*time.Millisecond), failed},
		Conversation: &record.ConversationTrace{Users: 2, Turns: 2, ScrapeIntervalMS: 500, Series: []record.SeriesPoint{{AtMS: 500, Waiting: f(3)}, {AtMS: 1000, Waiting: f(1)}}}}
	s := ConversationOf(Assemble(a), "step-01-chat.json")
	if s.Users != 2 || s.Requests != 4 || s.FailedRequests != 1 || *s.TTFTMS.P50 != 60 || *s.CachedPromptTokens != 30 || *s.PeakWaiting != 3 ||
		*s.StoreBytesDelta != 9000 || *s.Preemptions != 1 || *s.Tiers.GPU != 0.25 || *s.PeakActiveSequences != 2 || !s.CountersValid {
		t.Fatalf("%+v", s)
	}
	if len(s.TTFTSeries) != 3 || s.TTFTSeries[0].TTFTMS != 50 || s.TTFTSeries[1].User != 1 || s.TTFTSeries[2].AtMS != 1070 {
		t.Fatalf("ttft series %+v", s.TTFTSeries)
	}
	a.Counters, a.CountersError = nil, "after the step: timeout"
	if s := ConversationOf(Assemble(a), ""); s.CountersValid || s.StoreBytesDelta != nil {
		t.Fatalf("unread %+v", s)
	}
}

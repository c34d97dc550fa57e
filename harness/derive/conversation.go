package derive

import (
	"slices"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/stats"
)

// SplitTiers reads a delta's tier split: the server's by-source prompt counters where it
// has them (they exclude re-admissions after preemption), else prefix-cache queries and hits,
// recompute being queries minus both hits. A counter the server lacks stays nil.
func SplitTiers(d *record.Counters) record.TierSplit {
	ptr := d.Delta
	if local, ext, comp := ptr(metrics.PromptTokensLocalCacheHit), ptr(metrics.PromptTokensExternal), ptr(metrics.PromptTokensLocalCompute); local != nil && comp != nil {
		t := record.TierSplit{Source: record.TierBySource, GPUHitTokens: local, HostHitTokens: ext, RecomputeTokens: comp}
		total := *local + *comp
		if ext != nil {
			total += *ext
		}
		t.PromptTokens = &total
		return t
	}
	t := record.TierSplit{Source: record.TierByHits, PromptTokens: ptr(metrics.GPUPrefixQueries), GPUHitTokens: ptr(metrics.GPUPrefixHits), HostHitTokens: ptr(metrics.ExternalPrefixHits)}
	if t.PromptTokens != nil && t.GPUHitTokens != nil {
		v := *t.PromptTokens - *t.GPUHitTokens
		if t.HostHitTokens != nil {
			v -= *t.HostHitTokens
		}
		t.RecomputeTokens = &v
	}
	if t.PromptTokens == nil && t.GPUHitTokens == nil && t.HostHitTokens == nil {
		t.Source = ""
	}
	return t
}

// PercentilesOf computes nearest-rank percentiles of values.
func PercentilesOf(values []float64) record.Percentiles {
	p := record.Percentiles{N: len(values)}
	if len(values) == 0 {
		return p
	}
	v := slices.Clone(values)
	slices.Sort(v)
	at := func(q float64) *float64 {
		x := stats.NearestRank(v, q)
		return &x
	}
	p.P50, p.P90, p.P99, p.Max = at(0.50), at(0.90), at(0.99), at(1)
	return p
}

// ConversationOf computes a conversation step's section from its artifact.
func ConversationOf(st Step, artifact string) record.ConversationSection {
	s := record.ConversationSection{Artifact: artifact, Requests: len(st.Requests), Interrupted: st.Interrupted, CountersValid: true, Series: []record.SeriesPoint{}, TTFTSeries: []record.TTFTPoint{}}
	if tr := st.Conversation; tr != nil {
		s.Users, s.Turns, s.ScrapeIntervalMS = tr.Users, tr.Turns, tr.ScrapeIntervalMS
		if tr.Series != nil {
			s.Series = tr.Series
		}
		for _, p := range tr.Series {
			if p.Waiting != nil && (s.PeakWaiting == nil || *p.Waiting > *s.PeakWaiting) {
				v := *p.Waiting
				s.PeakWaiting = &v
			}
		}
	}
	var ttfts []float64
	for _, r := range st.Requests {
		res := r.Result
		if res.Failed() {
			s.FailedRequests++
			continue
		}
		if res.CachedPromptTokens != nil {
			v := float64(*res.CachedPromptTokens)
			if s.CachedPromptTokens != nil {
				v += *s.CachedPromptTokens
			}
			s.CachedPromptTokens = &v
		}
		if res.TimeToFirstOutputMS == nil {
			continue
		}
		ttfts = append(ttfts, *res.TimeToFirstOutputMS)
		if r.Turn != nil {
			at := float64(res.StartedAt.Sub(st.StartedAt))/1e6 + *res.TimeToFirstOutputMS
			s.TTFTSeries = append(s.TTFTSeries, record.TTFTPoint{AtMS: at, TTFTMS: *res.TimeToFirstOutputMS, User: r.Turn.User, Turn: r.Turn.Turn})
		}
	}
	slices.SortStableFunc(s.TTFTSeries, func(a, b record.TTFTPoint) int {
		switch {
		case a.AtMS < b.AtMS:
			return -1
		case a.AtMS > b.AtMS:
			return 1
		}
		return 0
	})
	s.TTFTMS = PercentilesOf(ttfts)
	s.Tiers, s.StepLoad, s.CountersValid, s.InvalidReasons = stepLoad(st)
	return s
}

// stepLoad is a step of overlapping requests as a whole, for its conversation or trace
// section: the tiers its span's prompt tokens came from, its load, and whether its counters
// can be trusted.
func stepLoad(st Step) (record.TierShares, record.StepLoad, bool, []string) {
	var tiers record.TierShares
	l := record.StepLoad{PeakBlockOccupancy: st.Sampled.PeakKVUsage, PeakActiveSequences: st.Sampled.PeakRunning}
	if c := st.Span; c != nil {
		tiers = SplitTiers(c).Shares()
		l.Preemptions, l.StoreBytesDelta, l.LoadBytesDelta = c.Delta(metrics.Preemptions), c.Delta(metrics.StoreBytes), c.Delta(metrics.LoadBytes)
	}
	valid, reasons := st.SpanValidity()
	return tiers, l, valid, reasons
}

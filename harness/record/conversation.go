package record

import (
	"slices"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/stats"
)

// ConversationTrace is what a conversation step adds to its artifact: the counters read at a
// fixed interval while the users chatted (per-request deltas mean nothing when requests
// overlap), each point holding what moved since the previous reading.
type ConversationTrace struct {
	Users            int     `json:"users"`
	Turns            int     `json:"turns"`
	ScrapeIntervalMS float64 `json:"scrape_interval_ms"`
	ScrapeErrors     int     `json:"scrape_errors"`
	// Series has one point per successful scrape after the step's first.
	Series []SeriesPoint `json:"series"`
}

// SeriesPoint is one interval of a conversation step. Token and byte fields are deltas
// since the previous point; gauges are read at the point. Null where the server does not
// expose the counter or a reading went down (restart).
type SeriesPoint struct {
	AtMS            float64  `json:"t_ms"` // since the step started
	PromptTokens    *float64 `json:"prompt_tokens"`
	GPUHitTokens    *float64 `json:"gpu_hit_tokens"`
	HostHitTokens   *float64 `json:"host_hit_tokens"`
	RecomputeTokens *float64 `json:"recompute_tokens"`
	StoreBytes      *float64 `json:"store_bytes"`
	LoadBytes       *float64 `json:"load_bytes"`
	Preemptions     *float64 `json:"preemptions"`
	KVUsage         *float64 `json:"kv_usage"`
	Running         *float64 `json:"running"`
	Waiting         *float64 `json:"waiting"`
	// Invalid says why this interval's deltas are null (a counter went down).
	Invalid string `json:"invalid,omitempty"`
}

// TierSplit is how the prompt tokens of a span were served: from GPU memory, from the host
// (offload) tier, or recomputed. Source names the counters it came from.
type TierSplit struct {
	Source          string
	PromptTokens    *float64
	GPUHitTokens    *float64
	HostHitTokens   *float64
	RecomputeTokens *float64
}

// Tier sources.
const (
	TierBySource = "prompt_tokens_by_source"
	TierByHits   = "prefix_cache_queries_and_hits"
)

// SplitTiers reads a delta's tier split: the server's by-source prompt counters where it
// has them (they exclude re-admissions after preemption), else prefix-cache queries and hits,
// recompute being queries minus both hits. A counter the server lacks stays nil.
func SplitTiers(d *Counters) TierSplit {
	ptr := d.Delta
	if local, ext, comp := ptr(metrics.PromptTokensLocalCacheHit), ptr(metrics.PromptTokensExternal), ptr(metrics.PromptTokensLocalCompute); local != nil && comp != nil {
		t := TierSplit{Source: TierBySource, GPUHitTokens: local, HostHitTokens: ext, RecomputeTokens: comp}
		total := *local + *comp
		if ext != nil {
			total += *ext
		}
		t.PromptTokens = &total
		return t
	}
	t := TierSplit{Source: TierByHits, PromptTokens: ptr(metrics.GPUPrefixQueries), GPUHitTokens: ptr(metrics.GPUPrefixHits), HostHitTokens: ptr(metrics.ExternalPrefixHits)}
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

// Point fills a series point's token fields from the split.
func (t TierSplit) Point(p *SeriesPoint) {
	p.PromptTokens, p.GPUHitTokens, p.HostHitTokens, p.RecomputeTokens = t.PromptTokens, t.GPUHitTokens, t.HostHitTokens, t.RecomputeTokens
}

// TierShares is the share of a span's prompt tokens each tier served, with the token counts.
type TierShares struct {
	Source          string   `json:"source"`
	PromptTokens    *float64 `json:"prompt_tokens"`
	GPUHitTokens    *float64 `json:"gpu_hit_tokens"`
	HostHitTokens   *float64 `json:"host_hit_tokens"`
	RecomputeTokens *float64 `json:"recompute_tokens"`
	GPU             *float64 `json:"gpu_share"`
	Host            *float64 `json:"host_share"`
	Recompute       *float64 `json:"recompute_share"`
}

// Shares turns a split into shares; a share is null when its count or the total is.
func (t TierSplit) Shares() TierShares {
	s := TierShares{Source: t.Source, PromptTokens: t.PromptTokens, GPUHitTokens: t.GPUHitTokens, HostHitTokens: t.HostHitTokens, RecomputeTokens: t.RecomputeTokens}
	share := func(v *float64) *float64 {
		if v == nil || t.PromptTokens == nil || *t.PromptTokens <= 0 {
			return nil
		}
		f := *v / *t.PromptTokens
		return &f
	}
	s.GPU, s.Host, s.Recompute = share(t.GPUHitTokens), share(t.HostHitTokens), share(t.RecomputeTokens)
	return s
}

// Percentiles are nearest-rank percentiles of a set of values; null when the set is empty.
type Percentiles struct {
	N   int      `json:"n"`
	P50 *float64 `json:"p50"`
	P90 *float64 `json:"p90"`
	P99 *float64 `json:"p99"`
	Max *float64 `json:"max"`
}

// PercentilesOf computes nearest-rank percentiles of values.
func PercentilesOf(values []float64) Percentiles {
	p := Percentiles{N: len(values)}
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

// ConversationSection is a conversation step in the run record: how many turns the users
// sent, the time to first token they saw, how the prompt tokens were served (from the
// step's counters, before its first request and after its last), and the series.
type ConversationSection struct {
	Artifact       string `json:"artifact"`
	Users          int    `json:"users"`
	Turns          int    `json:"turns"`
	Requests       int    `json:"requests"`
	FailedRequests int    `json:"failed_requests"`
	Interrupted    bool   `json:"interrupted,omitempty"`
	// TTFTMS is the time to first output of the requests that did not fail.
	TTFTMS Percentiles `json:"time_to_first_output_ms"`
	Tiers  TierShares  `json:"tiers"`
	// CachedPromptTokens sums usage cached_tokens; null when no request reported it.
	CachedPromptTokens  *float64 `json:"cached_prompt_tokens"`
	Preemptions         *float64 `json:"preemptions"`
	StoreBytesDelta     *float64 `json:"gpu_to_cpu_bytes_delta"`
	LoadBytesDelta      *float64 `json:"cpu_to_gpu_bytes_delta"`
	PeakBlockOccupancy  *float64 `json:"sampled_peak_block_occupancy_fraction"`
	PeakActiveSequences *float64 `json:"sampled_engine_active_max"`
	PeakWaiting         *float64 `json:"sampled_waiting_max"`
	CountersValid       bool     `json:"counters_valid"`
	InvalidReasons      []string `json:"invalid_reasons,omitempty"`
	ScrapeIntervalMS    float64  `json:"scrape_interval_ms"`
	// Series is the artifact's series; TTFTSeries each request's time to first output at
	// the moment its first output came, ms since the step started.
	Series     []SeriesPoint `json:"series"`
	TTFTSeries []TTFTPoint   `json:"ttft_series"`
}

// TTFTPoint is one request's time to first output, placed at its first output.
type TTFTPoint struct {
	AtMS   float64 `json:"t_ms"`
	TTFTMS float64 `json:"ttft_ms"`
	User   int     `json:"user"`
	Turn   int     `json:"turn"`
}

// ConversationOf computes a conversation step's section from its artifact.
func ConversationOf(st Step, artifact string) ConversationSection {
	s := ConversationSection{Artifact: artifact, Requests: len(st.Requests), Interrupted: st.Interrupted, CountersValid: true, Series: []SeriesPoint{}, TTFTSeries: []TTFTPoint{}}
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
			s.TTFTSeries = append(s.TTFTSeries, TTFTPoint{AtMS: at, TTFTMS: *res.TimeToFirstOutputMS, User: r.Turn.User, Turn: r.Turn.Turn})
		}
	}
	slices.SortStableFunc(s.TTFTSeries, func(a, b TTFTPoint) int {
		switch {
		case a.AtMS < b.AtMS:
			return -1
		case a.AtMS > b.AtMS:
			return 1
		}
		return 0
	})
	s.TTFTMS = PercentilesOf(ttfts)
	if c := st.Span; c != nil {
		s.Tiers = SplitTiers(c).Shares()
		s.Preemptions = c.Delta(metrics.Preemptions)
		s.StoreBytesDelta = c.Delta(metrics.StoreBytes)
		s.LoadBytesDelta = c.Delta(metrics.LoadBytes)
	}
	s.CountersValid, s.InvalidReasons = st.SpanValidity()
	s.PeakBlockOccupancy, s.PeakActiveSequences = st.Sampled.PeakKVUsage, st.Sampled.PeakRunning
	return s
}

package record

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
	// TierBySlotHistory is llama.cpp's split, inferred from usage's cached tokens and each
	// slot's previous prompt (record.SlotSplit), not read from counters.
	TierBySlotHistory = "inferred_from_usage_and_slot_history"
)

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
	CachedPromptTokens *float64 `json:"cached_prompt_tokens"`
	StepLoad
	PeakWaiting      *float64 `json:"sampled_waiting_max"`
	CountersValid    bool     `json:"counters_valid"`
	InvalidReasons   []string `json:"invalid_reasons,omitempty"`
	ScrapeIntervalMS float64  `json:"scrape_interval_ms"`
	// Series is the artifact's series; TTFTSeries each request's time to first output at
	// the moment its first output came, ms since the step started.
	Series     []SeriesPoint `json:"series"`
	TTFTSeries []TTFTPoint   `json:"ttft_series"`
}

// StepLoad is what the counters and gauges say of a step of overlapping requests (a
// conversation or a trace step) as a whole: preemptions and KV traffic over its span, and
// the sampled peaks.
type StepLoad struct {
	Preemptions         *float64 `json:"preemptions"`
	StoreBytesDelta     *float64 `json:"gpu_to_cpu_bytes_delta"`
	LoadBytesDelta      *float64 `json:"cpu_to_gpu_bytes_delta"`
	PeakBlockOccupancy  *float64 `json:"sampled_peak_block_occupancy_fraction"`
	PeakActiveSequences *float64 `json:"sampled_engine_active_max"`
}

// TTFTPoint is one request's time to first output, placed at its first output.
type TTFTPoint struct {
	AtMS   float64 `json:"t_ms"`
	TTFTMS float64 `json:"ttft_ms"`
	User   int     `json:"user"`
	Turn   int     `json:"turn"`
}

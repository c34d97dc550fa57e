package record

// KindTrace is a trace step's kind: a replay of a KV-cache trace block for block.
const KindTrace = "trace"

// Trace step modes.
const (
	TraceOpenLoop   = "open_loop"   // at the trace's timestamps x time_scale
	TraceClosedLoop = "closed_loop" // in trace order, concurrency requests in flight
)

// TraceReplay is what a trace step adds to its artifact: which trace and window it replayed
// and how, the counters read at a fixed interval while it ran (as a conversation step's
// series), and the ideal reference at the server's pool sizes computed from the same window.
type TraceReplay struct {
	// File is the trace as read, NamedBy who named it ("scenario" or "command line"), and
	// SHA256 the whole file's as the step read it.
	File        string `json:"file"`
	NamedBy     string `json:"named_by"`
	SHA256      string `json:"sha256"`
	BlockTokens int    `json:"block_tokens"`
	// Format is the trace's format and the fields its lines carried (absent in records
	// written before kvbench read more than one format: those are Mooncake's).
	Format *TraceFormat `json:"trace_format,omitempty"`
	// The window: requests from StartSeconds of trace time, for DurationSeconds or
	// RequestLimit requests (0: to the end), input over MaxInputTokens dropped (0: none).
	StartSeconds    float64 `json:"window_start_seconds"`
	DurationSeconds float64 `json:"window_duration_seconds"`
	RequestLimit    int     `json:"window_requests"`
	MaxInputTokens  int     `json:"max_input_tokens"`
	// Shard is the part of the window this run replayed (--shard K/N; absent: all of it).
	// Its planned requests are the shard's; its dropped requests the whole window's.
	Shard *TraceShard `json:"shard,omitempty"`
	// Mode is open_loop or closed_loop; TimeScale multiplies the open loop's gaps (null in a
	// closed loop); Concurrency is the closed loop's requests in flight.
	Mode        string   `json:"mode"`
	TimeScale   *float64 `json:"time_scale"`
	Concurrency int      `json:"concurrency,omitempty"`
	// PlannedRequests are the window's requests; DroppedRequests those over max_input_tokens
	// (not sent). The artifact's requests are those sent.
	PlannedRequests int `json:"planned_requests"`
	DroppedRequests int `json:"dropped_requests"`
	// SpanSeconds is the trace time from the window's first request to its last.
	SpanSeconds float64 `json:"trace_span_seconds"`
	// PeakInFlight is the most requests the client had in flight at once.
	PeakInFlight int `json:"peak_in_flight"`
	// PromptForm is token_ids or text; TextBlocks is a text form's measured deviation from
	// block_tokens under the server's tokenizer (preflight, /tokenize).
	PromptForm string          `json:"prompt_form"`
	TextBlocks *BlockDeviation `json:"text_block_deviation,omitempty"`
	// IgnoreEOS: each request asked for exactly its output_length tokens (at least 1); the
	// engine takes ignore_eos. False: max_tokens only, so a request may stop sooner.
	IgnoreEOS        bool          `json:"ignore_eos"`
	ScrapeIntervalMS float64       `json:"scrape_interval_ms"`
	ScrapeErrors     int           `json:"scrape_errors"`
	Series           []SeriesPoint `json:"series"`
	// Ideal is the two-tier ideal at the server's pool sizes; IdealUnavailable says why it
	// is null.
	Ideal            *IdealTiers `json:"ideal"`
	IdealUnavailable string      `json:"ideal_unavailable,omitempty"`
	// SlotSplitUnavailable says why a slot engine's requests have no slot split.
	SlotSplitUnavailable string `json:"slot_split_unavailable,omitempty"`
}

// TraceFormat is what reading a trace learned of its format (docs/traces.md, section 1).
type TraceFormat struct {
	// Format is mooncake, bailian, burstgpt or azure; Detected says it was told from the
	// file's content rather than named; Gzip that the file was gzip-compressed.
	Format   string `json:"format"`
	Detected bool   `json:"detected"`
	Gzip     bool   `json:"gzip,omitempty"`
	// Fields are the format's fields (CSV: columns) the trace carried, in the format's order.
	Fields []string `json:"fields"`
	// PrefixInformation says some request names its blocks (hash_ids): without it the
	// trace gives lengths and arrivals only, every prompt shares nothing, and an ideal
	// cache's hit rate is unknown.
	PrefixInformation bool `json:"prefix_information"`
	// SkippedRows counts rows the format marks as no request (BurstGPT's 0 request tokens).
	SkippedRows int `json:"skipped_rows,omitempty"`
}

// NoPrefixInformation is what a trace step's finding says of a trace without prefix
// information.
const NoPrefixInformation = "no prefix information: the ideal is unknown"

// BlockDeviation is how a server's tokenizer counts text-form blocks against their size.
type BlockDeviation struct {
	Blocks      int `json:"blocks"`       // blocks measured
	BlockTokens int `json:"block_tokens"` // the size each should have
	// AddedTokens is what the tokenizer adds to any prompt (a BOS token, say), counted on
	// the empty prompt and subtracted from every count below.
	AddedTokens int `json:"added_tokens"`
	// ExactBlocks counts blocks of exactly BlockTokens tokens.
	ExactBlocks int `json:"exact_blocks"`
	// MeanAbsDeviation and MaxAbsDeviation are |tokens - BlockTokens| over the blocks.
	MeanAbsDeviation float64 `json:"mean_abs_deviation_tokens"`
	MaxAbsDeviation  int     `json:"max_abs_deviation_tokens"`
	// JoinDeviation is the blocks counted together minus the sum of their counts alone: not
	// 0 when tokens form across block boundaries, which would shift every later block.
	JoinDeviation int `json:"join_deviation_tokens"`
}

// Exact reports whether every block measured exactly BlockTokens tokens and nothing formed
// across their boundaries.
func (d BlockDeviation) Exact() bool { return d.ExactBlocks == d.Blocks && d.JoinDeviation == 0 }

// IdealTiers is the ideal reference at the server's pool sizes (docs/traces.md, "The ideal
// reference"): what a GPU LRU pool of GPUTokens plus an LRU host tier of HostTokens, written
// through as vLLM's offloading connector writes it, would have served of the same window's
// prompt tokens, requests served one at a time in trace order.
type IdealTiers struct {
	GPUTokens        int64  `json:"gpu_tokens"`
	GPUTokensSource  string `json:"gpu_tokens_source"`
	HostTokens       int64  `json:"host_tokens"`
	HostTokensSource string `json:"host_tokens_source"`
	BlockTokens      int    `json:"block_tokens"`
	// PoolHoldsOutput: the GPU pool also holds each request's partial block and output.
	PoolHoldsOutput bool  `json:"pool_holds_output"`
	PromptTokens    int64 `json:"prompt_tokens"`
	IdealShares
	// MaxHitRate is an unbounded cache's hit rate: the most any cache could serve.
	MaxHitRate float64 `json:"max_hit_rate"`
	// BlockSizeNote says what the server's block size, when it is not block_tokens, does
	// to the comparison.
	BlockSizeNote string `json:"block_size_note,omitempty"`
}

// IdealShares is what an ideal cache served of a window's prompt tokens, tier by tier (the
// trace package's analysis fills it).
type IdealShares struct {
	GPUHitTokens    int64   `json:"gpu_hit_tokens"`
	HostHitTokens   int64   `json:"host_hit_tokens"`
	RecomputeTokens int64   `json:"recompute_tokens"`
	StoredTokens    int64   `json:"stored_tokens"` // written to the host tier
	GPUShare        float64 `json:"gpu_share"`
	HostShare       float64 `json:"host_share"`
	RecomputeShare  float64 `json:"recompute_share"`
}

// TraceRequest is a trace step's request as the trace gave it, and when it was sent.
type TraceRequest struct {
	// Line is its line in the trace file; TraceTimeMS its timestamp there.
	Line        int     `json:"line"`
	TraceTimeMS float64 `json:"trace_time_ms"`
	// ScheduledMS is when it was due, since the step started (open loop: its timestamp's
	// offset from the window's first request, times time_scale, from when the replay's first
	// prompts were built; closed loop: when a slot freed up for it); DispatchLagMS how late it went out: to its body written to the
	// connection where BodyWritten, else (records before it, a client that is not HTTP) to
	// when kvbench took it up. StartLagMS is the latter, absent in older records.
	ScheduledMS   float64  `json:"scheduled_ms"`
	DispatchLagMS float64  `json:"dispatch_lag_ms"`
	StartLagMS    *float64 `json:"start_lag_ms,omitempty"`
	BodyWritten   bool     `json:"body_written,omitempty"`
	InputLength   int      `json:"input_length"`
	OutputLength  int      `json:"output_length"`
	// MaxTokens is what the request asked for: output_length, at least 1.
	MaxTokens int `json:"max_tokens"`
	// HashIDs is how many block ids the trace named for it.
	HashIDs int `json:"hash_ids"`
	// Slot is its cached tokens split between llama.cpp's live slot and host prompt cache,
	// inferred from usage and the slot's history (trace.SlotHistory); absent elsewhere.
	Slot *SlotSplit `json:"slot_split,omitempty"`
}

// SlotSplit is a request's cached prompt tokens by where llama-server found them: the live
// slot (LiveTokens) or the --cache-ram prompt cache (HostTokens). No counter says: Method
// names how they were inferred.
type SlotSplit struct {
	LiveTokens int    `json:"live_slot_tokens"`
	HostTokens int    `json:"host_cache_tokens"`
	Method     string `json:"method"`
}

// DispatchBehind is the finding that an open-loop replay fell behind its trace: its dispatch
// lag p99 exceeded ThresholdP99MS (docs/traces.md, "Falling behind").
type DispatchBehind struct {
	ThresholdP99MS float64 `json:"threshold_p99_ms"`
	LagP50MS       float64 `json:"lag_p50_ms"`
	LagP99MS       float64 `json:"lag_p99_ms"`
	LagMaxMS       float64 `json:"lag_max_ms"`
	// OfferedRequestsPerSecond is the rate the trace asked for; null for a window of one
	// instant.
	OfferedRequestsPerSecond *float64 `json:"offered_requests_per_second"`
	Finding                  string   `json:"finding"`
}

// TraceSection is a trace step in the run record: what was sent and how fast it was
// served, how the prompt tokens were served (from the step's counters, before its first
// request and after its last) beside the ideal at the server's pool sizes, and the series.
type TraceSection struct {
	Artifact string `json:"artifact"`
	File     string `json:"file"`
	SHA256   string `json:"sha256"`
	// Format is the trace's format and fields (absent for a record from before formats).
	Format *TraceFormat `json:"trace_format,omitempty"`
	// Shard is the part of the window the run replayed (--shard; absent: all of it).
	Shard           *TraceShard `json:"shard,omitempty"`
	Mode            string      `json:"mode"`
	TimeScale       *float64    `json:"time_scale"`
	Concurrency     int         `json:"concurrency,omitempty"`
	PromptForm      string      `json:"prompt_form"`
	PlannedRequests int         `json:"planned_requests"`
	// OfferedRequestsPerSecond is an open loop's rate: the window's requests over its trace
	// time x time_scale; null for a closed loop or a window of one instant.
	OfferedRequestsPerSecond *float64 `json:"offered_requests_per_second"`
	Requests                 int      `json:"requests"`
	FailedRequests           int      `json:"failed_requests"`
	DroppedRequests          int      `json:"dropped_requests"`
	PeakInFlight             int      `json:"peak_in_flight"`
	Interrupted              bool     `json:"interrupted,omitempty"`
	// TTFTMS and DecodeTokensPerSecond are over the requests that did not fail;
	// DispatchLagMS over every request sent.
	TTFTMS                Percentiles `json:"time_to_first_output_ms"`
	DecodeTokensPerSecond Percentiles `json:"decode_tokens_per_second"`
	DispatchLagMS         Percentiles `json:"dispatch_lag_ms"`
	// DispatchBehind is set when an open loop's requests went out late past its threshold:
	// the load the server saw was not the trace's.
	DispatchBehind *DispatchBehind `json:"dispatch_behind,omitempty"`
	// PromptTokens and CachedPromptTokens sum usage over the requests; null when none
	// reported them. RequestTiers sums the per-request tier split where the engine gives it
	// (SGLang's cached_tokens_details); null where it does not.
	PromptTokens       *float64    `json:"prompt_tokens"`
	CachedPromptTokens *float64    `json:"cached_prompt_tokens"`
	RequestTiers       *TierTokens `json:"request_cached_tokens_details"`
	// Tiers is the measured split, Ideal the ideal's, and Finding the two in a sentence.
	Tiers            TierShares  `json:"tiers"`
	Ideal            *IdealTiers `json:"ideal"`
	IdealUnavailable string      `json:"ideal_unavailable,omitempty"`
	// SlotSplitUnavailable says why a slot engine's step has no per-request slot split.
	SlotSplitUnavailable string `json:"slot_split_unavailable,omitempty"`
	Finding              string `json:"finding"`
	StepLoad
	CountersValid    bool          `json:"counters_valid"`
	InvalidReasons   []string      `json:"invalid_reasons,omitempty"`
	ScrapeIntervalMS float64       `json:"scrape_interval_ms"`
	Series           []SeriesPoint `json:"series"`
	// WarmCaches is set when the step's requests came back cached beyond the most any cache
	// could serve of its trace (the ideal's max_hit_rate): it measured earlier caches.
	WarmCaches *WarmCaches `json:"warm_caches,omitempty"`
}

// TraceShard is shard Index of Count of a trace window (docs/traces.md, "Sharding"): the
// Count shards' requests partition the window.
type TraceShard struct {
	Index int `json:"index"`
	Count int `json:"count"`
}

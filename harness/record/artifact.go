// Package record owns what a kvbench run writes: every field of every file (the step
// artifacts, the request journal's lines, the run record run.json of schema
// anvil-serving.kv-offload-replay/v1, the study and sweep records) is a type of this package,
// with plain fields; producers convert their own types at the edge. It also holds the
// arithmetic that turns the raw step artifacts into a run's one derived view (Assemble,
// Derive): the sections of run.json, which keep the field names of the seed records, the
// measured bytes per token and the repeats summary. Schemas: docs/records.md.
package record

import (
	"encoding/json"
	"fmt"
	"time"
)

// Schemas written by kvbench. StepSchemaV1 is the step file of kvbench before the record
// owned its schema; readers still accept it (see legacy.go).
const (
	RunSchema    = "anvil-serving.kv-offload-replay/v1"
	StepSchema   = "anvil-serving.kvbench-step/v2"
	StepSchemaV1 = "anvil-serving.kvbench-step/v1"
)

// IsStepSchema reports whether s is a step file's schema this kvbench reads.
func IsStepSchema(s string) bool { return s == StepSchema || s == StepSchemaV1 }

// Step kinds.
const (
	KindSequence     = "sequence"
	KindReplay       = "replay"
	KindConversation = "conversation"
)

// Delta scopes: with concurrency 1 each request is isolated and has its own counter deltas;
// with more, requests overlap and only the step's delta is meaningful.
const (
	ScopeRequest = "request"
	ScopeStep    = "step"
)

// StepArtifact is the raw record of one step, written once when the step ends: the source
// of truth its section in run.json is computed from. Each number is written once: an
// isolated step's span over all its requests is derived from theirs (Assemble), not stored.
type StepArtifact struct {
	Schema      string `json:"schema"`
	Scenario    string `json:"scenario"`
	Step        string `json:"step"`
	Kind        string `json:"kind"`
	Concurrency int    `json:"concurrency"`
	// Sent is the JSON body every request of the step sent, its messages left out
	// (max_tokens, temperature, stream_options, ignore_eos, min_tokens, extra_body).
	Sent       json.RawMessage `json:"sent,omitempty"`
	DeltaScope string          `json:"delta_scope"`
	StartedAt  time.Time       `json:"started_at"`
	EndedAt    time.Time       `json:"ended_at"`
	// Client is what the step cost kvbench itself; absent where the system does not say.
	Client *ClientCost `json:"client,omitempty"`
	// Interrupted: the run was stopped during this step; Requests holds what was measured.
	Interrupted bool      `json:"interrupted"`
	Requests    []Request `json:"requests"`
	// Counters, CountersError and Samples belong to a step whose requests overlapped (scope
	// step): read before its first request and after its last, and sampled while they ran.
	Counters      *Counters `json:"counters,omitempty"`
	CountersError string    `json:"counters_error,omitempty"`
	Samples       *Samples  `json:"samples,omitempty"`
	// Conversation is a conversation step's counter series.
	Conversation *ConversationTrace `json:"conversation,omitempty"`
	// Trace is a trace step's trace, window, series and ideal reference.
	Trace *TraceReplay `json:"trace,omitempty"`
}

// Request is one sent request with everything measured about it; a journal line is one.
type Request struct {
	Step          string     `json:"step"`
	IndexInStep   int        `json:"index_in_step"`
	Ordinal       int        `json:"ordinal"`
	Replay        bool       `json:"replay,omitempty"`
	ReplayOf      *ReplayRef `json:"replay_of,omitempty"`
	PlannedTokens int        `json:"planned_tokens"`
	Prompt        Prompt     `json:"prompt"`
	Result        Result     `json:"result"`
	Isolation     *Isolation `json:"isolation,omitempty"`
	// Counters are the scrapes around an isolated request; nil when the step's scope is
	// "step", or when a scrape failed (CountersError says why).
	Counters      *Counters `json:"counters,omitempty"`
	CountersError string    `json:"counters_error,omitempty"`
	// Samples are the gauge readings while an isolated request ran.
	Samples *Samples  `json:"samples,omitempty"`
	Verdict *Decision `json:"verdict,omitempty"` // replays only
	Turn    *Turn     `json:"turn,omitempty"`    // conversations only
	// Trace is a trace step's request as the trace gave it, with when it was sent.
	Trace *TraceRequest `json:"trace,omitempty"`
	// Replica is the replica whose counters moved around this request (the one that served
	// it); omitted when the server has one replica or the request was not isolated.
	Replica *Replica `json:"replica,omitempty"`
	// ColdTwin marks the cold twin of its step's replay: the replay's prompt bytes sent
	// again right after it as a guaranteed miss, isolated with counters of its own.
	ColdTwin *ColdTwin `json:"cold_twin,omitempty"`
	// ColdTwinSkipped, on a replay, says why no cold twin followed it.
	ColdTwinSkipped string `json:"cold_twin_skipped,omitempty"`
}

// ColdTwin is how a cold twin was made to miss: the request field the engine takes for it
// and the value sent (a fresh salt, or false).
type ColdTwin struct {
	Mechanism string `json:"mechanism"`
	Field     string `json:"field"`
	Value     any    `json:"value"`
}

// Prompt is a sent prompt's identity and how its size was reached (not its text).
type Prompt struct {
	Tokens             int    `json:"tokens"`
	TokenCounting      string `json:"token_counting"`
	CountCalls         int    `json:"count_calls"`
	WithinTolerance    bool   `json:"within_tolerance"`
	ToleranceTokens    int    `json:"tolerance_tokens"`
	SharedPrefixTokens int    `json:"shared_prefix_tokens"`
	SharedPrefixSHA256 string `json:"shared_prefix_sha256"`
	Identity           string `json:"identity"`
	ExpectedAnswer     string `json:"expected_answer"`
	// Shape is the identity of everything the prompt's bytes depend on but the salt (seed,
	// index, plan, shared prefix, mode, counting): two runs whose prompts have equal shapes
	// sent the same sizes, whatever their salts. "" in records older than salts.
	Shape string `json:"shape,omitempty"`
}

// Result is everything measured about one streamed chat request. Durations are
// milliseconds on the monotonic clock from the request start; a nil pointer (JSON null)
// means absent or unknown, never 0.
type Result struct {
	StartedAt time.Time `json:"started_at"` // wall clock, UTC, RFC3339Nano in JSON
	Model     string    `json:"model"`
	// ServerModel is the model the stream's first chunk naming one said answered; "" when
	// none named one. Another than Model means another model answered (ModelMismatch).
	ServerModel string `json:"server_model,omitempty"`

	TimeToFirstOutputMS       *float64 `json:"time_to_first_output_ms"`
	TimeToFirstVisibleTokenMS *float64 `json:"time_to_first_visible_token_ms"`
	// EndToEndMS runs to the last chunk carrying generated text, not the usage chunk.
	EndToEndMS *float64 `json:"end_to_end_ms"`
	// StreamMS runs to the end of the stream ([DONE], usage included, or the failure).
	StreamMS float64 `json:"stream_ms"`

	OutputTokens       int    `json:"output_tokens"`
	OutputTokensSource string `json:"output_tokens_source"`
	PromptTokens       *int   `json:"prompt_tokens"`
	// CachedPromptTokens is usage.prompt_tokens_details.cached_tokens; vLLM reports it only
	// with --enable-prompt-tokens-details and omits it when 0, so nil means unknown.
	CachedPromptTokens         *int `json:"cached_prompt_tokens"`
	PromptTokensDetailsPresent bool `json:"prompt_tokens_details_present"`
	ReasoningTokens            *int `json:"reasoning_tokens"` // usage.completion_tokens_details
	UsagePresent               bool `json:"usage_present"`
	// CachedTokensDetails is the per-tier split the server sent when asked (SGLang's
	// sglext); nil when it sent none.
	CachedTokensDetails *TierTokens `json:"cached_tokens_details,omitempty"`

	GeneratedChunks int `json:"generated_chunks"`
	// BatchedChunks counts generated chunks that arrived in the same read as the generated
	// chunk before them: their inter-token gaps were not measurable, and InterTokenMS
	// leaves them out instead of counting them as 0.
	BatchedChunks int `json:"batched_chunks"`
	// InterTokenMS spreads the gaps between generated chunks that arrived in different
	// reads; nil when none was measurable (fewer than two reads brought output).
	InterTokenMS    *Spread `json:"inter_token_ms"`
	ReasoningChunks int     `json:"reasoning_chunks"`
	ReasoningBytes  int     `json:"reasoning_bytes"`
	ContentChunks   int     `json:"content_chunks"`
	ContentBytes    int     `json:"content_bytes"`
	// VisibleAnswer: some non-empty content arrived. ReasoningOnly: something was generated
	// but no visible content (a reasoning_only_failure), whether or not it failed.
	VisibleAnswer bool   `json:"visible_answer"`
	ReasoningOnly bool   `json:"reasoning_only"`
	FinishReason  string `json:"finish_reason"`

	DecodeTokensPerSecond           *float64 `json:"decode_tokens_per_second"`
	EffectivePrefillTokensPerSecond *float64 `json:"effective_prefill_tokens_per_second"`

	HTTPStatus int    `json:"http_status"` // 0 when no HTTP response arrived
	Error      string `json:"error"`       // redacted; empty on success
	ErrorKind  string `json:"error_kind"`  // one of the ErrorKind constants; empty on success

	Answer          string `json:"answer"` // visible content, first AnswerCapBytes bytes
	AnswerTruncated bool   `json:"answer_truncated"`

	// OutputText is every generated text delta (reasoning and content) in order and
	// OutputTokenIDs the generated token ids the server sent, kept only when the request
	// asked (KeepOutput), up to OutputTextCapBytes and OutputTokenIDsCap; nil ids mean the
	// server sent none.
	OutputText              string `json:"output_text,omitempty"`
	OutputTextTruncated     bool   `json:"output_text_truncated,omitempty"`
	OutputTokenIDs          []int  `json:"output_token_ids,omitempty"`
	OutputTokenIDsTruncated bool   `json:"output_token_ids_truncated,omitempty"`
}

// Failed reports whether the request ended with an error.
func (r *Result) Failed() bool { return r.ErrorKind != "" }

// ModelMismatch says the server named another model than the request asked for.
func (r *Result) ModelMismatch() bool { return r.ServerModel != "" && r.ServerModel != r.Model }

// ModelMismatchNote words a request another model answered, for the console and gates.
func (r *Result) ModelMismatchNote() string {
	return fmt.Sprintf("MODEL MISMATCH: asked for %q, the server answered as %q", r.Model, r.ServerModel)
}

// TierTokens is a request's cached prompt tokens by the tier that served them (SGLang's
// cached_tokens_details).
type TierTokens struct {
	Device         int    `json:"device"`
	Host           int    `json:"host"`
	Storage        int    `json:"storage"`
	StorageBackend string `json:"storage_backend,omitempty"`
}

// Spread summarizes measured durations in milliseconds (nearest-rank percentiles).
type Spread struct {
	N      int     `json:"n"`
	Median float64 `json:"median"`
	P90    float64 `json:"p90"`
	P99    float64 `json:"p99"`
	Max    float64 `json:"max"`
}

// Sample is one reading of the KV usage and running gauges during a request.
type Sample struct {
	AtMS    float64  `json:"t_ms"` // since the run started
	KVUsage *float64 `json:"kv_usage"`
	Running *float64 `json:"running"`
}

// Samples are the gauge readings taken while requests ran, with their peaks. A peak is nil
// when the gauge was never read (absent on the server, or no sample fell inside the request).
type Samples struct {
	IntervalMS  float64  `json:"interval_ms"`
	Count       int      `json:"count"`
	Errors      int      `json:"scrape_errors"`
	PeakKVUsage *float64 `json:"peak_block_occupancy_fraction"`
	PeakRunning *float64 `json:"peak_active_sequences"`
	Series      []Sample `json:"series,omitempty"`
}

// Merge folds o into s (peaks are maxima, series concatenate).
func (s *Samples) Merge(o *Samples) {
	if o == nil {
		return
	}
	if s.IntervalMS == 0 {
		s.IntervalMS = o.IntervalMS
	}
	s.Count += o.Count
	s.Errors += o.Errors
	s.PeakKVUsage = maxPtr(s.PeakKVUsage, o.PeakKVUsage)
	s.PeakRunning = maxPtr(s.PeakRunning, o.PeakRunning)
	s.Series = append(s.Series, o.Series...)
}

func maxPtr(a, b *float64) *float64 {
	switch {
	case a == nil:
		return b
	case b == nil || *a >= *b:
		return a
	default:
		return b
	}
}

// Isolation records the waits for an idle server around an isolated request.
type Isolation struct {
	// IdleCheck is "gauges" when running/waiting were read, "unavailable" when the server
	// does not expose them (then the request was not proven isolated).
	IdleCheck      string  `json:"idle_check"`
	WaitBeforeMS   float64 `json:"wait_before_ms"`
	WaitAfterMS    float64 `json:"wait_after_ms"`
	TimedOutBefore bool    `json:"timed_out_before"`
	TimedOutAfter  bool    `json:"timed_out_after"`
}

// Replica says which replica served a request: the one whose activity counters moved in its
// window ("unknown" when none could be told), and how that was decided.
type Replica struct {
	Replica string `json:"replica"`
	By      string `json:"by"`
}

// UnknownReplica is the replica of a window whose counters do not name one.
const UnknownReplica = "unknown"

// Known reports whether r names one replica.
func (r *Replica) Known() bool { return r != nil && r.Replica != UnknownReplica && r.Replica != "" }

// Turn names the user and turn (both from 0) of a conversation step's request.
type Turn struct {
	User int `json:"user"`
	Turn int `json:"turn"`
}

// ClientCost is the CPU time kvbench's own process spent during a step (user and system,
// all its threads): a client that takes the cores it shares with the server skews the very
// timings it measures.
type ClientCost struct {
	CPUMS float64 `json:"cpu_ms"`
	// Cores is CPU time over the step's wall time.
	Cores float64 `json:"cores"`
	// CPUMSPer1kOutputTokens is null when the step produced no output tokens.
	CPUMSPer1kOutputTokens *float64 `json:"cpu_ms_per_1k_output_tokens"`
}

// Verdict is the judgement on one replayed request (package verdict names the values).
type Verdict string

// Decision is the verdict on a replayed request with the numbers and words behind it
// (verdict.Decide fills it): the counters it read are the request's own, not written again.
type Decision struct {
	Verdict   Verdict  `json:"verdict"`
	Reason    string   `json:"reason"`
	DecidedBy string   `json:"decided_by,omitempty"`
	Notes     []string `json:"notes,omitempty"`
	// HitCoverage = (GPU + host hits) / prompt tokens.
	HitCoverage *float64 `json:"hit_coverage,omitempty"`
	UsageAgrees *bool    `json:"usage_agrees_with_counters,omitempty"`
	// ExpectedLoadBytes = host hits x expected bytes per token; MeasuredLoadBytesPerToken =
	// load bytes / host hits.
	ExpectedLoadBytes         *float64         `json:"expected_load_bytes,omitempty"`
	MeasuredLoadBytesPerToken *float64         `json:"measured_load_bytes_per_token,omitempty"`
	Slot                      *SlotAttribution `json:"slot_attribution,omitempty"`
	// CrossChecks compare each quantity two independent sources gave (verdict.CrossCheck).
	CrossChecks []CrossCheck `json:"cross_checks,omitempty"`
	// TierSplit is the replay's prompt tokens by tier and whether they add up.
	TierSplit      *RequestTiers    `json:"tier_split,omitempty"`
	Diagnosis      []Diagnosis      `json:"diagnosis,omitempty"`
	Offload        *OffloadEvidence `json:"offload_evidence,omitempty"`
	SetupValid     Answer           `json:"setup_valid"`
	SetupReason    string           `json:"setup_reason"`
	Interpretation string           `json:"interpretation"`
	// Capacity is the capacity math of the replay with the tokens the server counted.
	Capacity *Capacity `json:"capacity,omitempty"`
	// FromV1: read from a v1 record, which kept its capacity math on the step and worded
	// its interpretation otherwise; derive.Assemble words it anew.
	FromV1 bool `json:"-"`
}

// CrossCheck is one quantity read from two independent sources: what each said, whether
// they agree within Tolerance, and the evidence the verdict used where they do not.
type CrossCheck struct {
	Name      string   `json:"name"`
	Sources   []string `json:"sources"`
	Agrees    bool     `json:"agrees"`
	Tolerance float64  `json:"tolerance"`
	Used      string   `json:"used,omitempty"`
}

// SlotAttribution is a slot-attributed replay's split between the live slot and the
// host-RAM cache.
type SlotAttribution struct {
	LiveTokens   *int `json:"live_slot_tokens"`
	HostTokens   *int `json:"host_cache_tokens"`
	CommonPrefix *int `json:"common_prefix_with_previous_prompt"`
	Slots        int  `json:"slots"`
	Tolerance    int  `json:"tolerance_tokens"`
}

// Diagnosis is one cause a recompute or partial replay is traced to.
type Diagnosis struct {
	Cause  string `json:"cause"`
	Detail string `json:"detail"`
}

// OffloadEvidence is the run's offload evidence up to a replay the diagnosis read.
type OffloadEvidence struct {
	StoreBytes         *float64 `json:"store_bytes_delta"`
	StoreTokens        *float64 `json:"store_tokens_delta,omitempty"`
	StoresSkipped      *float64 `json:"stores_skipped_delta"`
	AllocationFailures *float64 `json:"allocation_failures_delta"`
	TierHoldsSequence  string   `json:"cpu_tier_holds_sequence,omitempty"`
	TierTokens         float64  `json:"cpu_tier_tokens,omitempty"`
	UniqueTokens       int      `json:"unique_tokens,omitempty"`
	RoutedElsewhere    *bool    `json:"routed_elsewhere,omitempty"`
	OriginalReplica    string   `json:"original_replica,omitempty"`
	ReplayReplica      string   `json:"replay_replica,omitempty"`
}

// Capacity is the capacity math of one replay and what it implies (capacity.Assess fills
// it).
type Capacity struct {
	Setup        Setup `json:"setup"`
	UniqueTokens int   `json:"unique_tokens_since_replayed_request"`
	// HostTokensNeeded is, for SingleSlot, the prompt state the host tier must hold for the
	// replayed prompt to survive: every prompt from it on is saved whole when it leaves the slot.
	HostTokensNeeded  int     `json:"host_tier_tokens_needed,omitempty"`
	TokenCounting     string  `json:"token_counting"`
	GPUPoolBytes      float64 `json:"gpu_pool_bytes,omitempty"`
	CPUTierBytes      float64 `json:"cpu_tier_bytes"`
	CPUTierTokens     float64 `json:"cpu_tier_tokens,omitempty"`
	EvictionPressure  Answer  `json:"eviction_pressure"`
	TierLargerThanGPU Answer  `json:"cpu_tier_larger_than_gpu_pool"`
	TierHoldsSequence Answer  `json:"cpu_tier_holds_sequence"`
	// CanProveReload is yes only when all three hold.
	CanProveReload Answer `json:"can_prove_reload"`
	// Findings say each conclusion as a sentence, for the console and the record.
	Findings []string `json:"findings"`
}

// Setup is what is known of the server's KV capacity, each figure with its source. Zero
// means unknown.
type Setup struct {
	// Topology is the engine's device cache shape; "" reads as SharedPool (older records).
	Topology Topology `json:"topology,omitempty"`
	// Slots is a SingleSlot engine's slot count (0: unknown, assumed 1, the setup the
	// verdict needs).
	Slots int `json:"slots,omitempty"`
	// GPUKVTokens is the device KV pool in tokens; for SingleSlot, one slot's context.
	GPUKVTokens       int     `json:"gpu_kv_tokens"`
	GPUKVTokensSource string  `json:"gpu_kv_tokens_source"`
	CPUOffloadGiB     float64 `json:"cpu_offload_gib"`
	// CPUOffloadGiBSource names where the host tier's size came from.
	CPUOffloadGiBSource string `json:"cpu_offload_gib_source,omitempty"`
	// HostTierUnit is the unit the engine's flag sizes the host tier in ("GiB", "MiB"), for
	// sentences only: CPUOffloadGiB always holds GiB.
	HostTierUnit       string  `json:"host_tier_unit,omitempty"`
	StoreBytesPerToken float64 `json:"store_bytes_per_token"`
	StoreBytesSource   string  `json:"store_bytes_per_token_source"`
	// HostTierTokens is the host tier's size in tokens where the server reports it so
	// (SGLang's hicache_host_total_tokens); it then stands for CPUOffloadGiB over the bytes
	// per stored token. 0 when unknown.
	HostTierTokens       int    `json:"host_tier_tokens,omitempty"`
	HostTierTokensSource string `json:"host_tier_tokens_source,omitempty"`
}

// Answer is yes, no, or unknown when an input is missing.
type Answer string

// Answers.
const (
	AnswerYes     Answer = "yes"
	AnswerNo      Answer = "no"
	AnswerUnknown Answer = "unknown"
)

// Topology is how an engine keeps KV state on the device, which decides what evicts a prompt
// (package capacity names the values).
type Topology string

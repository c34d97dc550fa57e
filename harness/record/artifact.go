// Package record defines what a kvbench run writes: one raw artifact per step (every request
// with its timings, usage, prompt identity, counters before/after/delta, sampled peaks and
// verdict) and the run record, schema anvil-serving.kv-offload-replay/v1, whose sections are
// computed from the artifacts and keep the field names of the seed records in
// testdata/reference (schemas: docs/records.md). Files are written atomically and never over
// an earlier run's.
package record

import (
	"encoding/json"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Schemas written by kvbench.
const (
	RunSchema  = "anvil-serving.kv-offload-replay/v1"
	StepSchema = "anvil-serving.kvbench-step/v1"
)

// Delta scopes: with concurrency 1 each request is isolated and has its own counter deltas;
// with more, requests overlap and only the step's delta is meaningful.
const (
	ScopeRequest = "request"
	ScopeStep    = "step"
)

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
func (s *Samples) Merge(o Samples) {
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

// Request is one sent request with everything measured about it.
type Request struct {
	Step          string               `json:"step"`
	IndexInStep   int                  `json:"index_in_step"`
	Ordinal       int                  `json:"ordinal"`
	Replay        bool                 `json:"replay,omitempty"`
	ReplayOf      *scenarios.ReplayRef `json:"replay_of,omitempty"`
	PlannedTokens int                  `json:"planned_tokens"`
	Prompt        prompts.Prompt       `json:"prompt"`
	Result        client.Result        `json:"result"`
	Isolation     *Isolation           `json:"isolation,omitempty"`
	Counters      *metrics.Window      `json:"counters,omitempty"` // nil when the step's scope is "step"
	CountersError string               `json:"counters_error,omitempty"`
	Samples       Samples              `json:"samples"`
	Verdict       *verdict.Replay      `json:"verdict,omitempty"` // replays only
	Turn          *Turn                `json:"turn,omitempty"`    // conversations only
	// Replica is the replica whose counters moved around this request (the one that served
	// it); omitted when the server has one replica or the request was not isolated.
	Replica *metrics.Attribution `json:"replica,omitempty"`
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
	// Transport read the chat streams: "event loop" or "net/http".
	Transport string `json:"transport,omitempty"`
}

// StepArtifact is the raw record of one step: the source of truth the run record's section
// is computed from.
type StepArtifact struct {
	Schema      string `json:"schema"`
	Scenario    string `json:"scenario"`
	Step        string `json:"step"`
	Kind        string `json:"kind"` // "sequence", "replay" or "conversation"
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
	// Counters span the whole step: before its first request, after its last.
	Counters *metrics.Window `json:"counters,omitempty"`
	// CountersError says why the step's counters are missing: a scrape failed.
	CountersError string  `json:"counters_error,omitempty"`
	Samples       Samples `json:"samples"`
	// Capacity is the replay's capacity math with measured tokens and bytes.
	Capacity *capacity.Assessment `json:"capacity,omitempty"`
	// Conversation is a conversation step's counter series.
	Conversation *ConversationTrace `json:"conversation,omitempty"`
}

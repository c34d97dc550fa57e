package record

import (
	"github.com/anvil-serving/kvbench/harness/stats"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// SeedRule says how a repetition's prompts differ from the first's. A server's caches cannot
// be reset, so sending the same bytes again would turn the cold sequence into cache hits.
const SeedRule = "repetition k builds its prompts with seed = prompt.seed + k: the same shapes with fresh bytes, so every repetition's sequence is cold and its replay meaningful"

// RepeatMetrics are the per-request measurements summarized across repetitions.
type RepeatMetrics struct {
	TimeToFirstOutputMS             stats.Summary `json:"time_to_first_output_ms"`
	DecodeTokensPerSecond           stats.Summary `json:"decode_tokens_per_second"`
	EffectivePrefillTokensPerSecond stats.Summary `json:"effective_prefill_tokens_per_second"`
	CachedFraction                  stats.Summary `json:"cached_fraction"`
	LoadBytesPerToken               stats.Summary `json:"load_bytes_per_token"`
}

// RepeatRequest is one request position of a step (index in step) across repetitions.
type RepeatRequest struct {
	IndexInStep int           `json:"index_in_step"`
	Metrics     RepeatMetrics `json:"metrics"`
}

// RepeatStep summarizes one step across repetitions. For a replay, Verdicts lists each
// repetition's verdict in order: a disagreement is reported, never averaged away.
type RepeatStep struct {
	Step          string            `json:"-"`
	Kind          string            `json:"kind"`
	Requests      []RepeatRequest   `json:"requests"`
	Verdicts      []verdict.Verdict `json:"verdicts,omitempty"`
	VerdictsAgree *bool             `json:"verdicts_agree,omitempty"`
	StoreBytes    stats.Summary     `json:"gpu_to_cpu_bytes_delta"`
}

// RepeatsSection is the run record's "repeats" section.
type RepeatsSection struct {
	Count       int          `json:"count"`
	SeedRule    string       `json:"seed_rule"`
	Repetitions []Repetition `json:"repetitions"`
	// Steps summarizes each step, in step order (an object keyed by step id).
	Steps         RepeatSteps `json:"steps"`
	VerdictsAgree bool        `json:"verdicts_agree"`
	// Disagreements names each replay whose repetitions reached different verdicts.
	Disagreements []string `json:"disagreements"`
}

// RepeatSteps are the steps' summaries; their JSON is an object keyed by step id.
type RepeatSteps []RepeatStep

// MarshalJSON writes the steps keyed by id, in step order.
func (s RepeatSteps) MarshalJSON() ([]byte, error) {
	return marshalKeyed(s, func(st RepeatStep) string { return st.Step })
}

// UnmarshalJSON reads the steps keyed by id, in order.
func (s *RepeatSteps) UnmarshalJSON(data []byte) error {
	steps, err := unmarshalKeyed(data, func(st *RepeatStep, id string) { st.Step = id })
	*s = steps
	return err
}

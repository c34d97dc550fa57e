package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/units"
)

// SeedRule says how a repetition's prompts differ from the first's. A server's caches cannot
// be reset, so sending the same bytes again would turn the cold sequence into cache hits.
const SeedRule = "repetition k builds its prompts with seed = prompt.seed + k: the same shapes with fresh bytes, so every repetition's sequence is cold and its replay meaningful"

// RepeatMetrics are the per-request measurements summarized across repetitions.
type RepeatMetrics struct {
	TimeToFirstOutputMS             Summary `json:"time_to_first_output_ms"`
	DecodeTokensPerSecond           Summary `json:"decode_tokens_per_second"`
	EffectivePrefillTokensPerSecond Summary `json:"effective_prefill_tokens_per_second"`
	CachedFraction                  Summary `json:"cached_fraction"`
	LoadBytesPerToken               Summary `json:"load_bytes_per_token"`
}

// RepeatRequest is one request position of a step (index in step) across repetitions.
type RepeatRequest struct {
	IndexInStep int           `json:"index_in_step"`
	Metrics     RepeatMetrics `json:"metrics"`
}

// RepeatStep summarizes one step across repetitions. For a replay, Verdicts lists each
// repetition's verdict in order: a disagreement is reported, never averaged away.
type RepeatStep struct {
	Step          string          `json:"-"`
	Kind          string          `json:"kind"`
	Requests      []RepeatRequest `json:"requests"`
	Verdicts      []Verdict       `json:"verdicts,omitempty"`
	VerdictsAgree *bool           `json:"verdicts_agree,omitempty"`
	StoreBytes    Summary         `json:"gpu_to_cpu_bytes_delta"`
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

// Summary is n measurements of one value. Absent counts the repetitions where the value was
// not measured (a counter the server does not expose, a failed request): they are reported,
// never counted as 0.
type Summary struct {
	N      int      `json:"n"`
	Absent int      `json:"absent,omitempty"`
	Median *float64 `json:"median"`
	Min    *float64 `json:"min"`
	Max    *float64 `json:"max"`
	// Spread is max - min; RelativeSpread is Spread / |median| (nil when the median is 0).
	Spread         *float64  `json:"spread"`
	RelativeSpread *float64  `json:"relative_spread"`
	Values         []float64 `json:"values"`
}

// Text is a median with its relative spread when repeated: "120.3 (spread 4.1%, n=3)";
// "absent" when nothing was measured.
func (s Summary) Text() string {
	if s.N == 0 {
		return "absent"
	}
	text := units.Number(*s.Median)
	if s.N > 1 && s.RelativeSpread != nil {
		text += fmt.Sprintf(" (spread %s, n=%d)", units.Share(*s.RelativeSpread), s.N)
	}
	return text
}

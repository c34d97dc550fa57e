package record

import (
	"encoding/json"
	"fmt"
)

// The parts of a scenario the record keeps as its own fields: package scenarios reads them
// from TOML (hence the toml tags) and the record writes them to JSON.

// Curve is a reload curve as it was expanded: the sizes, where its bounds came from, the
// eviction each point sends, and the steps of each point. The record keeps it, and derives
// the curve's section from the points' replays.
type Curve struct {
	ID         string  `json:"id"`
	FromTokens int     `json:"from_tokens"`
	ToTokens   int     `json:"to_tokens"`
	Factor     float64 `json:"factor"`
	// MaxModelLen and GPUKVTokens are what the sizes and the eviction were worked out from,
	// each with its source.
	MaxModelLen       int    `json:"max_model_len"`
	MaxModelLenSource string `json:"max_model_len_source"`
	GPUKVTokens       int    `json:"gpu_kv_tokens"`
	GPUKVTokensSource string `json:"gpu_kv_tokens_source"`
	// EvictionTokens is the unique tokens sent after each point's prompt to push it out of
	// GPU memory (the pool plus a margin), in EvictionRequests prompts.
	EvictionTokens   int          `json:"eviction_unique_tokens"`
	EvictionRequests int          `json:"eviction_requests"`
	Points           []CurveSteps `json:"points"`
}

// CurveSteps are one point's steps: the sequence that stores and evicts its prompt, and the
// replay of that prompt.
type CurveSteps struct {
	Tokens   int    `json:"tokens"`
	Sequence string `json:"sequence_step"`
	Replay   string `json:"replay_step"`
}

// ReplayRef names request Request (0-based) of step Step.
type ReplayRef struct {
	Step    string `toml:"step" json:"step"`
	Request int    `toml:"request" json:"request"`
}

// Gate is an expectation checked at the end of a run; a failed gate exits with its own code.
type Gate struct {
	Step                   string  `toml:"step" json:"step"`
	Verdict                Verdict `toml:"verdict" json:"verdict,omitempty"`
	MinCachedFraction      float64 `toml:"min_cached_fraction" json:"min_cached_fraction,omitempty"`
	MaxTimeToFirstOutputMS float64 `toml:"max_time_to_first_output_ms" json:"max_time_to_first_output_ms,omitempty"`
	MinDecodeTokensPerSec  float64 `toml:"min_decode_tokens_per_second" json:"min_decode_tokens_per_second,omitempty"`
	RequireStore           bool    `toml:"require_store" json:"require_store,omitempty"`
	RequireValidSetup      bool    `toml:"require_valid_setup" json:"require_valid_setup,omitempty"`
	// RequireIdenticalOutput: the replay's output must be its original's, token for token
	// (or byte for byte where the engine returns no token ids), at temperature 0.
	RequireIdenticalOutput bool `toml:"require_identical_output" json:"require_identical_output,omitempty"`
	MaxFailedRequests      *int `toml:"max_failed_requests" json:"max_failed_requests,omitempty"`
	// RequireOnTime: the open-loop trace step did not fall behind its trace (its section has
	// no dispatch_behind).
	RequireOnTime bool `toml:"require_on_time" json:"require_on_time,omitempty"`
	// Implicit marks the gate kvbench adds to a step whose requests failed when no gate of
	// the scenario sets max_failed_requests for it (never written in a scenario file).
	Implicit bool `toml:"-" json:"implicit,omitempty"`
}

// Model, Runtime and Source are a scenario's free metadata, copied into the record.
type Model struct {
	Repo       string `toml:"repo" json:"repo"`
	Revision   string `toml:"revision" json:"revision"`
	ServedName string `toml:"served_name" json:"served_name"`
}

// Runtime is the engine image and recipe a run used.
type Runtime struct {
	Image  string `toml:"image" json:"image"`
	Engine string `toml:"engine" json:"engine"`
	Recipe string `toml:"recipe" json:"recipe"`
}

// Source is a published reference a scenario cites.
type Source struct {
	URL            string `toml:"url" json:"url"`
	ObservedDate   string `toml:"observed_date" json:"observed_date"`
	EvidenceType   string `toml:"evidence_type" json:"evidence_type"`
	DecisionImpact string `toml:"decision_impact" json:"decision_impact"`
}

// scenarioView is what decoding a record needs of the scenario it keeps as written: each
// step's kind (a section is decoded by its step's kind) and the study key a control run's
// section is written under.
type scenarioView struct {
	Steps []struct {
		ID     string     `json:"id"`
		Kind   string     `json:"kind"`
		Replay *ReplayRef `json:"replay"`
	} `json:"steps"`
	Study struct {
		Key  string `json:"key"`
		Role string `json:"role"`
	} `json:"study"`
}

// view decodes what the record needs of its scenario; nil when it has none.
func (r *Run) view() (*scenarioView, error) {
	if len(r.Scenario) == 0 || string(r.Scenario) == "null" {
		return nil, nil
	}
	var v scenarioView
	if err := json.Unmarshal(r.Scenario, &v); err != nil {
		return nil, fmt.Errorf("scenario: %w", err)
	}
	return &v, nil
}

// step returns the scenario's step id: its kind and whether it replays; ok false when the
// scenario has no such step.
func (v *scenarioView) step(id string) (kind string, replay, ok bool) {
	if v == nil {
		return "", false, false
	}
	for _, st := range v.Steps {
		if st.ID == id {
			return st.Kind, st.Replay != nil, true
		}
	}
	return "", false, false
}

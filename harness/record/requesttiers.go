package record

// RequestTiers is a replayed request's prompt tokens by where they came from, as the verdict
// settled them, and whether the parts add up to the prompt (verdict's conservation check).
// A nil part is one no counter or response gave: absent, never 0.
type RequestTiers struct {
	GPU    *float64 `json:"gpu"`
	Host   *float64 `json:"host"`
	Disk   *float64 `json:"disk"`
	Remote *float64 `json:"remote"`
	// Recomputed are the prompt tokens the server computed; RecomputedFrom names the source
	// (a counter of computed tokens, the prompt and cached-token counters, or usage).
	Recomputed     *float64 `json:"recomputed"`
	RecomputedFrom string   `json:"recomputed_from,omitempty"`
	// Sum is the parts' sum, PromptTokens usage's prompt tokens; AddsUp says whether they
	// agree within Tolerance (nil when a part needed for the sum is absent).
	Sum          *float64 `json:"sum"`
	PromptTokens *int     `json:"prompt_tokens"`
	AddsUp       *bool    `json:"adds_up"`
	Tolerance    float64  `json:"tolerance"`
}

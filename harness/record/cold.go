package record

import ()

// WarmCaches is a cold step's warm-cache finding as the record keeps it (verdict.ColdCaches):
// set only when the step's requests came back cached beyond what the run could have cached.
type WarmCaches struct {
	Requests             int     `json:"requests"`
	Of                   int     `json:"of"`
	CachedTokens         float64 `json:"cached_tokens"`
	PromptTokens         float64 `json:"prompt_tokens"`
	CachedBeyondReusable float64 `json:"cached_beyond_reusable_tokens"`
	By                   string  `json:"by"`
	Reason               string  `json:"reason"`
}

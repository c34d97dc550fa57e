package record

// WarmCaches is the finding that a cold step came back cached beyond anything the run itself
// could have cached (verdict.ColdCaches): the server's caches held these prompts before the
// run began (a long-lived server whose tiers still hold the same bytes from an earlier run).
// The step measured cache hits, not the stores, evictions and recomputes it was meant to.
type WarmCaches struct {
	// Step is the cold step's id; the record keeps the finding under its step.
	Step string `json:"-"`
	// Requests of Of were served warm; when only the step's hits are known, Requests is Of.
	Requests int `json:"requests"`
	Of       int `json:"of"`
	// CachedTokens are the cached tokens of those requests, of their PromptTokens, and
	// CachedBeyondReusable the cached tokens beyond their reusable prefixes.
	CachedTokens         float64 `json:"cached_tokens"`
	PromptTokens         float64 `json:"prompt_tokens"`
	CachedBeyondReusable float64 `json:"cached_beyond_reusable_tokens"`
	By                   string  `json:"by"`
	// Reason says the finding in words, with what to do about it.
	Reason string `json:"reason"`
}

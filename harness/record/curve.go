package record

// ReloadCurve is a reload curve's section: each point's reload against its recompute, and
// the prompt size from which reloading pays.
type ReloadCurve struct {
	ID     string       `json:"-"`
	Curve  Curve        `json:"curve"`
	Points []CurvePoint `json:"points"`
	// BreakEvenTokens is the prompt size at which the reload and the recompute take as long,
	// interpolated (in log size) between the last point where recomputing was at least as
	// fast and the first above it where reloading won for good; null when the points never
	// cross, and BreakEven says which side won everywhere.
	BreakEvenTokens *float64 `json:"break_even_tokens"`
	BreakEven       string   `json:"break_even"`
}

// CurvePoint is one size of a reload curve.
type CurvePoint struct {
	Tokens       int      `json:"planned_tokens"`
	Step         string   `json:"replay_step"`
	PromptTokens *int     `json:"prompt_tokens"`
	ReplayTTFTMS *float64 `json:"replay_time_to_first_output_ms"`
	TwinTTFTMS   *float64 `json:"cold_twin_time_to_first_output_ms"`
	// Gain is the cold twin's time to first output over the replay's.
	Gain        *float64 `json:"gain"`
	LoadBytes   *float64 `json:"load_bytes"`
	LoadSeconds *float64 `json:"load_seconds"`
	Verdict     Verdict  `json:"verdict"`
	Identical   *bool    `json:"identical_output"`
	// Counted: the point enters the break-even (its replay was a reload and its twin not
	// shown to hit a cache); Excluded says why not.
	Counted  bool   `json:"counted"`
	Excluded string `json:"excluded,omitempty"`
}

// reloadCurves encodes the curves as one object keyed by curve id.
type reloadCurvesJSON []ReloadCurve

func (cs reloadCurvesJSON) MarshalJSON() ([]byte, error) {
	return marshalKeyed(cs, func(c ReloadCurve) string { return c.ID })
}

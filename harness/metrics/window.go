package metrics

// Window is two scrapes around a request or step and their difference: the evidence one
// measurement rests on.
type Window struct {
	Before Snapshot `json:"before"`
	After  Snapshot `json:"after"`
	Delta  Delta    `json:"delta"`
}

// NewWindow diffs two snapshots.
func NewWindow(before, after Snapshot) *Window {
	return &Window{Before: before, After: after, Delta: Diff(before, after)}
}

// BeforeValue is c's reading before, nil when the server did not expose it.
func (w *Window) BeforeValue(c Counter) *float64 { return w.Before.Counters[c].Ptr() }

// AfterValue is c's reading after, nil when the server did not expose it.
func (w *Window) AfterValue(c Counter) *float64 { return w.After.Counters[c].Ptr() }

// DeltaValue is c's change, nil when absent on either side or invalid.
func (w *Window) DeltaValue(c Counter) *float64 { return w.Delta.Ptr(c) }

// Ptr is the reading as a pointer, nil when absent: absent is never 0.
func (r Reading) Ptr() *float64 {
	if !r.Present {
		return nil
	}
	v := r.Value
	return &v
}

// Ptr is c's usable delta as a pointer, nil when it cannot be used (see Value).
func (d Delta) Ptr(c Counter) *float64 {
	v, ok := d.Value(c)
	if !ok {
		return nil
	}
	return &v
}

// PerToken divides one counter's delta by another's, e.g. load bytes per external hit; nil
// when either is absent or no token moved.
func (d Delta) PerToken(bytes, tokens Counter) *float64 {
	b, ok1 := d.Value(bytes)
	t, ok2 := d.Value(tokens)
	if !ok1 || !ok2 || t <= 0 {
		return nil
	}
	v := b / t
	return &v
}

// ComputedTokens is the prompt tokens a delta computed (not served from any cache): the
// local_compute source where the server splits by source, else queries minus both hits.
func (d Delta) ComputedTokens() (float64, bool) {
	if v, ok := d.Value(PromptTokensLocalCompute); ok {
		return v, true
	}
	q, ok1 := d.Value(GPUPrefixQueries)
	g, ok2 := d.Value(GPUPrefixHits)
	if !ok1 || !ok2 {
		return 0, false
	}
	e, _ := d.Value(ExternalPrefixHits)
	return q - g - e, true
}

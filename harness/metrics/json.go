package metrics

import "encoding/json"

// JSON shapes. An absent reading marshals its value as null and "present": false, so a
// script can never mistake it for 0:
//
//	{"value": 163840, "present": true, "source": "vllm:prefix_cache_hits_total"}
//	{"value": null, "present": false}
//
// A counter delta is flat; before, after and delta are null where a side is absent:
//
//	{"before": 0, "after": 98304, "delta": 98304, "present": true, "decreased": false,
//	 "source": "vllm:external_prefix_cache_hits_total"}

type readingJSON struct {
	Value      *float64 `json:"value"`
	Present    bool     `json:"present"`
	Source     string   `json:"source,omitempty"`
	Unreadable string   `json:"unreadable,omitempty"` // "NaN", "+Inf": served, but no number
}

// MarshalJSON writes an absent reading's value as null.
func (r Reading) MarshalJSON() ([]byte, error) {
	return json.Marshal(readingJSON{Value: r.Ptr(), Present: r.Present, Source: r.Source, Unreadable: r.Unreadable})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Reading) UnmarshalJSON(data []byte) error {
	var j readingJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*r = Reading{Present: j.Present && j.Value != nil, Source: j.Source, Unreadable: j.Unreadable}
	if r.Present {
		r.Value = *j.Value
	}
	return nil
}

type counterDeltaJSON struct {
	Before       *float64 `json:"before"`
	After        *float64 `json:"after"`
	Delta        *float64 `json:"delta"`
	Present      bool     `json:"present"`
	Decreased    bool     `json:"decreased"`
	Reason       string   `json:"reason,omitempty"`
	Source       string   `json:"source,omitempty"`
	SourceBefore string   `json:"source_before,omitempty"` // only when it differs from source
}

// MarshalJSON writes the flat shape documented above.
func (cd CounterDelta) MarshalJSON() ([]byte, error) {
	j := counterDeltaJSON{
		Before:    cd.Before.Ptr(),
		After:     cd.After.Ptr(),
		Present:   cd.Present,
		Decreased: cd.Decreased,
		Reason:    cd.Reason,
		Source:    cd.After.Source,
	}
	if cd.Present {
		delta := cd.Delta
		j.Delta = &delta
	}
	if cd.Before.Source != cd.After.Source {
		j.SourceBefore = cd.Before.Source
	}
	return json.Marshal(j)
}

// UnmarshalJSON reads what MarshalJSON writes.
func (cd *CounterDelta) UnmarshalJSON(data []byte) error {
	var j counterDeltaJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	sourceBefore := j.SourceBefore
	if sourceBefore == "" && j.Before != nil {
		sourceBefore = j.Source
	}
	*cd = CounterDelta{
		Before:    readingOf(j.Before, sourceBefore),
		After:     readingOf(j.After, j.Source),
		Present:   j.Present && j.Delta != nil,
		Decreased: j.Decreased,
		Reason:    j.Reason,
	}
	if cd.Present {
		cd.Delta = *j.Delta
	}
	return nil
}

func readingOf(v *float64, source string) Reading {
	if v == nil {
		return Reading{}
	}
	return Reading{Value: *v, Present: true, Source: source}
}

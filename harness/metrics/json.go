package metrics

import "encoding/json"

// JSON shapes. An absent reading marshals its value as null and "present": false, so a
// script can never mistake it for 0:
//
//	{"value": 163840, "present": true, "source": "vllm:prefix_cache_hits_total"}
//	{"value": null, "present": false}
//

type readingJSON struct {
	Value      *float64 `json:"value"`
	Present    bool     `json:"present"`
	Source     string   `json:"source,omitempty"`
	Unreadable string   `json:"unreadable,omitempty"` // "NaN", "+Inf": served, but no number
	Resolution float64  `json:"resolution,omitempty"` // step of a value printed with few digits
	Note       string   `json:"note,omitempty"`       // ranks that disagree, a sum over ranks (Parallelism)
}

// MarshalJSON writes an absent reading's value as null.
func (r Reading) MarshalJSON() ([]byte, error) {
	return json.Marshal(readingJSON{Value: r.Ptr(), Present: r.Present, Source: r.Source, Unreadable: r.Unreadable, Resolution: r.Resolution, Note: r.Note})
}

// UnmarshalJSON reads what MarshalJSON writes.
func (r *Reading) UnmarshalJSON(data []byte) error {
	var j readingJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*r = Reading{Present: j.Present && j.Value != nil, Source: j.Source, Unreadable: j.Unreadable, Resolution: j.Resolution, Note: j.Note}
	if r.Present {
		r.Value = *j.Value
	}
	return nil
}

package record

import (
	"encoding/json"
)

// Records written before the record owned its schema (step schema v1) differ in three
// places, read here: a counter window was {before: snapshot, after: snapshot, delta}, of
// which only the delta is kept; a replay's capacity math sat on its step, not its verdict;
// and a verdict carried no setup validity or interpretation, which are rebuilt from them.

// UnmarshalJSON reads a span, also in the v1 window shape.
func (c *Counters) UnmarshalJSON(data []byte) error {
	type plain Counters
	var probe struct {
		Delta *json.RawMessage `json:"delta"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return err
	}
	if probe.Delta != nil {
		data = *probe.Delta
	}
	return json.Unmarshal(data, (*plain)(c))
}

// legacySlot is v1's slot attribution, whose common prefix sat in its evidence.
type legacySlot struct {
	LiveTokens *int `json:"live_slot_tokens"`
	HostTokens *int `json:"host_cache_tokens"`
	Evidence   struct {
		CommonPrefix *int `json:"common_prefix_with_previous_prompt"`
		Slots        int  `json:"slots"`
		Tolerance    int  `json:"tolerance_tokens"`
	} `json:"evidence"`
}

// UnmarshalJSON reads a verdict, also in the v1 shape.
func (v *Decision) UnmarshalJSON(data []byte) error {
	type plain Decision
	var probe struct {
		SetupValid *string     `json:"setup_valid"`
		Slot       *legacySlot `json:"slot_attribution"`
	}
	if err := json.Unmarshal(data, &probe); err != nil {
		return err
	}
	if probe.SetupValid != nil {
		return json.Unmarshal(data, (*plain)(v))
	}
	var old struct {
		plain
		Slot *legacySlot `json:"slot_attribution"`
	}
	if err := json.Unmarshal(data, &old); err != nil {
		return err
	}
	*v = Decision(old.plain)
	if s := old.Slot; s != nil {
		v.Slot = &SlotAttribution{LiveTokens: s.LiveTokens, HostTokens: s.HostTokens, CommonPrefix: s.Evidence.CommonPrefix, Slots: s.Evidence.Slots, Tolerance: s.Evidence.Tolerance}
	}
	v.SetupValid = AnswerUnknown
	v.FromV1 = true
	return nil
}

// UnmarshalJSON reads a step artifact of either schema.
func (a *StepArtifact) UnmarshalJSON(data []byte) error {
	type plain StepArtifact
	var old struct {
		plain
		Capacity *Capacity `json:"capacity"`
	}
	if err := json.Unmarshal(data, &old); err != nil {
		return err
	}
	*a = StepArtifact(old.plain)
	if a.Schema != StepSchemaV1 {
		for _, q := range a.Requests {
			if q.Verdict != nil {
				q.Verdict.FromV1 = false // only a v1 step's verdicts are worded anew
			}
		}
		return nil
	}
	if a.DeltaScope != ScopeStep {
		a.Counters, a.Samples = nil, nil // derived from the requests now
	}
	for i := range a.Requests {
		if v := a.Requests[i].Verdict; v != nil && v.FromV1 {
			v.Capacity = old.Capacity
			if c := old.Capacity; c != nil {
				v.SetupValid = c.CanProveReload
			}
		}
	}
	return nil
}

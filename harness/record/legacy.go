package record

import (
	"encoding/json"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/verdict"
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
func (v *Verdict) UnmarshalJSON(data []byte) error {
	type plain Verdict
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
	*v = Verdict(old.plain)
	if s := old.Slot; s != nil {
		v.DecidedBy = verdict.BySlot
		v.Slot = &SlotAttribution{LiveTokens: s.LiveTokens, HostTokens: s.HostTokens, CommonPrefix: s.Evidence.CommonPrefix, Slots: s.Evidence.Slots, Tolerance: s.Evidence.Tolerance}
	}
	v.SetupValid = capacity.Unknown
	v.legacy = true
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
		return nil
	}
	if a.DeltaScope != ScopeStep {
		a.Counters, a.Samples = nil, nil // derived from the requests now
	}
	for i := range a.Requests {
		if v := a.Requests[i].Verdict; v != nil && v.legacy {
			v.rebuild(old.Capacity)
		}
	}
	return nil
}

// rebuild fills a v1 verdict's setup validity and interpretation from its step's capacity
// math, as v1 computed them.
func (v *Verdict) rebuild(c *Capacity) {
	v.Capacity = c
	var a *capacity.Assessment
	if c != nil {
		a = assessmentOf(c)
		v.SetupValid = c.CanProveReload
	}
	d := verdict.Decision{Verdict: v.Verdict, Reason: v.Reason, DecidedBy: v.DecidedBy}
	for _, g := range v.Diagnosis {
		d.Diagnosis = append(d.Diagnosis, verdict.Diagnosis{Cause: g.Cause, Detail: g.Detail})
	}
	v.Interpretation = d.Interpret(a)
	v.legacy = false
}

// assessmentOf turns a recorded assessment back into capacity's, for its sentences.
func assessmentOf(c *Capacity) *capacity.Assessment {
	s := c.Setup
	return &capacity.Assessment{
		Setup: capacity.Setup{Topology: s.Topology, Slots: s.Slots, GPUKVTokens: s.GPUKVTokens, GPUKVTokensSource: s.GPUKVTokensSource,
			CPUOffloadGiB: s.CPUOffloadGiB, CPUOffloadGiBSource: s.CPUOffloadGiBSource, HostTierUnit: s.HostTierUnit, StoreBytesPerToken: s.StoreBytesPerToken, StoreBytesSource: s.StoreBytesSource,
			HostTierTokens: s.HostTierTokens, HostTierTokensSource: s.HostTierTokensSource},
		UniqueTokens: c.UniqueTokens, HostTokensNeeded: c.HostTokensNeeded, TokenCounting: c.TokenCounting,
		GPUPoolBytes: c.GPUPoolBytes, CPUTierBytes: c.CPUTierBytes, CPUTierTokens: c.CPUTierTokens,
		EvictionPressure: c.EvictionPressure, TierLargerThanGPU: c.TierLargerThanGPU, TierHoldsSequence: c.TierHoldsSequence,
		CanProveReload: c.CanProveReload, Findings: c.Findings,
	}
}

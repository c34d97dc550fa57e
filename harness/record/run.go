package record

import (
	"encoding/json"
	"fmt"
)

// Run statuses. A live run's run.json says running; a reader that finds running reports
// incomplete (the run did not finish: its process was killed or is still going), which a
// run never writes itself.
const (
	StatusRunning     = "running"
	StatusCompleted   = "completed"
	StatusInterrupted = "interrupted"
	// StatusFailed: the run did less than asked (a repetition could not run, a file could
	// not be written, /metrics died); stop_reason says why, and what did run is kept.
	StatusFailed     = "failed"
	StatusIncomplete = "incomplete"
)

// Run is the run record, run.json (schema anvil-serving.kv-offload-replay/v1): what a run
// measured, one section per step computed from the step artifacts, and what it ran against.
// Its JSON keeps the seed records' layout: each step's section sits under the step's id, and
// a control run's summary under its study key.
type Run struct {
	Schema     string
	ObservedAt string
	Status     string
	StopReason string
	Model      Model
	Runtime    Runtime
	Topology   map[string]any
	Cache      Cache
	// Sections are the steps' sections, in step order.
	Sections []Section
	Repeats  *RepeatsSection
	// Control summarizes a control run (seed 001's offload8_control) under Scenario.Study.Key.
	Control *ControlSection
	// Curves are the reload curves, keyed by curve id under reload_curves (curve.go).
	Curves    []ReloadCurve
	Probes    []ProbeResult
	Gates     []GateResult
	Preflight json.RawMessage
	// Artifacts and References are the record's sources: the files the run wrote, with their
	// sha256, then the scenario's published references.
	Artifacts  []ArtifactRef
	References []Source
	Kvbench    Kvbench
	// Scenario is the scenario the run ran, as package scenarios writes it (derive.Run holds
	// it parsed).
	Scenario json.RawMessage
}

// Section is one step's section: exactly one of Sequence, Replay, Conversation and Trace is
// set.
type Section struct {
	Step         string
	Sequence     *SequenceSection
	Replay       *ReplaySection
	Conversation *ConversationSection
	Trace        *TraceSection
}

func (s Section) value() any {
	switch {
	case s.Replay != nil:
		return s.Replay
	case s.Conversation != nil:
		return s.Conversation
	case s.Trace != nil:
		return s.Trace
	}
	return s.Sequence
}

// Repetition is one pass over a scenario's steps as the repeats section lists it;
// repetition 0 is the run's main record.
type Repetition struct {
	Index     int      `json:"repetition"`
	Seed      int64    `json:"seed"`
	Artifacts []string `json:"artifacts"`
	Status    string   `json:"status"`
}

// Kvbench names the kvbench that wrote a record.
type Kvbench struct {
	Version string `json:"version"`
}

// Section returns step id's section, or nil.
func (r *Run) Section(id string) *Section {
	for i := range r.Sections {
		if r.Sections[i].Step == id {
			return &r.Sections[i]
		}
	}
	return nil
}

// Replay returns step id's replay section, or nil when id is not a measured replay.
func (r *Run) Replay(id string) *ReplaySection {
	if s := r.Section(id); s != nil {
		return s.Replay
	}
	return nil
}

// Sequence returns step id's sequence section, or nil.
func (r *Run) Sequence(id string) *SequenceSection {
	if s := r.Section(id); s != nil {
		return s.Sequence
	}
	return nil
}

// controlKey is the key the control section is written under ("" when the run is no
// control, or its scenario does not read).
func (r *Run) controlKey() string {
	if v, _ := r.view(); v != nil && v.Study.Role == "control" {
		return v.Study.Key
	}
	return ""
}

// MarshalJSON writes the record in the seed records' key order.
func (r *Run) MarshalJSON() ([]byte, error) {
	var o orderedObject
	o.add("schema", r.Schema)
	o.add("observed_at", r.ObservedAt)
	o.add("status", r.Status)
	if r.StopReason != "" {
		o.add("stop_reason", r.StopReason)
	}
	o.add("model", r.Model)
	o.add("runtime", r.Runtime)
	if r.Topology != nil {
		o.add("topology", r.Topology)
	} else {
		o.add("topology", map[string]any{})
	}
	o.add("cache", r.Cache)
	ids := make([]string, 0, len(r.Sections))
	for _, s := range r.Sections {
		o.add(s.Step, s.value())
		ids = append(ids, s.Step)
	}
	o.add("steps", ids)
	if r.Repeats != nil {
		o.add("repeats", r.Repeats)
	}
	if key := r.controlKey(); key != "" && r.Control != nil {
		o.add(key, r.Control)
	}
	if len(r.Curves) > 0 {
		o.add("reload_curves", reloadCurvesJSON(r.Curves))
	}
	if len(r.Probes) > 0 {
		o.add("probes", probeResults(r.Probes))
	}
	if len(r.Gates) > 0 {
		o.add("gates", r.Gates)
	}
	if r.Preflight != nil {
		o.add("preflight", r.Preflight)
	}
	o.add("sources", sources(r.Artifacts, r.References))
	o.add("kvbench", r.Kvbench)
	o.add("scenario", r.Scenario)
	return o.MarshalJSON()
}

// UnmarshalJSON reads a run record; a step's section is decoded by the scenario's step kind.
func (r *Run) UnmarshalJSON(data []byte) error {
	o, err := decodeObject(data)
	if err != nil {
		return err
	}
	*r = Run{}
	var ids []string
	var srcs []json.RawMessage
	fields := []struct {
		key  string
		into any
	}{
		{"schema", &r.Schema}, {"observed_at", &r.ObservedAt}, {"status", &r.Status},
		{"stop_reason", &r.StopReason}, {"model", &r.Model}, {"runtime", &r.Runtime},
		{"topology", &r.Topology}, {"cache", &r.Cache}, {"steps", &ids}, {"repeats", &r.Repeats},
		{"gates", &r.Gates}, {"preflight", &r.Preflight}, {"sources", &srcs},
		{"kvbench", &r.Kvbench}, {"scenario", &r.Scenario},
	}
	for _, f := range fields {
		if _, err := o.decode(f.key, f.into); err != nil {
			return err
		}
	}
	if raw, ok := o.values["probes"]; ok {
		if r.Probes, err = unmarshalKeyed(raw, func(p *ProbeResult, name string) { p.Name = name }); err != nil {
			return fmt.Errorf("probes: %w", err)
		}
	}
	sc, err := r.view()
	if err != nil {
		return err
	}
	if key := r.controlKey(); key != "" {
		if _, err := o.decode(key, &r.Control); err != nil {
			return err
		}
	}
	if raw, ok := o.values["reload_curves"]; ok {
		if r.Curves, err = unmarshalKeyed(raw, func(c *ReloadCurve, id string) { c.ID = id }); err != nil {
			return fmt.Errorf("reload_curves: %w", err)
		}
	}
	for _, id := range ids {
		raw, ok := o.values[id]
		if !ok {
			return fmt.Errorf("steps lists %q but the record has no such section", id)
		}
		s := Section{Step: id}
		kind, replay, known := sc.step(id)
		if kind == KindConversation {
			err = json.Unmarshal(raw, &s.Conversation)
		} else if kind == KindTrace {
			err = json.Unmarshal(raw, &s.Trace)
		} else if isReplay(replay, known, raw) {
			err = json.Unmarshal(raw, &s.Replay)
		} else {
			err = json.Unmarshal(raw, &s.Sequence)
		}
		if err != nil {
			return fmt.Errorf("%s: %w", id, err)
		}
		r.Sections = append(r.Sections, s)
	}
	for _, raw := range srcs {
		if err := r.addSource(raw); err != nil {
			return fmt.Errorf("sources: %w", err)
		}
	}
	return nil
}

// isReplay tells a replay section from a sequence section: by the scenario's step, or, for
// a record whose scenario lacks the step, by the field only replays have.
func isReplay(replay, known bool, raw json.RawMessage) bool {
	if known {
		return replay
	}
	var probe struct {
		Verdict *string `json:"verdict"`
	}
	return json.Unmarshal(raw, &probe) == nil && probe.Verdict != nil
}

// Trace returns step id's trace section, or nil.
func (r *Run) Trace(id string) *TraceSection {
	if s := r.Section(id); s != nil {
		return s.Trace
	}
	return nil
}

// Conversation returns step id's conversation section, or nil.
func (r *Run) Conversation(id string) *ConversationSection {
	if s := r.Section(id); s != nil {
		return s.Conversation
	}
	return nil
}

// addSource sorts one sources entry: an artifact has a path and a sha256.
func (r *Run) addSource(raw json.RawMessage) error {
	var a ArtifactRef
	if err := json.Unmarshal(raw, &a); err != nil {
		return err
	}
	if a.Path != "" && a.SHA256 != "" {
		r.Artifacts = append(r.Artifacts, a)
		return nil
	}
	var s Source
	if err := json.Unmarshal(raw, &s); err != nil {
		return err
	}
	r.References = append(r.References, s)
	return nil
}

// sources lists artifacts, then references; null when there is neither, as before.
func sources(arts []ArtifactRef, refs []Source) []any {
	var out []any
	for _, a := range arts {
		out = append(out, a)
	}
	for _, s := range refs {
		out = append(out, s)
	}
	return out
}

// probeResults encodes probes keyed by name; a probe run before and after keeps its first
// position and its last result.
type probeResults []ProbeResult

func (ps probeResults) MarshalJSON() ([]byte, error) {
	var uniq []ProbeResult
	at := map[string]int{}
	for _, p := range ps {
		if i, ok := at[p.Name]; ok {
			uniq[i] = p
			continue
		}
		at[p.Name] = len(uniq)
		uniq = append(uniq, p)
	}
	return marshalKeyed(uniq, func(p ProbeResult) string { return p.Name })
}

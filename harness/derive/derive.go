package derive

import (
	"encoding/json"
	"fmt"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// RunInfo is what a run knows besides its steps: who ran what against which server.
type RunInfo struct {
	Scenario       *scenarios.Scenario
	ObservedAt     time.Time
	Status         string
	StopReason     string
	KvbenchVersion string
	ServerVersion  string
	ServedModel    string
	// ModelRoot is what the server says it loaded (vLLM's /v1/models root), the model's repo
	// when the scenario names none.
	ModelRoot string
	Cache     record.Cache
	// Preflight is the preflight report as JSON.
	Preflight json.RawMessage
	Probes    []record.ProbeResult
	Gates     []record.GateResult
	Artifacts []record.ArtifactRef
	// Repeat is how many passes over the steps were asked for (0 or 1: one).
	Repeat int
}

// Run is a run record with the steps its derived parts were computed from: the record is
// what run.json holds, and Derive fills its derived parts from the repetitions.
type Run struct {
	*record.Run
	// Scenario is the scenario the run ran, parsed; the record keeps it as written.
	Scenario *scenarios.Scenario
	// Repetitions are the steps the derived parts were computed from (Derive); a record
	// decoded from run.json alone has none.
	Repetitions []Repetition
	// repeated: more than one pass was asked for, so the record has a repeats section.
	repeated bool
}

// Repetition is one pass over a scenario's steps with the steps themselves; repetition 0 is
// the run's main record.
type Repetition struct {
	record.Repetition
	// Steps are the repetition's steps in step order, and Artifacts[i] the file Steps[i]
	// was written to (its journal's name when the step file was never written).
	Steps []Step
	// Sections are Steps' sections, derived by (*Run).Derive.
	Sections []record.Section
}

// UnmarshalJSON reads run.json into the record, allocating it when r has none, and parses
// its scenario; what is derived stays to Derive.
func (r *Run) UnmarshalJSON(data []byte) error {
	if r.Run == nil {
		r.Run = &record.Run{}
	}
	if err := r.Run.UnmarshalJSON(data); err != nil {
		return err
	}
	r.Scenario = nil
	if raw := r.Run.Scenario; len(raw) > 0 && string(raw) != "null" {
		var sc scenarios.Scenario
		if err := json.Unmarshal(raw, &sc); err != nil {
			return fmt.Errorf("scenario: %w", err)
		}
		r.Scenario = &sc
	}
	return nil
}

// MarshalJSON writes the record with the scenario as it is now; the record itself is left
// as it was, so writing a run never changes it.
func (r Run) MarshalJSON() ([]byte, error) {
	rec := *r.Run
	r.Run = &rec
	if err := r.keepScenario(); err != nil {
		return nil, err
	}
	return rec.MarshalJSON()
}

// keepScenario writes the parsed scenario into the record, which keeps it as JSON.
func (r *Run) keepScenario() error {
	if r.Scenario == nil {
		r.Run.Scenario = nil
		return nil
	}
	raw, err := json.Marshal(r.Scenario)
	if err != nil {
		return fmt.Errorf("scenario: %w", err)
	}
	r.Run.Scenario = raw
	return nil
}

// Of is a record as a derived view of scenario sc, with no repetitions yet (Derive adds
// them).
func Of(r *record.Run, sc *scenarios.Scenario) *Run { return &Run{Run: r, Scenario: sc} }

// Prompts says how the run's prompts relate, for WarmSteps.
func (r *Run) Prompts() Prompts { return PromptsOf(r.Scenario, r.Cache.BlockSize) }

// WarmFindings lists, for every repetition, each cold or trace step that came back cached beyond what
// the run could have cached ("repetition k: " before all but repetition 0's): such a run
// measured an earlier run's caches and compares with nothing.
func (r *Run) WarmFindings() []string {
	var out []string
	for _, rep := range r.Repetitions {
		for _, s := range rep.Sections {
			var w *record.WarmCaches
			switch {
			case s.Sequence != nil:
				w = s.Sequence.WarmCaches
			case s.Trace != nil:
				w = s.Trace.WarmCaches
			}
			if w == nil {
				continue
			}
			why := w.Reason
			if rep.Index > 0 {
				why = fmt.Sprintf("repetition %d: %s", rep.Index, why)
			}
			out = append(out, why)
		}
	}
	return out
}

// NewRun is the run record's header: everything but what is derived from the steps.
func NewRun(info RunInfo) *Run {
	sc := info.Scenario
	r := &Run{Run: &record.Run{
		Schema:     record.RunSchema,
		ObservedAt: info.ObservedAt.UTC().Format(time.RFC3339),
		Status:     info.Status,
		StopReason: info.StopReason,
		Model:      sc.Model,
		Runtime:    sc.Runtime,
		Topology:   sc.Topology,
		Cache:      info.Cache,
		Probes:     info.Probes,
		Gates:      info.Gates,
		Preflight:  info.Preflight,
		Artifacts:  info.Artifacts,
		References: sc.Sources,
		Kvbench:    record.Kvbench{Version: info.KvbenchVersion},
	}, Scenario: sc, repeated: info.Repeat > 1}
	if r.Model.ServedName == "" {
		r.Model.ServedName = info.ServedModel
	}
	if r.Model.Repo == "" {
		r.Model.Repo = info.ModelRoot
	}
	if r.Runtime.Engine == "" {
		r.Runtime.Engine = info.ServerVersion // what /version says, when the scenario names none
	}
	_ = r.keepScenario() // MarshalJSON writes it again, and reports the error there
	return r
}

// Derive computes everything the record holds that the steps decide, once: each
// repetition's sections, the measured bytes per token, the repeats summary and a control
// run's section. The run record, gates, export, claims, compare and report all read what it
// derives; reps keep their sections.
func (r *Run) Derive(reps []Repetition) {
	r.repeated = r.repeated || r.Repeats != nil || len(reps) > 1
	for i := range reps {
		reps[i].Sections = BuildSections(reps[i].Steps, reps[i].Artifacts)
		for k, w := range WarmSteps(reps[i].Steps, r.Prompts()) {
			if s := reps[i].Sections[k].Sequence; s != nil {
				s.WarmCaches = w
			}
			if s := reps[i].Sections[k].Trace; s != nil {
				s.WarmCaches = w
			}
		}
		r.addReloadEvidence(reps[i])
	}
	r.Repetitions = reps
	r.Sections, r.Repeats, r.Control, r.Curves = nil, nil, nil, nil
	r.Cache.StoreBytesPerTokenMeasured, r.Cache.LoadBytesPerTokenMeasured = nil, nil
	if len(reps) == 0 {
		return
	}
	r.Sections = reps[0].Sections
	r.Curves = reloadCurves(r.Scenario, r.Sections)
	r.Cache.StoreBytesPerTokenMeasured, r.Cache.LoadBytesPerTokenMeasured = MeasuredBytesPerToken(reps[0].Steps)
	// A repeated run keeps the repetitions it finished, however few.
	if r.repeated {
		rs := BuildRepeats(reps)
		r.Repeats = &rs
	}
	if sc := r.Scenario; sc.Study.Role == "control" && sc.Study.Key != "" {
		cs := controlSection(sc, r.Cache, reps[0].Steps, r.Sections, reps[0].Artifacts)
		r.Control = &cs
	}
}

package runs

import (
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// recovered is a step found in a run directory but not in its run.json.
type recovered struct {
	k, i int
	art  record.StepArtifact
	ref  record.ArtifactRef
}

func refsOf(rs []recovered) []record.ArtifactRef {
	out := make([]record.ArtifactRef, len(rs))
	for i, rc := range rs {
		out[i] = rc.ref
	}
	return out
}

// recover finds the steps of an unfinished run that run.json does not list: step files
// written after its last replacement, and journals of steps whose file was never written,
// in repetition and step order.
func (r *Run) recover() ([]recovered, error) {
	entries, err := os.ReadDir(r.Dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", r.Dir, err)
	}
	listed := map[string]bool{}
	for _, a := range r.Artifacts {
		listed[a.Path] = true
	}
	present := map[string]bool{}
	for _, e := range entries {
		present[e.Name()] = e.Type().IsRegular()
	}
	var out []recovered
	for _, e := range entries {
		name := e.Name()
		if !e.Type().IsRegular() || listed[name] || name == "run.json" {
			continue
		}
		k, i, ok := parseArtifactName(name)
		if !ok {
			continue
		}
		file := filepath.Join(r.Dir, name)
		switch {
		case strings.HasSuffix(name, journalSuffix):
			stepFile := strings.TrimSuffix(name, journalSuffix) + ".json"
			if listed[stepFile] || present[stepFile] {
				continue // the step ended; its file holds everything
			}
			reqs, err := ReadJournal(file)
			if err != nil {
				return nil, err
			}
			sum, err := FileSHA256(file)
			if err != nil {
				return nil, err
			}
			art := r.fromJournal(i, reqs, file)
			out = append(out, recovered{k, i, art, record.ArtifactRef{Step: art.Step, Path: name, SHA256: sum, Repetition: k}})
		case strings.HasSuffix(name, ".json"):
			sum, err := FileSHA256(file)
			if err != nil {
				return nil, err
			}
			ref := record.ArtifactRef{Path: name, SHA256: sum, Repetition: k}
			art, err := loadArtifact(r.Dir, ref)
			if err != nil {
				return nil, err
			}
			ref.Step = art.Step
			out = append(out, recovered{k, i, art, ref})
		}
	}
	sort.Slice(out, func(a, b int) bool {
		if out[a].k != out[b].k {
			return out[a].k < out[b].k
		}
		return out[a].i < out[b].i
	})
	return out, nil
}

// fromJournal rebuilds step i's artifact from its journal: the requests that ended, the
// step marked interrupted. Its span is then assembled as every step's is (derive.Assemble):
// a counter reset between two of its requests shows. A step whose requests overlapped has
// no span: its closing scrape was never taken.
func (r *Run) fromJournal(i int, reqs []record.Request, file string) record.StepArtifact {
	art := record.StepArtifact{
		Schema:      record.StepSchema,
		Scenario:    r.Scenario.Name,
		Kind:        record.KindSequence,
		DeltaScope:  record.ScopeRequest,
		Interrupted: true,
		Requests:    reqs,
	}
	if art.Requests == nil {
		art.Requests = []record.Request{}
	}
	// A concurrent step journals its requests as they end, not in plan order.
	sort.SliceStable(art.Requests, func(a, b int) bool { return art.Requests[a].IndexInStep < art.Requests[b].IndexInStep })
	if i < len(r.Scenario.Steps) {
		st := r.Scenario.Steps[i]
		art.Step, art.Concurrency = st.ID, st.Concurrency
		switch {
		case st.Replay != nil:
			art.Kind = record.KindReplay
		case st.IsConversation():
			art.Kind = record.KindConversation
		case st.IsTrace():
			art.Kind = record.KindTrace
		}
		if st.Concurrency > 1 || st.IsConversation() || st.IsTrace() {
			art.DeltaScope = record.ScopeStep
		}
	}
	if len(reqs) > 0 {
		art.Step = reqs[0].Step
		if reqs[0].Replay {
			art.Kind = record.KindReplay
		}
	}
	if fi, err := os.Stat(file); err == nil {
		art.EndedAt = fi.ModTime().UTC()
	}
	return art
}

// withoutRecord stands in for an unreadable or missing run.json (why): a record of status
// incomplete whose scenario is what the step files and journals tell (its name and step
// ids, in step order). Nothing else of the scenario, model or cache is known. It fails when
// the directory holds no step file or journal.
func withoutRecord(dir string, why error) (*Run, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	sc := &scenarios.Scenario{}
	ids := map[int]scenarios.Step{}
	last := -1
	for _, e := range entries {
		k, i, ok := parseArtifactName(e.Name())
		if !ok || k != 0 || !e.Type().IsRegular() {
			continue
		}
		var st scenarios.Step
		file := filepath.Join(dir, e.Name())
		if strings.HasSuffix(e.Name(), journalSuffix) {
			reqs, err := ReadJournal(file)
			if err != nil || len(reqs) == 0 {
				continue
			}
			st.ID, st.Replay = reqs[0].Step, scenarioRef(reqs[0].ReplayOf)
		} else {
			var art record.StepArtifact
			data, err := os.ReadFile(file)
			if err != nil || json.Unmarshal(data, &art) != nil || !record.IsStepSchema(art.Schema) {
				continue
			}
			sc.Name, st.ID, st.Concurrency = art.Scenario, art.Step, art.Concurrency
			if art.Kind == record.KindReplay && len(art.Requests) > 0 {
				st.Replay = scenarioRef(art.Requests[0].ReplayOf)
			}
		}
		if _, seen := ids[i]; !seen || st.ID != "" {
			ids[i] = st
		}
		last = max(last, i)
	}
	if last < 0 {
		return nil, fmt.Errorf("%s: no step files or journals", dir)
	}
	for i := 0; i <= last; i++ {
		sc.Steps = append(sc.Steps, ids[i])
	}
	if sc.Name == "" {
		sc.Name = filepath.Base(dir)
	}
	path := filepath.Join(dir, "run.json")
	return &Run{Dir: dir, Files: []record.ArtifactRef{{Path: path}}, Run: derive.Of(&record.Run{
		Schema:     record.RunSchema,
		Status:     record.StatusIncomplete,
		StopReason: fmt.Sprintf("run.json is unreadable (%v): the run was rebuilt from its step files and journals", why),
	}, sc)}, nil
}

func scenarioRef(r *record.ReplayRef) *scenarios.ReplayRef {
	if r == nil {
		return nil
	}
	return &scenarios.ReplayRef{Step: r.Step, Request: r.Request}
}

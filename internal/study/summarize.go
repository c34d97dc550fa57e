package study

import (
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// ErrMixed means the runs disagree on what was measured (model, runtime, topology).
var ErrMixed = errors.New("runs measured different setups")

// identity is what every run of one study must share: a study merging two models or engines
// would compare things that are not alike. served_name and recipe may differ (seed 001's
// runs name their tier in both).
func identity(r *runs.Run) []struct{ key, value string } {
	canonical := func(v any) string {
		data, _ := json.Marshal(v) // map keys sort: canonical
		return string(data)
	}
	topology := "{}"
	if len(r.Topology) > 0 {
		topology = canonical(r.Topology)
	}
	return []struct{ key, value string }{
		{"model.repo", canonical(r.Model.Repo)}, {"model.revision", canonical(r.Model.Revision)},
		{"runtime.image", canonical(r.Runtime.Image)}, {"runtime.engine", canonical(r.Runtime.Engine)},
		{"topology", topology},
	}
}

// Summarize merges runs into one kv-offload-replay/v1 study: identity from the runs, each
// primary run's step sections under their ids, each control run as one section under its
// study key, and sources listing every file with its sha256 (paths relative to base).
func Summarize(rs []*runs.Run, base string, allowMixed bool) (*record.Study, error) {
	if len(rs) == 0 {
		return nil, errors.New("summarize needs at least one run")
	}
	if !allowMixed {
		if err := checkSameSetup(rs); err != nil {
			return nil, err
		}
	}
	primary := rs[0]
	for _, r := range rs {
		if r.Scenario.Study.Role != "control" {
			primary = r
			break
		}
	}
	earliest := rs[0].ObservedAt
	for _, r := range rs {
		if t := r.ObservedAt; t < earliest {
			earliest = t
		}
	}
	st := &record.Study{
		Schema: record.RunSchema, ObservedAt: earliest,
		Model: primary.Model, Runtime: primary.Runtime, Topology: primary.Topology, Cache: primary.Cache,
	}
	owner := map[string]string{}
	for _, r := range rs {
		if r.Scenario.Study.Role == "control" {
			key := r.Scenario.Study.Key
			if prev, dup := owner[key]; dup {
				return nil, fmt.Errorf("section %q comes from both %s and %s", key, prev, name(r))
			}
			owner[key] = name(r)
			if r.Control == nil {
				return nil, fmt.Errorf("%w: %s is a control run without its %q section", ErrBadRun, name(r), key)
			}
			c := *r.Control
			c.Artifacts = nil
			for _, a := range r.Control.Artifacts {
				c.Artifacts = append(c.Artifacts, rel(base, filepath.Join(r.Dir, a)))
			}
			st.Sections = append(st.Sections, record.StudySection{Key: key, Control: &c})
			continue
		}
		for _, id := range r.StepIDs() {
			if prev, dup := owner[id]; dup {
				return nil, fmt.Errorf("step %q comes from both %s and %s: give the steps distinct ids", id, prev, name(r))
			}
			owner[id] = name(r)
			sec := r.Section(id)
			if sec == nil {
				return nil, fmt.Errorf("%w: %s has no section for step %q", ErrBadRun, name(r), id)
			}
			st.Sections = append(st.Sections, record.StudySection{Key: id, Section: relArtifact(base, r.Dir, *sec)})
		}
	}
	seenURL := map[string]bool{}
	for _, r := range rs {
		for _, f := range r.Files {
			st.Artifacts = append(st.Artifacts, record.ArtifactRef{Path: rel(base, f.Path), SHA256: f.SHA256})
		}
	}
	for _, r := range rs {
		for _, s := range r.Scenario.Sources {
			if !seenURL[s.URL] {
				seenURL[s.URL] = true
				st.References = append(st.References, s)
			}
		}
	}
	return st, nil
}

// relArtifact copies a section with its artifact path relative to base.
func relArtifact(base, dir string, sec record.Section) *record.Section {
	if s := sec.Sequence; s != nil && s.Artifact != "" {
		c := *s
		c.Artifact = rel(base, filepath.Join(dir, s.Artifact))
		sec.Sequence = &c
	}
	if s := sec.Replay; s != nil && s.Artifact != "" {
		c := *s
		c.Artifact = rel(base, filepath.Join(dir, s.Artifact))
		sec.Replay = &c
	}
	if s := sec.Trace; s != nil && s.Artifact != "" {
		c := *s
		c.Artifact = rel(base, filepath.Join(dir, s.Artifact))
		sec.Trace = &c
	}
	return &sec
}

func checkSameSetup(rs []*runs.Run) error {
	first := identity(rs[0])
	for _, r := range rs[1:] {
		for i, f := range identity(r) {
			if f.value != first[i].value {
				return fmt.Errorf("%w: %s is %s in %s but %s in %s (--allow-mixed to merge anyway)", ErrMixed, f.key, first[i].value, name(rs[0]), f.value, name(r))
			}
		}
	}
	return nil
}

func rel(base, path string) string {
	if base == "" {
		return path
	}
	r, err := filepath.Rel(base, path)
	if err != nil {
		return path
	}
	return r
}

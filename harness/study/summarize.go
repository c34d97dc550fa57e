package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// ErrMixed means the runs disagree on what was measured (model, runtime, topology).
var ErrMixed = errors.New("runs measured different setups")

// identityFields are the fields every run of one study must share: a study merging two
// models or engines would compare things that are not alike. served_name and recipe may
// differ (seed 001's runs name their tier in both).
var identityFields = []struct{ section, field string }{
	{"model", "repo"}, {"model", "revision"}, {"runtime", "image"}, {"runtime", "engine"}, {"topology", ""},
}

// Summarize merges runs into one kv-offload-replay/v1 study: identity from the runs, each
// primary run's step sections under their ids, each control run as one section under its
// study key, and sources listing every file with its sha256 (paths relative to base).
func Summarize(rs []*runs.Run, base string, allowMixed bool) (record.Object, error) {
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
	var o record.Object
	o.Set("schema", record.RunSchema)
	o.Set("observed_at", earliest)
	for _, k := range []string{"model", "runtime", "topology", "cache"} {
		if raw, ok := raw(primary, k); ok {
			o.Set(k, raw)
		}
	}
	owner := map[string]string{}
	for _, r := range rs {
		if r.Scenario.Study.Role == "control" {
			key := r.Scenario.Study.Key
			if prev, dup := owner[key]; dup {
				return nil, fmt.Errorf("section %q comes from both %s and %s", key, prev, name(r))
			}
			owner[key] = name(r)
			raw, ok := raw(r, key)
			if !ok {
				return nil, fmt.Errorf("%w: %s is a control run without its %q section", ErrBadRun, name(r), key)
			}
			var sec map[string]any
			json.Unmarshal(raw, &sec)
			if arts, ok := sec["artifacts"].([]any); ok {
				for i, a := range arts {
					arts[i] = rel(base, filepath.Join(r.Dir, fmt.Sprint(a)))
				}
			}
			o.Set(key, orderedLike(raw, sec))
			continue
		}
		for _, id := range r.StepIDs() {
			if prev, dup := owner[id]; dup {
				return nil, fmt.Errorf("step %q comes from both %s and %s: give the steps distinct ids", id, prev, name(r))
			}
			owner[id] = name(r)
			raw, _ := raw(r, id)
			var sec map[string]any
			json.Unmarshal(raw, &sec)
			if a, ok := sec["artifact"].(string); ok && a != "" {
				sec["artifact"] = rel(base, filepath.Join(r.Dir, a))
			}
			o.Set(id, orderedLike(raw, sec))
		}
	}
	var sources []any
	seenURL := map[string]bool{}
	for _, r := range rs {
		for _, f := range r.Files {
			sources = append(sources, record.ArtifactRef{Path: rel(base, f.Path), SHA256: f.SHA256})
		}
	}
	for _, r := range rs {
		for _, s := range r.Scenario.Sources {
			if !seenURL[s.URL] {
				seenURL[s.URL] = true
				sources = append(sources, s)
			}
		}
	}
	o.Set("sources", sources)
	return o, nil
}

func checkSameSetup(rs []*runs.Run) error {
	for _, f := range identityFields {
		first := field(rs[0], f.section, f.field)
		for _, r := range rs[1:] {
			if v := field(r, f.section, f.field); !bytes.Equal(v, first) {
				key := f.section
				if f.field != "" {
					key += "." + f.field
				}
				return fmt.Errorf("%w: %s is %s in %s but %s in %s (--allow-mixed to merge anyway)", ErrMixed, key, first, name(rs[0]), v, name(r))
			}
		}
	}
	return nil
}

// field returns a section's field as canonical JSON ("" when absent), for comparison.
func field(r *runs.Run, section, name string) []byte {
	raw, ok := raw(r, section)
	if !ok {
		return []byte(`""`)
	}
	var v any
	json.Unmarshal(raw, &v)
	if name != "" {
		m, _ := v.(map[string]any)
		v = m[name]
		if v == nil {
			v = ""
		}
	}
	out, _ := json.Marshal(v) // map keys sort: canonical
	return out
}

// orderedLike re-encodes sec with the key order of raw, so merged sections read as written.
func orderedLike(raw json.RawMessage, sec map[string]any) record.Object {
	var order record.Object
	json.Unmarshal(raw, &order)
	var o record.Object
	for _, f := range order {
		o.Set(f.Key, sec[f.Key])
	}
	keys := make([]string, 0, len(sec))
	for k := range sec {
		if _, ok := o.Get(k); !ok {
			keys = append(keys, k)
		}
	}
	sort.Strings(keys)
	for _, k := range keys {
		o.Set(k, sec[k])
	}
	return o
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

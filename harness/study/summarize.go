package study

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"path/filepath"
	"sort"

	"github.com/anvil-serving/kvbench/harness/record"
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
func Summarize(runs []*Run, base string, allowMixed bool) (record.Object, error) {
	if len(runs) == 0 {
		return nil, errors.New("summarize needs at least one run")
	}
	if !allowMixed {
		if err := checkSameSetup(runs); err != nil {
			return nil, err
		}
	}
	primary := runs[0]
	for _, r := range runs {
		if r.Scenario.Study.Role != "control" {
			primary = r
			break
		}
	}
	earliest := runs[0].str("observed_at")
	for _, r := range runs {
		if t := r.str("observed_at"); t < earliest {
			earliest = t
		}
	}
	var o record.Object
	o.Set("schema", record.RunSchema)
	o.Set("observed_at", earliest)
	for _, k := range []string{"model", "runtime", "topology", "cache"} {
		if raw, ok := primary.raw(k); ok {
			o.Set(k, raw)
		}
	}
	owner := map[string]string{}
	for _, r := range runs {
		if r.Scenario.Study.Role == "control" {
			key := r.Scenario.Study.Key
			if prev, dup := owner[key]; dup {
				return nil, fmt.Errorf("section %q comes from both %s and %s", key, prev, r.Name())
			}
			owner[key] = r.Name()
			raw, ok := r.raw(key)
			if !ok {
				return nil, fmt.Errorf("%w: %s is a control run without its %q section", ErrBadRun, r.Name(), key)
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
		for _, id := range r.Steps {
			if prev, dup := owner[id]; dup {
				return nil, fmt.Errorf("step %q comes from both %s and %s: give the steps distinct ids", id, prev, r.Name())
			}
			owner[id] = r.Name()
			raw, _ := r.raw(id)
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
	for _, r := range runs {
		for _, f := range r.Files {
			sources = append(sources, record.ArtifactRef{Path: rel(base, f.Path), SHA256: f.SHA256})
		}
	}
	for _, r := range runs {
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

func checkSameSetup(runs []*Run) error {
	for _, f := range identityFields {
		first := field(runs[0], f.section, f.field)
		for _, r := range runs[1:] {
			if v := field(r, f.section, f.field); !bytes.Equal(v, first) {
				name := f.section
				if f.field != "" {
					name += "." + f.field
				}
				return fmt.Errorf("%w: %s is %s in %s but %s in %s (--allow-mixed to merge anyway)", ErrMixed, name, first, runs[0].Name(), v, r.Name())
			}
		}
	}
	return nil
}

// field returns a section's field as canonical JSON ("" when absent), for comparison.
func field(r *Run, section, name string) []byte {
	raw, ok := r.raw(section)
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

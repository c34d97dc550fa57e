// Package study reads finished run directories and computes the two records users keep:
// the merged anvil-serving.kv-offload-replay/v1 study (seed 001: an eviction+replay run and a
// control run) and the anvil-serving.kv-accounting-summary/v1 (seed 000: KV pool occupancy per
// tested population). Both are recomputed from the runs' files, never from memory of a run.
package study

import (
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// ErrBadRun means a run directory is missing files, or its files do not match their hashes.
var ErrBadRun = errors.New("not a usable kvbench run")

// Run is one run directory as written by kvbench run.
type Run struct {
	Dir       string
	Record    record.Object // run.json, key order kept, values raw JSON
	Scenario  scenarios.Scenario
	Steps     []string
	Artifacts map[string]record.StepArtifact // by step id
	Files     []record.ArtifactRef           // run.json and every artifact, with sha256
}

// LoadRun reads dir's run.json and the step artifacts it lists, checking each against the
// sha256 the record holds.
func LoadRun(dir string) (*Run, error) {
	path := filepath.Join(dir, "run.json")
	data, err := os.ReadFile(path)
	if err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadRun, dir, err)
	}
	r := &Run{Dir: dir, Artifacts: map[string]record.StepArtifact{}}
	if err := json.Unmarshal(data, &r.Record); err != nil {
		return nil, fmt.Errorf("%w: %s: %w", ErrBadRun, path, err)
	}
	if schema := r.str("schema"); schema != record.RunSchema {
		return nil, fmt.Errorf("%w: %s: schema %q, want %q", ErrBadRun, path, schema, record.RunSchema)
	}
	if err := r.decode("scenario", &r.Scenario); err != nil {
		return nil, err
	}
	if err := r.decode("steps", &r.Steps); err != nil {
		return nil, err
	}
	sum, _ := record.FileSHA256(path)
	r.Files = append(r.Files, record.ArtifactRef{Path: path, SHA256: sum})
	var sources []struct {
		Path   string `json:"path"`
		SHA256 string `json:"sha256"`
	}
	if err := r.decode("sources", &sources); err != nil {
		return nil, err
	}
	for _, s := range sources {
		if s.Path == "" {
			continue // a URL source
		}
		p := filepath.Join(dir, s.Path)
		got, err := record.FileSHA256(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadRun, dir, err)
		}
		if got != s.SHA256 {
			return nil, fmt.Errorf("%w: %s: sha256 %s, the record says %s: the file changed after the run", ErrBadRun, p, got, s.SHA256)
		}
		data, err := os.ReadFile(p)
		if err != nil {
			return nil, fmt.Errorf("%w: %w", ErrBadRun, err)
		}
		var a record.StepArtifact
		if err := json.Unmarshal(data, &a); err != nil {
			return nil, fmt.Errorf("%w: %s: %w", ErrBadRun, p, err)
		}
		if a.Schema == record.StepSchema {
			r.Artifacts[a.Step] = a
		}
		r.Files = append(r.Files, record.ArtifactRef{Step: a.Step, Path: p, SHA256: got})
	}
	return r, nil
}

func (r *Run) raw(key string) (json.RawMessage, bool) {
	v, ok := r.Record.Get(key)
	if !ok {
		return nil, false
	}
	raw, ok := v.(json.RawMessage)
	return raw, ok
}

func (r *Run) decode(key string, v any) error {
	raw, ok := r.raw(key)
	if !ok {
		return fmt.Errorf("%w: %s/run.json has no %q", ErrBadRun, r.Dir, key)
	}
	if err := json.Unmarshal(raw, v); err != nil {
		return fmt.Errorf("%w: %s/run.json: %s: %w", ErrBadRun, r.Dir, key, err)
	}
	return nil
}

func (r *Run) str(key string) string {
	var s string
	if raw, ok := r.raw(key); ok {
		json.Unmarshal(raw, &s)
	}
	return s
}

// Name is the run directory's base name, which identifies a run in messages and records.
func (r *Run) Name() string { return filepath.Base(r.Dir) }

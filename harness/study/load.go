// Package study computes the two records users keep from finished run directories (loaded
// by harness/runs): the merged anvil-serving.kv-offload-replay/v1 study (seed 001: an
// eviction+replay run and a control run) and the anvil-serving.kv-accounting-summary/v1
// (seed 000: KV pool occupancy per tested population). Both are recomputed from the runs'
// files, never from memory of a run.
package study

import (
	"errors"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// ErrBadRun means a run record lacks what a study needs.
var ErrBadRun = errors.New("not a usable kvbench run")

// name is the run directory's base name, which identifies a run in messages and records.
func name(r *runs.Run) string { return filepath.Base(r.Dir) }

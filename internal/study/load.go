// Package study computes the two records users keep from finished run directories (loaded
// by harness/runs): the merged anvil-serving.kv-offload-replay/v1 study (seed 001: an
// eviction+replay run and a control run) and the anvil-serving.kv-accounting-summary/v1
// (seed 000: KV pool occupancy per tested population). Both are recomputed from the runs'
// files, never from memory of a run.
package study

import (
	"errors"
	"fmt"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// ErrBadRun means a run record lacks what a study needs.
var ErrBadRun = errors.New("not a usable kvbench run")

// name is the run directory's base name, which identifies a run in messages and records.
func name(r *runs.Run) string { return filepath.Base(r.Dir) }

// SummarizeDirs loads the runs in dirs and merges them (Summarize) into the study record to
// be written to out ("": printed), its paths relative to out's directory. A run that did not
// finish is refused unless allowIncomplete: a study record has no status of its own, so it
// would pass for one that did. Every error is bad input.
func SummarizeDirs(dirs []string, out string, allowMixed, allowIncomplete bool) (*record.Study, error) {
	rs, err := runs.LoadAll(absDirs(dirs))
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Status != record.StatusCompleted && !allowIncomplete {
			return nil, fmt.Errorf("summarize: %s is %s (%s): not every step was measured (--allow-incomplete to merge it anyway)", r.Dir, r.Status, r.StopReason)
		}
	}
	return Summarize(rs, baseOf(out), allowMixed)
}

// AccountingDirs loads the runs in dirs and computes their accounting summary (Accounting)
// to be written to out ("": printed), its paths relative to out's directory. Every error is
// bad input.
func AccountingDirs(dirs []string, spec PoolSpec, out string) (*Summary, error) {
	rs, err := runs.LoadAll(absDirs(dirs))
	if err != nil {
		return nil, err
	}
	return Accounting(rs, spec, baseOf(out))
}

// baseOf is the directory a record written to out names its files from: out's, absolute.
// A printed record (out "") has no such directory and names them as loaded.
func baseOf(out string) string {
	if out == "" {
		return ""
	}
	abs, err := filepath.Abs(filepath.Dir(out))
	if err != nil {
		return ""
	}
	return abs
}

// absDirs makes dirs absolute, as baseOf is: filepath.Rel relates two absolute paths, never
// an absolute one and a relative one.
func absDirs(dirs []string) []string {
	out := make([]string, len(dirs))
	for i, d := range dirs {
		if a, err := filepath.Abs(d); err == nil {
			out[i] = a
		} else {
			out[i] = d
		}
	}
	return out
}

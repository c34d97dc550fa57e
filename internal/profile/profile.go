// Package profile writes Go CPU and allocation profiles of a whole kvbench run, for
// `kvbench run --cpuprofile --memprofile` and $KVBENCH_PPROF.
package profile

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// Env names a directory that receives cpu.pprof and mem.pprof when no file is named.
const Env = "KVBENCH_PPROF"

// ErrBadInput marks (errors.Is) a failure that is the user's to fix: a profile file that
// may not or cannot be written where they asked.
var ErrBadInput = errors.New("bad profile file")

// File is one profile to write: Path (empty: none, or Env's) and the Flag that named it, which
// errors name.
type File struct{ Flag, Path string }

// Start starts the CPU profile and returns the stop that ends it and writes the allocation
// profile (allocations up to the end of the run). Both files pass runs.CheckOutput (never
// into a run directory, never over a kvbench record); an existing other file is replaced.
func Start(cpu, mem File) (stop func() error, err error) {
	if dir := os.Getenv(Env); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, badInput(fmt.Errorf("%s=%s: %v", Env, dir, err))
		}
		if cpu.Path == "" {
			cpu.Path = filepath.Join(dir, "cpu.pprof")
		}
		if mem.Path == "" {
			mem.Path = filepath.Join(dir, "mem.pprof")
		}
	}
	for _, f := range []File{cpu, mem} {
		if f.Path != "" {
			if err := runs.CheckOutput(f.Path, true); err != nil {
				return nil, badInput(fmt.Errorf("%s: %w", f.Flag, err))
			}
		}
	}
	var cpuOut *runs.Pending // lands at cpu.Path, whole, when the run ends
	if cpu.Path != "" {
		if cpuOut, err = runs.ReplaceOutputStream(cpu.Path, profilePerm); err != nil {
			return nil, badInput(fmt.Errorf("%s: %v", cpu.Flag, err))
		}
		if err := pprof.StartCPUProfile(cpuOut); err != nil {
			cpuOut.Abort()
			return nil, fmt.Errorf("%s %s: %w", cpu.Flag, cpu.Path, err) // one already runs
		}
	}
	return func() error {
		var first error
		if cpuOut != nil {
			pprof.StopCPUProfile()
			if _, err := cpuOut.Commit(); err != nil {
				first = fmt.Errorf("%s: %w", cpu.Flag, err)
			}
		}
		if mem.Path != "" {
			runtime.GC() // the profile shows allocations up to the last GC
			if err := writeAllocs(mem); err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil
}

// profilePerm is a profile's mode: it holds no prompts, only kvbench's own code paths.
const profilePerm = 0o644

func writeAllocs(mem File) error {
	f, err := runs.ReplaceOutputStream(mem.Path, profilePerm)
	if err != nil {
		return fmt.Errorf("%s: %w", mem.Flag, err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Abort()
		return fmt.Errorf("%s %s: %w", mem.Flag, mem.Path, err)
	}
	if _, err := f.Commit(); err != nil {
		return fmt.Errorf("%s: %w", mem.Flag, err)
	}
	return nil
}

// inputError is an error that is bad input.
type inputError struct{ error }

func badInput(err error) error          { return inputError{err} }
func (e inputError) Unwrap() error      { return e.error }
func (inputError) Is(target error) bool { return target == ErrBadInput }

package main

import (
	"fmt"
	"os"
	"path/filepath"
	"runtime"
	"runtime/pprof"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// pprofEnv names a directory that receives cpu.pprof and mem.pprof of a run when the
// --cpuprofile and --memprofile flags are not given.
const pprofEnv = "KVBENCH_PPROF"

// startProfiles starts a CPU profile (cpuFile) and arranges an allocation profile (memFile)
// for the caller to finish with the returned stop. Empty names fall back to $KVBENCH_PPROF.
func startProfiles(cpuFile, memFile string) (stop func() error, err error) {
	if dir := os.Getenv(pprofEnv); dir != "" {
		if err := os.MkdirAll(dir, 0o755); err != nil {
			return nil, usageErrorf("%s=%s: %v", pprofEnv, dir, err)
		}
		if cpuFile == "" {
			cpuFile = filepath.Join(dir, "cpu.pprof")
		}
		if memFile == "" {
			memFile = filepath.Join(dir, "mem.pprof")
		}
	}
	for _, p := range []struct{ flag, file string }{{"--cpuprofile", cpuFile}, {"--memprofile", memFile}} {
		if p.file != "" {
			if err := runs.CheckOutput(p.file, true); err != nil {
				return nil, outputError(p.flag, p.file, err)
			}
		}
	}
	var cpu *os.File
	if cpuFile != "" {
		if cpu, err = os.Create(cpuFile); err != nil {
			return nil, usageErrorf("--cpuprofile: %v", err)
		}
		if err := pprof.StartCPUProfile(cpu); err != nil {
			cpu.Close()
			return nil, fmt.Errorf("--cpuprofile %s: %w", cpuFile, err)
		}
	}
	return func() error {
		var first error
		if cpu != nil {
			pprof.StopCPUProfile()
			first = cpu.Close()
		}
		if memFile != "" {
			runtime.GC() // the profile shows allocations up to the last GC
			if err := writeHeapProfile(memFile); err != nil && first == nil {
				first = err
			}
		}
		return first
	}, nil
}

func writeHeapProfile(file string) error {
	f, err := os.Create(file)
	if err != nil {
		return fmt.Errorf("--memprofile: %w", err)
	}
	if err := pprof.Lookup("allocs").WriteTo(f, 0); err != nil {
		f.Close()
		return fmt.Errorf("--memprofile %s: %w", file, err)
	}
	return f.Close()
}

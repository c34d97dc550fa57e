package main

import (
	"errors"

	"github.com/anvil-serving/kvbench/internal/profile"
)

// startProfiles starts run's --cpuprofile and --memprofile (or $KVBENCH_PPROF's).
func startProfiles(cpuFile, memFile string) (func() error, error) {
	stop, err := profile.Start(profile.File{Flag: "--cpuprofile", Path: cpuFile}, profile.File{Flag: "--memprofile", Path: memFile})
	if errors.Is(err, profile.ErrBadInput) {
		return nil, usageError(err)
	}
	return stop, err
}

package main

import (
	"errors"
	"io/fs"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// outputError says in one line why a file the user named with flag (-o, --out, a profile)
// was not written: refused by the output rule (inside a run directory, or a kvbench record
// there), already there, or in a directory that does not exist, each bad input (exit 2).
// Other failures (a full disk) stay runtime errors.
func outputError(flag, path string, err error) error {
	switch {
	case err == nil:
		return nil
	case errors.Is(err, runs.ErrInsideRun), errors.Is(err, runs.ErrIsRecord):
		return usageErrorf("%s: %w", flag, err) // err names the path
	case errors.Is(err, fs.ErrExist):
		return usageErrorf("%s %s exists: kvbench never overwrites a file it writes; choose another path or remove it", flag, path)
	case errors.Is(err, fs.ErrNotExist):
		return usageErrorf("%s %s: its directory does not exist", flag, path)
	}
	return err
}

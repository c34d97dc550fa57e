package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
)

// SweepFile is a sweep directory's record.
const SweepFile = "sweep.json"

// IsSweep reports whether dir holds a sweep record.
func IsSweep(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, SweepFile))
	return err == nil
}

// LoadSweep reads dir's sweep.json and checks each level's run.json against the sha256
// the sweep lists, so a sweep cannot silently point at another run.
func LoadSweep(dir string) (*record.Sweep, error) {
	path := filepath.Join(dir, SweepFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		return nil, fmt.Errorf("%s: not a sweep directory (no %s)", dir, SweepFile)
	}
	if err != nil {
		return nil, err
	}
	var s record.Sweep
	if err := json.Unmarshal(data, &s); err != nil {
		return nil, fmt.Errorf("%s: %w", path, err)
	}
	if s.Schema != record.SweepSchema {
		return nil, fmt.Errorf("%s: schema %q, want %s", path, s.Schema, record.SweepSchema)
	}
	if len(s.Levels) == 0 {
		return nil, fmt.Errorf("%s: no levels", path)
	}
	for _, l := range s.Levels {
		if l.Run == "" {
			continue // the level's run directory could not be created
		}
		sum, err := FileSHA256(filepath.Join(dir, l.Run, "run.json"))
		if err != nil {
			return nil, fmt.Errorf("%s: level %s: %w", path, l.Key(), err)
		}
		if sum != l.RunSHA256 {
			return nil, fmt.Errorf("%s: level %s: %s/run.json has sha256 %s, the sweep lists %s", path, l.Key(), l.Run, sum, l.RunSHA256)
		}
	}
	return &s, nil
}

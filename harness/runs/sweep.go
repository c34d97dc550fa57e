package runs

import (
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"sort"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
)

// SweepFile is a sweep directory's record.
const SweepFile = "sweep.json"

// IsSweep reports whether dir holds a sweep record, or is a sweep killed before it wrote
// one (see isUnrecordedSweep).
func IsSweep(dir string) bool {
	_, err := os.Stat(filepath.Join(dir, SweepFile))
	return err == nil || isUnrecordedSweep(dir)
}

// isUnrecordedSweep reports whether dir is a sweep directory without sweep.json: named as
// sweeps are (<scenario>-sweep-<time>), no run.json, and level run directories inside.
func isUnrecordedSweep(dir string) bool {
	if !strings.Contains(filepath.Base(filepath.Clean(dir)), "-sweep-") {
		return false
	}
	if _, err := os.Lstat(filepath.Join(dir, "run.json")); err == nil {
		return false
	}
	return len(levelDirs(dir)) > 0
}

// levelDirs lists the run directories directly inside a sweep directory, by name.
func levelDirs(dir string) []string {
	entries, _ := os.ReadDir(dir)
	var out []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") && isRunDir(filepath.Join(dir, e.Name()), true) {
			out = append(out, e.Name())
		}
	}
	return out
}

// LoadSweep reads dir's sweep.json and checks each level's run.json against the sha256
// the sweep lists, so a sweep cannot silently point at another run. A sweep that did not
// finish (sweep.json missing, or still saying running) is rebuilt from its level
// directories and reported incomplete.
func LoadSweep(dir string) (*record.Sweep, error) {
	path := filepath.Join(dir, SweepFile)
	data, err := os.ReadFile(path)
	if errors.Is(err, fs.ErrNotExist) {
		if !isUnrecordedSweep(dir) {
			return nil, fmt.Errorf("%s: not a sweep directory (no %s)", dir, SweepFile)
		}
		return rebuildSweep(dir, nil)
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
	if len(s.Levels) == 0 && s.Status != record.StatusRunning {
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
	if s.Status == record.StatusRunning {
		return rebuildSweep(dir, &s)
	}
	return &s, nil
}

// rebuildSweep completes the record of a sweep that did not finish: s (nil when sweep.json
// was never written) with a line for each level directory it does not list, each loaded
// as Load reads any run, its capacity decided anew, its status incomplete.
func rebuildSweep(dir string, s *record.Sweep) (*record.Sweep, error) {
	reason := "the sweep did not finish: sweep.json still says running (its process was killed, or is still going)"
	unrecorded := s == nil
	if unrecorded {
		s = &record.Sweep{Schema: record.SweepSchema}
		reason = "the sweep did not finish: it has no sweep.json (its process was killed before it wrote one)"
	}
	listed := map[string]bool{}
	for _, l := range s.Levels {
		listed[filepath.Clean(l.Run)] = true
	}
	for _, name := range levelDirs(dir) {
		if listed[name] {
			continue
		}
		r, err := Load(filepath.Join(dir, name))
		if err != nil {
			return nil, fmt.Errorf("%s: level %s: %w", dir, name, err)
		}
		l, err := sweepLevelOfRun(s, name, r)
		if err != nil {
			return nil, fmt.Errorf("%s: level %s: %w", dir, name, err)
		}
		s.Levels = append(s.Levels, l)
	}
	if len(s.Levels) == 0 {
		return nil, fmt.Errorf("%s: %s, and no level ran", dir, reason)
	}
	sort.SliceStable(s.Levels, func(i, j int) bool { return s.Levels[i].LoadValue() < s.Levels[j].LoadValue() })
	s.Status, s.StopReason = record.StatusIncomplete, joinReason(reason, s.StopReason)
	s.Decide()
	if unrecorded {
		s.CapacityReason = "no capacity decided: the sweep's TTFT p90 threshold was never recorded"
	}
	return s, nil
}

// sweepLevelOfRun is the sweep line of level run r (directory name in the sweep's), which
// ran the swept step alone; it fills what s lacks (a sweep with no record) from the run.
func sweepLevelOfRun(s *record.Sweep, name string, r *Run) (record.SweepLevel, error) {
	sc := r.Scenario
	if sc == nil || len(sc.Steps) != 1 {
		return record.SweepLevel{}, fmt.Errorf("not a sweep level: its scenario has no single step")
	}
	st := sc.Steps[0]
	if s.Step == "" {
		s.Step, s.ObservedAt, s.Kvbench = st.ID, r.ObservedAt, r.Kvbench
		s.Scenario, s.Load = sc.Name, record.SweepUsers
		if st.IsTrace() {
			s.Load = record.SweepRequestRate
		}
		for _, suffix := range []string{"-users-", "-time-scale-", "-host-tier-"} {
			if i := strings.LastIndex(sc.Name, suffix); i > 0 {
				s.Scenario = sc.Name[:i] // the level's name is the sweep's scenario and its load
				break
			}
		}
	}
	if st.ID != s.Step {
		return record.SweepLevel{}, fmt.Errorf("ran step %s, the sweep sweeps %s", st.ID, s.Step)
	}
	sum, _ := FileSHA256(filepath.Join(r.Dir, "run.json")) // "" when run.json was lost
	if !st.IsTrace() {
		return record.SweepLevelOf(st.Users, name, sum, r.Status, r.Conversation(st.ID), s.TTFTP90ThresholdMS), nil
	}
	ts := r.Trace(st.ID)
	if s.Load == record.SweepHostTier || strings.Contains(sc.Name, "-host-tier-") {
		s.Load = record.SweepHostTier
		return record.SweepHostTierLevelOf(redact.URL(sc.Target.Endpoint), name, sum, r.Status, ts, s.TTFTP90ThresholdMS), nil
	}
	var rate *float64
	if ts != nil {
		rate = ts.OfferedRequestsPerSecond
	}
	return record.SweepTraceLevelOf(st.TimeScale, rate, name, sum, r.Status, ts, s.TTFTP90ThresholdMS), nil
}

// ExpandDirs replaces each sweep directory among dirs by its levels' run directories, so a
// report shows every level of a sweep, and returns the sweeps' records for their capacity
// tables.
func ExpandDirs(dirs []string) ([]string, []*record.Sweep, error) {
	var out []string
	var sweeps []*record.Sweep
	for _, d := range dirs {
		if !IsSweep(d) {
			out = append(out, d)
			continue
		}
		s, err := LoadSweep(d)
		if err != nil {
			return nil, nil, err
		}
		sweeps = append(sweeps, s)
		for _, l := range s.Levels {
			if l.Run != "" {
				out = append(out, filepath.Join(d, l.Run))
			}
		}
	}
	return out, sweeps, nil
}

package runner

import (
	"errors"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/events"
)

// RunDirSink is the run directory as a sink the caller hands the runner: on RunStarted it
// creates the run's directory under its parent (CreateRunDir, with the first run.json),
// then records every later event into it (Recorder).
type RunDirSink struct {
	parent string
	rec    *Recorder
}

var _ events.Durable = (*RunDirSink)(nil)

// NewRunDirSink creates the run directory under parent (results/ by default) when the run
// starts.
func NewRunDirSink(parent string) *RunDirSink { return &RunDirSink{parent: parent} }

// Handle creates the directory on RunStarted and records the other events there.
func (s *RunDirSink) Handle(e events.Event) error {
	if st, ok := e.(events.RunStarted); ok {
		if s.rec != nil {
			return errors.New("run directory: the run started twice")
		}
		dir, err := runs.CreateRunDir(s.parent, st.Scenario, st.Started, st.Record)
		if err != nil {
			return err
		}
		s.rec = NewRecorder(dir)
		return nil
	}
	if s.rec == nil {
		return errors.New("run directory: an event before the run started")
	}
	return s.rec.Handle(e)
}

// Dir is the run directory ("" before the run started).
func (s *RunDirSink) Dir() string {
	if s.rec == nil {
		return ""
	}
	return s.rec.dir
}

package runner

import (
	"fmt"
	"os"
	"path/filepath"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/events"
)

// Recorder is the run directory's sink: it makes a run durable as it goes. Each step's
// requests are journaled the moment they end; at the step's end its file is written,
// run.json is replaced to list it, and the journal, now redundant, is removed. A file that
// cannot be written is an error (the run stops) with the journal kept, so a reader still
// finds the step's requests.
type Recorder struct {
	dir     string
	journal *runs.Journal
	refs    []record.ArtifactRef
}

var _ events.Sink = (*Recorder)(nil)

// NewRecorder records into dir, a run directory CreateRunDir made.
func NewRecorder(dir string) *Recorder { return &Recorder{dir: dir} }

// RecordPath is the run's run.json.
func (rc *Recorder) RecordPath() string { return filepath.Join(rc.dir, "run.json") }

// Handle records e.
func (rc *Recorder) Handle(e events.Event) error {
	switch e := e.(type) {
	case events.StepStarted:
		j, err := runs.OpenJournal(filepath.Join(rc.dir, runs.JournalName(e.Artifact)))
		if err != nil {
			return fmt.Errorf("step %s: %w", e.Step, err)
		}
		rc.journal = j
	case events.RequestDone:
		if rc.journal == nil {
			return fmt.Errorf("journaling %s[%d]: no step is open", e.Request.Step, e.Request.IndexInStep)
		}
		if err := rc.journal.Append(e.Request); err != nil {
			return fmt.Errorf("journaling %s[%d]: %w", e.Request.Step, e.Request.IndexInStep, err)
		}
	case events.StepDone:
		return rc.stepDone(e)
	case events.RunDone:
		e.Record.Artifacts = rc.refs
		if _, err := runs.ReplaceJSON(rc.RecordPath(), e.Record); err != nil {
			return err
		}
	}
	return nil
}

func (rc *Recorder) stepDone(e events.StepDone) error {
	j := rc.journal
	rc.journal = nil
	var jerr error
	if j != nil {
		jerr = j.Close()
	}
	sum, err := runs.WriteJSON(filepath.Join(rc.dir, e.Artifact), e.Step.StepArtifact)
	if err != nil {
		return fmt.Errorf("step %s: its requests are kept in %s: %w", e.Step.Step, runs.JournalName(e.Artifact), err)
	}
	rc.refs = append(rc.refs, record.ArtifactRef{Step: e.Step.Step, Path: e.Artifact, SHA256: sum, Repetition: e.Repetition})
	e.Record.Artifacts = rc.refs
	if _, err := runs.ReplaceJSON(rc.RecordPath(), e.Record); err != nil {
		return fmt.Errorf("after step %s: %w", e.Step.Step, err)
	}
	if j != nil && jerr == nil {
		os.Remove(j.Path()) // the step file holds it all; a leftover is ignored by readers
	}
	return nil
}

// Refs are the step files written so far, in order.
func (rc *Recorder) Refs() []record.ArtifactRef { return rc.refs }

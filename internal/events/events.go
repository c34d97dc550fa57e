// Package events is what a run tells its sinks as it goes: the run started, a step started,
// a request went out, made progress or finished, a step or the run ended. The runner emits
// every event to each sink in the order its caller listed them, from the one goroutine that
// consumes the requests' results. The caller chooses the sinks (k6's outputs are the model):
// the run directory (durability), the console, a push to a Pushgateway, a test's recorder;
// each plugs in without touching the runner's loop.
package events

import (
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
)

// Sink receives a run's events. An error stops the run: the run directory's sink is its
// durability, and a record it cannot write must not go unnoticed. A sink whose failure
// should not stop a run (the console) returns nil.
type Sink interface {
	Handle(Event) error
}

// Durable is a sink that keeps the run in a directory of its own, made when it handles
// RunStarted; the runner reports the first such sink's Dir as the run's directory.
type Durable interface {
	Sink
	Dir() string
}

// Event is one of the types below.
type Event interface{ event() }

// Note is a line for people (a repetition begins, a probe ran); sinks that keep records
// ignore it.
type Note struct{ Text string }

// RunStarted is the first event: the run of Scenario began at Started, and Record is its
// run record so far (status running, no step yet). The run directory is created on it; a
// sink's error here means the run never started.
type RunStarted struct {
	Scenario string
	Started  time.Time
	Record   *derive.Run
}

// StepStarted: repetition Repetition's step Index (from 0) begins; its file will be Artifact.
type StepStarted struct {
	Repetition int
	Index      int
	Step       string
	Artifact   string
	// Describes says what the step sends, in words ("6 requests, concurrency 1").
	Describes string
	// Steps and Repetitions are how many steps a repetition has and how many repetitions
	// the run makes: how far the run has got (a curve's points, a run's repeats).
	Steps, Repetitions int
}

// RequestState is how far a request has come.
type RequestState string

// Request states of a RequestProgress.
const (
	Waiting    RequestState = "waiting" // waiting for an idle server before sending
	Sent       RequestState = "sent"    // sent by a step whose requests overlap
	Prefilling RequestState = "prefill" // sent; nothing generated yet
	Decoding   RequestState = "decode"  // first output seen
)

// RequestProgress is a live report on one request; only the console shows it.
type RequestProgress struct {
	Step          string
	IndexInStep   int
	PlannedTokens int
	PromptTokens  int
	State         RequestState
	// Tokens counts generated chunks so far; Elapsed runs from the send.
	Tokens  int
	Elapsed time.Duration
}

// TraceProgress is a live report on a trace step, sent as its requests finish (at most a few
// times a second) and once at its end; only the console shows it.
type TraceProgress struct {
	Step string
	// Done of Total requests have finished, Failed of them with an error; InFlight are sent
	// and not finished.
	Done, Total, Failed, InFlight int
	// LagP50MS and LagP99MS are the dispatch lag so far: how late requests went out.
	LagP50MS, LagP99MS float64
	// Tiers is how the step's prompt tokens were served so far, from the latest scrape
	// (shares null where a counter is absent or no scrape came yet).
	Tiers   record.TierShares
	Elapsed time.Duration
	// Final marks the report at the step's end.
	Final bool
}

// RequestDone: a request finished with everything measured about it (a replay's verdict
// decided). It is the request's durable moment: the run directory journals it at once.
type RequestDone struct {
	Repetition int
	Request    record.Request
}

// StepDone: a step ended (or was interrupted). Record is the run record derived from every
// step so far, status running; the run directory writes the step's file and then Record.
type StepDone struct {
	Repetition int
	Index      int
	Artifact   string
	Step       derive.Step
	Record     *derive.Run
}

// RunDone is the last event: the run ended; Record is its final record, and Dir the run's
// directory (the Durable sink's; "" without one). Sinks listed after the run directory's see
// the final run.json already on disk.
type RunDone struct {
	Record *derive.Run
	Dir    string
}

func (Note) event()            {}
func (RunStarted) event()      {}
func (StepStarted) event()     {}
func (RequestProgress) event() {}
func (TraceProgress) event()   {}
func (RequestDone) event()     {}
func (StepDone) event()        {}
func (RunDone) event()         {}

// Sinks fans events out to several sinks in order, as the runner does with its caller's.
type Sinks []Sink

// Handle gives e to every sink in order and returns the first error. The run's two
// lifecycle events stop at the first sink that fails: a run whose directory could not be
// made never started for the sinks after it, and a run whose final record could not be
// written is not pushed or shown as done. The events in between reach every sink, so the
// console still shows what the run directory failed to keep.
func (s Sinks) Handle(e Event) error {
	_, lifecycle := e.(RunStarted)
	if _, ok := e.(RunDone); ok {
		lifecycle = true
	}
	var first error
	for _, k := range s {
		err := k.Handle(e)
		if err != nil && lifecycle {
			return err
		}
		if first == nil {
			first = err
		}
	}
	return first
}

// Dir is the run's directory: the first Durable sink's ("" without one).
func (s Sinks) Dir() string {
	for _, k := range s {
		if d, ok := k.(Durable); ok {
			return d.Dir()
		}
	}
	return ""
}

package events

import (
	"fmt"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
)

// logSink writes "name:event" to a shared log for each event, and fails on the events fail
// names.
type logSink struct {
	name string
	log  *[]string
	fail map[string]bool
}

func (s *logSink) Handle(e Event) error {
	kind := strings.TrimPrefix(fmt.Sprintf("%T", e), "events.")
	*s.log = append(*s.log, s.name+":"+kind)
	if s.fail[kind] {
		return fmt.Errorf("%s cannot keep %s", s.name, kind)
	}
	return nil
}

// durableSink is a logSink with a directory.
type durableSink struct {
	logSink
	dir string
}

func (s *durableSink) Dir() string { return s.dir }

// aRun is the events of a run of one step with one request, in the runner's order.
func aRun() []Event {
	rec := &derive.Run{Run: &record.Run{Status: record.StatusRunning}}
	return []Event{
		RunStarted{Scenario: "unit", Record: rec},
		Note{Text: "repetition 1 of 1"},
		StepStarted{Index: 0, Step: "sequence", Artifact: "step-01-sequence.json"},
		RequestProgress{Step: "sequence", State: Decoding, Tokens: 3},
		RequestDone{Request: record.Request{Step: "sequence"}},
		StepDone{Index: 0, Artifact: "step-01-sequence.json", Record: rec},
		RunDone{Record: rec, Dir: "results/unit-20250102T030405Z"},
	}
}

// TestSinksDeliverEveryEventInOrder: each event reaches every sink in the order the caller
// listed them before the next event goes out, so the run directory has kept a request
// before the console shows it and a push sees the run only after both.
func TestSinksDeliverEveryEventInOrder(t *testing.T) {
	var log []string
	sinks := Sinks{&logSink{name: "dir", log: &log}, &logSink{name: "console", log: &log}, &logSink{name: "push", log: &log}}
	for _, e := range aRun() {
		if err := sinks.Handle(e); err != nil {
			t.Fatal(err)
		}
	}
	var want []string
	for _, kind := range []string{"RunStarted", "Note", "StepStarted", "RequestProgress", "RequestDone", "StepDone", "RunDone"} {
		want = append(want, "dir:"+kind, "console:"+kind, "push:"+kind)
	}
	if strings.Join(log, " ") != strings.Join(want, " ") {
		t.Fatalf("sinks saw\n %v\nwant\n %v", log, want)
	}
}

// TestSinksMidRunFailureStillReachesLaterSinks: a request the run directory could not
// journal is still shown by the console after it; the first error is what stops the run.
func TestSinksMidRunFailureStillReachesLaterSinks(t *testing.T) {
	var log []string
	sinks := Sinks{
		&logSink{name: "dir", log: &log, fail: map[string]bool{"RequestDone": true}},
		&logSink{name: "other", log: &log, fail: map[string]bool{"RequestDone": true}},
		&logSink{name: "console", log: &log},
	}
	err := sinks.Handle(RequestDone{Request: record.Request{Step: "sequence"}})
	if err == nil || err.Error() != "dir cannot keep RequestDone" {
		t.Fatalf("error %v, want the first sink's", err)
	}
	if got := strings.Join(log, " "); got != "dir:RequestDone other:RequestDone console:RequestDone" {
		t.Fatalf("sinks saw %q", got)
	}
}

// TestSinksLifecycleStopsAtFailure: a run whose directory could not be created never
// started for the sinks after it, and one whose final record could not be written is not
// pushed.
func TestSinksLifecycleStopsAtFailure(t *testing.T) {
	for _, e := range []Event{RunStarted{Scenario: "unit"}, RunDone{Dir: "results/unit"}} {
		kind := strings.TrimPrefix(fmt.Sprintf("%T", e), "events.")
		var log []string
		sinks := Sinks{&logSink{name: "dir", log: &log, fail: map[string]bool{kind: true}}, &logSink{name: "push", log: &log}}
		err := sinks.Handle(e)
		if err == nil || !strings.Contains(err.Error(), "dir cannot keep "+kind) {
			t.Errorf("%s: error %v", kind, err)
		}
		if got := strings.Join(log, " "); got != "dir:"+kind {
			t.Errorf("%s: sinks saw %q, want only the failing one", kind, got)
		}
	}
}

// TestSinksDir: the run's directory is the first durable sink's, whatever its place.
func TestSinksDir(t *testing.T) {
	var log []string
	console := &logSink{name: "console", log: &log}
	if d := (Sinks{console}).Dir(); d != "" {
		t.Fatalf("no durable sink: dir %q", d)
	}
	first := &durableSink{logSink: logSink{name: "dir", log: &log}, dir: "results/a"}
	second := &durableSink{logSink: logSink{name: "copy", log: &log}, dir: "results/b"}
	if d := (Sinks{console, first, second}).Dir(); d != "results/a" {
		t.Fatalf("dir %q, want the first durable sink's", d)
	}
	var none Sinks
	if err := none.Handle(RunStarted{}); err != nil || none.Dir() != "" {
		t.Fatalf("no sinks: %v, %q", err, none.Dir())
	}
}

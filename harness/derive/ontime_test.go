package derive

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// traceStepWithLags is an open- or closed-loop trace step whose requests went out lags ms late.
func traceStepWithLags(mode string, lags ...float64) Step {
	scale := 0.5
	st := Step{StepArtifact: record.StepArtifact{Step: "load", Kind: record.KindTrace,
		Trace: &record.TraceReplay{Mode: mode, TimeScale: &scale, PlannedRequests: len(lags), SpanSeconds: 10}}}
	for i, l := range lags {
		st.Requests = append(st.Requests, record.Request{Step: "load", IndexInStep: i, Trace: &record.TraceRequest{Line: i + 1, DispatchLagMS: l}})
	}
	return st
}

// TestDispatchBehind: an open loop whose dispatch lag p99 exceeds the threshold says so with
// its figures, and require_on_time fails on it; one within the threshold, a closed loop and
// other step kinds do not get the finding, and the gate says where it does not apply.
func TestDispatchBehind(t *testing.T) {
	late := TraceOf(traceStepWithLags(record.TraceOpenLoop, 0.1, 0.2, 0.3, 40), "")
	b := late.DispatchBehind
	if b == nil {
		t.Fatal("a replay 40 ms late at its p99 has no dispatch_behind")
	}
	if b.ThresholdP99MS != DispatchBehindP99MS || b.LagMaxMS != 40 || b.LagP99MS <= DispatchBehindP99MS || b.LagP50MS >= 1 ||
		b.OfferedRequestsPerSecond == nil || *b.OfferedRequestsPerSecond != 0.8 || !strings.Contains(b.Finding, "fell behind") {
		t.Errorf("dispatch_behind %+v", b)
	}
	onTime := TraceOf(traceStepWithLags(record.TraceOpenLoop, 0.1, 0.2, 0.3, 4), "")
	if onTime.DispatchBehind != nil {
		t.Errorf("a replay within the threshold fell behind: %+v", onTime.DispatchBehind)
	}
	closed := TraceOf(traceStepWithLags(record.TraceClosedLoop, 50, 60), "")
	if closed.DispatchBehind != nil {
		t.Errorf("a closed loop fell behind: %+v", closed.DispatchBehind)
	}
	gate := scenarios.Gate{Step: "load", RequireOnTime: true}
	tests := []struct {
		sec    record.Section
		passed bool
		reason string
	}{
		{record.Section{Step: "load", Trace: &late}, false, "the replay fell behind its trace: dispatch lag p99"},
		{record.Section{Step: "load", Trace: &onTime}, true, "on time: dispatch lag p99"},
		{record.Section{Step: "load", Trace: &closed}, false, "closed loop"},
		{record.Section{Step: "load", Conversation: &record.ConversationSection{}}, false, "open-loop trace steps only"},
		{record.Section{Step: "load", Sequence: &record.SequenceSection{}}, false, "open-loop trace steps only"},
	}
	for _, tt := range tests {
		got := EvaluateGates([]scenarios.Gate{gate}, []record.Section{tt.sec})
		if len(got) != 1 || got[0].Passed != tt.passed || !strings.Contains(got[0].Reason, tt.reason) {
			t.Errorf("%+v: %+v, want passed %v, %q", tt.sec, got, tt.passed, tt.reason)
		}
	}
}

package derive

import (
	"encoding/json"
	"reflect"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

// seedRun is seed 001 in miniature: a sequence of two requests and a replay of the first,
// with literal counters that reload the replay from the CPU tier.
func seedRun() []Step {
	c0 := map[metrics.Counter]float64{metrics.StoreBytes: 0, metrics.LoadBytes: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 0}
	c1 := map[metrics.Counter]float64{metrics.StoreBytes: 20790 * 1000, metrics.LoadBytes: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 1000}
	c2 := map[metrics.Counter]float64{metrics.StoreBytes: 20790 * 2000, metrics.LoadBytes: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.GPUPrefixQueries: 2000}
	c3 := map[metrics.Counter]float64{metrics.StoreBytes: 20790 * 2000, metrics.LoadBytes: 8833 * 992, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 992, metrics.GPUPrefixQueries: 3000}
	ttft0, ttftR := 400.0, 40.0
	seq := isolated("seq",
		record.Request{Ordinal: 0, PlannedTokens: 1200, Prompt: record.Prompt{Identity: "p0"}, Result: record.Result{PromptTokens: i(1000), TimeToFirstOutputMS: &ttft0, VisibleAnswer: true}, Counters: span(c0, c1)},
		record.Request{Ordinal: 1, PlannedTokens: 1200, Prompt: record.Prompt{Identity: "p1"}, Result: record.Result{PromptTokens: i(1000), ReasoningOnly: true}, Counters: span(c1, c2)},
	)
	replay := record.StepArtifact{Schema: record.StepSchema, Step: "replay", Kind: record.KindReplay, DeltaScope: record.ScopeRequest, Requests: []record.Request{{
		Step: "replay", Ordinal: 0, Replay: true, ReplayOf: &record.ReplayRef{Step: "seq", Request: 0}, PlannedTokens: 1200,
		Prompt: record.Prompt{Identity: "p0"}, Result: record.Result{PromptTokens: i(1000), CachedPromptTokens: i(992), TimeToFirstOutputMS: &ttftR, OutputTokens: 7},
		Counters: span(c2, c3), Samples: &record.Samples{PeakKVUsage: f(0.5)},
		Verdict: &record.Decision{Verdict: verdict.CPUReload, Reason: "992 tokens reloaded", SetupValid: capacity.Yes, SetupReason: "the capacity math", Interpretation: "reloaded.",
			Capacity: &record.Capacity{CanProveReload: capacity.Yes}},
	}}}
	return []Step{Assemble(seq), Assemble(replay)}
}

func TestSequenceSection(t *testing.T) {
	secs := BuildSections(seedRun(), []string{"step-01-seq.json", "step-02-replay.json"})
	s := secs[0].Sequence
	if s == nil || s.Artifact != "step-01-seq.json" || s.Requests != 2 || s.PlannedContextTokensEach != 1200 || !s.StoreProven ||
		*s.GPUToCPUBytesDelta != 20790*2000 || *s.GPUToCPUBytesAfter != 20790*2000 || *s.PrefixQueriesAfter != 2000 ||
		s.VisibleAnswerPasses != 1 || s.ReasoningOnlyFailures != 1 || !reflect.DeepEqual(s.FailedRequestIndices, []int{1}) || !s.CountersValid {
		t.Fatalf("%+v", s)
	}
	// Differing plans are listed; a failed request is counted as failed.
	steps := seedRun()
	steps[0].Requests[1].PlannedTokens = 900
	steps[0].Requests[1].Result = record.Result{ErrorKind: "http_status", Error: "500"}
	s = BuildSections(steps, nil)[0].Sequence
	if !reflect.DeepEqual(s.PlannedContextTokensEach, []int{1200, 900}) || !reflect.DeepEqual(s.FailedRequestIndices, []int{1}) || s.ReasoningOnlyFailures != 0 {
		t.Fatalf("%+v", s)
	}
	unread := Assemble(isolated("seq", record.Request{CountersError: "timeout"}))
	if s := BuildSections([]Step{unread}, nil)[0].Sequence; s.CountersValid || s.GPUToCPUBytesDelta != nil || !strings.Contains(s.InvalidReasons[0], "counters not read") {
		t.Fatalf("unread: %+v", s)
	}
}

func TestReplaySection(t *testing.T) {
	r := BuildSections(seedRun(), nil)[1].Replay
	if r == nil || r.ReplayOf != "seq[0]" || !r.IdentityMatchesOriginal || *r.OriginalTimeToFirstOutputMS != 400 || *r.CachedFraction != 0.992 ||
		*r.ExternalPrefixHitsDelta != 992 || *r.CPUToGPUBytesDelta != 8833*992 || *r.GPUPrefixHitsDelta != 0 || *r.ExternalPrefixHitsBefore != 0 ||
		r.Verdict != verdict.CPUReload || r.SetupValid != capacity.Yes || r.Interpretation != "reloaded." || r.Capacity == nil || *r.PeakBlockOccupancy != 0.5 {
		t.Fatalf("%+v", r)
	}
	// A replay the run never sent, or whose verdict was never decided, is invalid in verdict's words.
	empty := Assemble(record.StepArtifact{Step: "replay", Kind: record.KindReplay})
	if r := BuildSections([]Step{empty}, nil)[0].Replay; r.Verdict != verdict.Invalid || r.VerdictReason != "the run stopped before the replay was sent" || r.SetupValid != capacity.Unknown {
		t.Fatalf("unsent: %+v", r)
	}
	steps := seedRun()
	steps[1].Requests[0].Verdict = nil
	if r := BuildSections(steps, nil)[1].Replay; r.Verdict != verdict.Invalid || !strings.Contains(r.VerdictReason, "never decided") && !strings.Contains(r.VerdictReason, "before the replay's verdict was decided") {
		t.Fatalf("undecided: %+v", r)
	}
}

// TestDeriveRun: the run record's derived parts come from the steps once: sections, the
// measured bytes per token, repeats for several repetitions, and a control's section.
func TestDeriveRun(t *testing.T) {
	sc := &scenarios.Scenario{Name: "x", Study: scenarios.Study{Role: "control", Key: "offload8_control", Sequence: "two, then a replay"}}
	r := NewRun(RunInfo{Scenario: sc, ObservedAt: time.Date(2026, 12, 1, 0, 0, 0, 0, time.UTC), Status: record.StatusCompleted, ServedModel: "m", ModelRoot: "org/m", ServerVersion: "0.11",
		Cache: record.Cache{GPUKVCacheTokens: 4096, CPUOffloadGiB: 8}})
	if r.Model.ServedName != "m" || r.Model.Repo != "org/m" || r.Runtime.Engine != "0.11" || r.ObservedAt != "2026-12-01T00:00:00Z" {
		t.Fatalf("header %+v", r)
	}
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0, Artifacts: []string{"s1", "s2"}}, Steps: seedRun()}})
	if len(r.Sections) != 2 || r.Repeats != nil || r.Control == nil {
		t.Fatalf("derived %+v", r)
	}
	// 3,000 queried tokens, 992 of them external hits: 2,008 computed.
	if s := *r.Cache.StoreBytesPerTokenMeasured; s != 20790*2000/2008.0 {
		t.Fatalf("stored bytes per token %v", s)
	}
	if l := *r.Cache.LoadBytesPerTokenMeasured; l != 8833 {
		t.Fatalf("loaded bytes per token %v", l)
	}
	c := r.Control
	if c.ReplayVerdict != verdict.CPUReload || *c.ReplayCachedFraction != 0.992 || *c.CPUToGPUBytesAfter != 8833*992 || !reflect.DeepEqual(c.Artifacts, []string{"s1", "s2"}) || c.Sequence != "two, then a replay" {
		t.Fatalf("control %+v", c)
	}
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0}, Steps: seedRun()}, {Repetition: record.Repetition{Index: 1}, Steps: seedRun()}})
	if r.Repeats == nil || r.Repeats.Count != 2 || !r.Repeats.VerdictsAgree || len(r.Repetitions) != 2 || len(r.Repetitions[1].Sections) != 2 {
		t.Fatalf("repeats %+v", r.Repeats)
	}
	r.Derive(nil)
	if r.Sections != nil || r.Repeats != nil || r.Cache.StoreBytesPerTokenMeasured != nil {
		t.Fatal("deriving nothing kept old parts")
	}
}

// TestRunJSONRoundTrip: run.json keeps the seed records' layout (each step's section under
// its id) and reads back into the same sections.
func TestRunJSONRoundTrip(t *testing.T) {
	sc := &scenarios.Scenario{Name: "x", Steps: []scenarios.Step{{ID: "seq"}, {ID: "replay", Replay: &scenarios.ReplayRef{Step: "seq"}}}}
	r := NewRun(RunInfo{Scenario: sc, Status: record.StatusCompleted})
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0}, Steps: seedRun()}})
	r.Artifacts = []record.ArtifactRef{{Path: "step-01-seq.json", SHA256: "ab"}}
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{`"schema":"anvil-serving.kv-offload-replay/v1"`, `"seq":{"artifact"`, `"replay":{"artifact"`, `"steps":["seq","replay"]`, `"verdict":"cpu_reload"`} {
		if !strings.Contains(string(data), want) {
			t.Errorf("run.json lacks %s", want)
		}
	}
	var back Run
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if back.Replay("replay") == nil || back.Replay("replay").Verdict != verdict.CPUReload || back.Sequence("seq") == nil || len(back.Artifacts) != 1 || back.Section("nope") != nil {
		t.Fatalf("read back %+v", back)
	}
	if v, ok := back.Section("replay").Field("evidence.setup_valid"); !ok || v.Text != "yes" {
		t.Fatalf("field %+v %v", v, ok)
	}
	if v, ok := back.Section("replay").Field("cached_fraction"); !ok || *v.Number != 0.992 {
		t.Fatalf("field %+v %v", v, ok)
	}
	if _, ok := back.Section("replay").Field("no_such_field"); ok {
		t.Fatal("a missing field was found")
	}
}

// TestControlReadsAfterTheReplay: a control's "after" counters are read right after its
// replay, as seed 001's are, not after the cold twin that follows it in the same step.
func TestControlReadsAfterTheReplay(t *testing.T) {
	steps := seedRun()
	a := steps[1].StepArtifact
	c3 := map[metrics.Counter]float64{metrics.StoreBytes: 20790 * 2000, metrics.LoadBytes: 8833 * 992, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 992, metrics.GPUPrefixQueries: 3000}
	c4 := map[metrics.Counter]float64{metrics.StoreBytes: 20790 * 3000, metrics.LoadBytes: 8833 * 992, metrics.GPUPrefixHits: 128, metrics.ExternalPrefixHits: 992, metrics.GPUPrefixQueries: 4000}
	a.Requests = append(a.Requests, record.Request{Step: "replay", IndexInStep: 1, Ordinal: 1, ColdTwin: &record.ColdTwin{},
		Result: record.Result{PromptTokens: i(1000)}, Counters: span(c3, c4)})
	steps[1] = Assemble(a)
	if got := *steps[1].Span.After(metrics.GPUPrefixHits); got != 128 {
		t.Fatalf("the step's span ends after the twin at %v GPU hits", got)
	}
	sc := &scenarios.Scenario{Name: "x", Study: scenarios.Study{Role: "control", Key: "offload8_control"}}
	r := NewRun(RunInfo{Scenario: sc, Status: record.StatusCompleted})
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0}, Steps: steps}})
	c := r.Control
	if c == nil || *c.GPUPrefixHitsAfter != 0 || *c.ExternalPrefixHitsAfter != 992 || *c.CPUToGPUBytesAfter != 8833*992 {
		t.Fatalf("control %+v: want the replay's own after-counters", c)
	}
}

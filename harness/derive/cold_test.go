package derive

import (
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// hitsAround is a valid counter window in which the prefix caches hit gpu and ext tokens.
func hitsAround(gpu, ext float64) *record.Counters {
	return span(map[metrics.Counter]float64{metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0},
		map[metrics.Counter]float64{metrics.GPUPrefixHits: gpu, metrics.ExternalPrefixHits: ext})
}

func TestWarmSteps(t *testing.T) {
	replayOf := func(tokens, cached int) Step {
		return Assemble(record.StepArtifact{Step: "replay", Kind: record.KindReplay, DeltaScope: record.ScopeRequest, Requests: []record.Request{coldRequest(tokens, cached)}})
	}
	usageWarm := Assemble(isolated("seq", coldRequest(1800, 1792), coldRequest(1800, 1792), coldRequest(1800, 1792)))
	noUsage := func(gpu, ext float64) Step {
		a, b := coldRequest(1800, -1), coldRequest(1800, -1)
		a.Counters, b.Counters = hitsAround(0, 0), hitsAround(gpu, ext)
		return Assemble(isolated("seq", a, b))
	}
	overlapping := func(gpu, ext float64) Step {
		a := isolated("burst", coldRequest(1800, -1), coldRequest(1800, -1), coldRequest(1800, -1))
		a.DeltaScope, a.Counters = record.ScopeStep, hitsAround(gpu, ext)
		return Assemble(a)
	}
	nested := Assemble(isolated("nested", coldRequest(700, 0), coldRequest(800, 688), coldRequest(1000, 784)))
	nestedWarm := Assemble(isolated("nested", coldRequest(700, 688), coldRequest(800, 688), coldRequest(1000, 784)))
	cases := []struct {
		name   string
		steps  []Step
		nested bool
		want   map[int]string // step index -> part of the reason
	}{
		{"cold sequence: the shared prefix only", []Step{Assemble(isolated("seq", coldRequest(1800, 0), coldRequest(1800, 128), coldRequest(1800, 128))), replayOf(1800, 1792)}, false, nil},
		{"warm sequence by usage; the replay is no cold step", []Step{usageWarm, replayOf(1800, 1792)}, false,
			map[int]string{0: "3 of its 3 requests came back 99.56% cached (5376 of 5400 prompt tokens, 4944 beyond what the run itself could have cached; usage's cached tokens)"}},
		{"warm by the hits around each request (no usage)", []Step{noUsage(128, 1664)}, false, map[int]string{0: "1 of its 2 requests came back 99.56% cached (1792 of 1800 prompt tokens, 1648 beyond what the run itself could have cached; prefix-cache hits around each request)"}},
		{"cold by the hits around each request", []Step{noUsage(128, 0)}, false, nil},
		{"warm overlapping step by the step's hits", []Step{overlapping(400, 4800)}, false, map[int]string{0: "its 3 requests came back 96.30% cached"}},
		{"cold overlapping step", []Step{overlapping(256, 0)}, false, nil},
		{"nested prompts hit the prompts they extend", []Step{nested}, true, nil},
		{"nested, the first prompt warm", []Step{nestedWarm}, true, map[int]string{0: "1 of its 3 requests"}},
		// Read as shared-prefix prompts, the same nested hits would be warm: the mode matters.
		{"nested prompts read as shared-prefix ones", []Step{nested}, false, map[int]string{0: "2 of its 3 requests"}},
		{"a second sequence nested on the first", []Step{nested, Assemble(isolated("more", coldRequest(1200, 992)))}, true, nil},
		{"a failed request is no evidence", []Step{Assemble(isolated("seq", record.Request{Prompt: record.Prompt{Tokens: 1800, SharedPrefixTokens: 128}, Result: record.Result{ErrorKind: "http_status", Error: "500", CachedPromptTokens: i(1792)}}))}, false, nil},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			got := WarmSteps(c.steps, Prompts{Nested: c.nested, BlockSize: 16})
			if len(got) != len(c.want) {
				t.Fatalf("findings at %v, want %v", keysOf(got), c.want)
			}
			for k, want := range c.want {
				if got[k] == nil || !strings.Contains(got[k].Reason, want) {
					t.Errorf("step %d: %v, want %q", k, got[k], want)
				}
			}
		})
	}
}

// TestDeriveMarksWarmSteps: the record's sequence section carries the finding, in every
// repetition, and WarmFindings names each with its repetition.
func TestDeriveMarksWarmSteps(t *testing.T) {
	sc := &scenarios.Scenario{Name: "warm", Steps: []scenarios.Step{{ID: "seq"}}}
	warm := Assemble(isolated("seq", coldRequest(1800, 1792), coldRequest(1800, 1792)))
	cold := Assemble(isolated("seq", coldRequest(1800, 0), coldRequest(1800, 128)))
	r := NewRun(RunInfo{Scenario: sc, ObservedAt: time.Unix(0, 0), Status: record.StatusCompleted, Cache: record.Cache{BlockSize: 16}, Repeat: 2})
	r.Derive([]Repetition{{Repetition: record.Repetition{Index: 0}, Steps: []Step{cold}}, {Repetition: record.Repetition{Index: 1}, Steps: []Step{warm}}})
	if w := r.Sequence("seq").WarmCaches; w != nil {
		t.Errorf("repetition 0 was cold: %+v", w)
	}
	w := r.Repetitions[1].Sections[0].Sequence.WarmCaches
	if w == nil || w.Requests != 2 || w.Of != 2 || w.CachedTokens != 3584 || w.By != "usage's cached tokens" {
		t.Fatalf("repetition 1: %+v", w)
	}
	f := r.WarmFindings()
	if len(f) != 1 || !strings.HasPrefix(f[0], "repetition 1: warm caches: step seq is a cold sequence") {
		t.Errorf("findings %q", f)
	}
}

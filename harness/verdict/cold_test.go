package verdict

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/record"
)

// seedSequence is seed 001's eviction sequence as a cold step: six 113,674-token prompts
// behind an 8,000-token shared prefix, each request's usage cached tokens given.
func seedSequence(cached ...float64) ColdStep {
	s := ColdStep{Step: "eviction_sequence", BlockSize: 16, By: ByUsage}
	for k, c := range cached {
		q := ColdRequest{Index: k, PromptTokens: 113674, Reusable: 8000}
		if c >= 0 {
			q.Cached = f(c)
		}
		s.Requests = append(s.Requests, q)
	}
	return s
}

func TestColdCaches(t *testing.T) {
	nested := ColdStep{Step: "prefix_sequence", BlockSize: 16, By: ByUsage, Requests: []ColdRequest{
		{0, 52000, 8000, f(0)}, {1, 59000, 52000, f(51984)}, {2, 74000, 59000, f(58992)}}}
	overlapping := ColdStep{Step: "burst", BlockSize: 16, Requests: []ColdRequest{{0, 1800, 128, nil}, {1, 1800, 128, nil}, {2, 1800, 128, nil}}}
	cases := []struct {
		name     string
		s        ColdStep
		warm     bool
		requests int
		reason   string
	}{
		{"cold: nothing cached", seedSequence(0, 0, 0, 0, 0, 0), false, 0, ""},
		{"cold: the shared prefix hit from the second request on", seedSequence(0, 7984, 7984, 7984, 7984, 7984), false, 0, ""},
		{"cold: a block of rounding beyond the prefix", seedSequence(0, 8016, 8016, 8016, 8016, 8016), false, 0, ""},
		{"cold: some fresh tokens hit, fewer than half", seedSequence(0, 7984, 50000, 7984, 7984, 7984), false, 0, ""},
		{"warm: last night's prompts, 99.99% cached", seedSequence(113664, 113664, 113664, 113664, 113664, 113664), true, 6,
			"warm caches: step eviction_sequence is a cold sequence, yet 6 of its 6 requests came back 99.99% cached (681984 of 682044 prompt tokens, 633888 beyond what the run itself could have cached; usage's cached tokens)"},
		{"warm: one request of six", seedSequence(0, 7984, 7984, 113664, 7984, 7984), true, 1, "1 of its 6 requests came back 99.99% cached"},
		{"cold: usage absent", seedSequence(-1, -1, -1, -1, -1, -1), false, 0, ""},
		{"cold: nested prompts hit the prompt they extend", nested, false, 0, ""},
		{"warm: overlapping requests, step hits only", func() ColdStep { s := overlapping; s.StepHits = f(5100); return s }(), true, 3,
			"its 3 requests came back 94.44% cached (5100 of 5400 prompt tokens"},
		{"cold: overlapping requests, the prefix twice", func() ColdStep { s := overlapping; s.StepHits = f(256); return s }(), false, 0, ""},
		{"cold: overlapping requests, nothing known", overlapping, false, 0, ""},
		{"cold: a prompt no bigger than its prefix and a block", ColdStep{Step: "tiny", BlockSize: 16, Requests: []ColdRequest{{0, 140, 128, f(140)}}}, false, 0, ""},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			w := ColdCaches(c.s)
			if (w != nil) != c.warm {
				t.Fatalf("warm = %v, want %v (%+v)", w != nil, c.warm, w)
			}
			if w == nil {
				return
			}
			if w.Requests != c.requests || !strings.Contains(w.Reason, c.reason) || !strings.Contains(w.Reason, "--salt random") {
				t.Errorf("%d warm requests, reason %q; want %d, %q", w.Requests, w.Reason, c.requests, c.reason)
			}
		})
	}
}

// TestWarmCachesInvalidateTheSetup: a replay after a warm sequence cannot prove a reload,
// whatever the capacity math or the replay's own reload says, and its interpretation names
// warm caches; without the finding the same evidence is a valid setup.
func TestWarmCachesInvalidateTheSetup(t *testing.T) {
	e := Evidence{PromptTokens: i(113674), CachedPromptTokens: i(113664), SharedPrefixTokens: 8000, BlockSize: 16, LoadBytesPerToken: 8833,
		Counters: window(gpuHits, 0.0, extHits, 113664.0, load, 1003994112.0),
		Setup:    &capacity.Assessment{Capacity: record.Capacity{CanProveReload: capacity.Yes}}}
	if d := Decide(e); d.SetupValid != capacity.Yes || d.Verdict != CPUReload {
		t.Fatalf("without warm caches: %s, setup %s", d.Verdict, d.SetupValid)
	}
	e.WarmCaches = []WarmCaches{*ColdCaches(seedSequence(113664, 113664, 113664, 113664, 113664, 113664))}
	d := Decide(e)
	if d.Verdict != CPUReload {
		t.Errorf("the verdict says where the tokens came from, warm or not: %s", d.Verdict)
	}
	if d.SetupValid != capacity.No || !strings.HasPrefix(d.SetupReason, "warm caches: step eviction_sequence") {
		t.Errorf("setup %s: %s", d.SetupValid, d.SetupReason)
	}
	if !strings.Contains(d.Interpretation, "The setup cannot prove a reload: warm caches: ") {
		t.Errorf("interpretation %q", d.Interpretation)
	}
}

// TestTraceCaches: a trace step is warm when its cached tokens pass the most any cache could
// serve of its trace, plus a block per request, by half of the tokens no cache could serve.
func TestTraceCaches(t *testing.T) {
	step := func(cached, maxHit float64) TraceStep {
		return TraceStep{Step: "load", Requests: 100, BlockSize: 16, PromptTokens: 100000, CachedTokens: cached, By: ByStepHits, MaxHitRate: maxHit}
	}
	cases := []struct {
		name string
		s    TraceStep
		warm bool
	}{
		{"warm: a second replay", step(97200, 0.465), true},
		{"cold: the trace's own reuse", step(46500, 0.465), false},
		{"cold: reuse, a block per request and less than half the rest", step(46500+1600+26000, 0.465), false},
		{"warm: just past half the rest", step(46500+1600+27000, 0.465), true},
		{"cold: a trace an unbounded cache serves whole", step(100000, 1), false},
		{"cold: nothing measured", TraceStep{Step: "load", MaxHitRate: 0.5}, false},
	}
	for _, c := range cases {
		w := TraceCaches(c.s)
		if (w != nil) != c.warm {
			t.Errorf("%s: %+v, want warm %v", c.name, w, c.warm)
		}
	}
	if w := TraceCaches(step(97200, 0.465)); w == nil || w.Requests != 100 || w.Of != 100 || w.CachedBeyondReusable != 97200-46500-1600 ||
		!strings.Contains(w.Reason, "at most 46.50%, yet its 100 requests came back 97.20% cached") || !strings.Contains(w.Reason, "--salt random") {
		t.Errorf("finding %+v", w)
	}
}

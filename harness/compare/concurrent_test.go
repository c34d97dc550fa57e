package compare

import (
	"fmt"
	"math/rand"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/stats"
)

// asTrace replaces r's repetitions with one trace step each, whose requests took ttfts[k]
// milliseconds to first output in repetition k; its section is derived from the requests.
func asTrace(r *runs.Run, ttfts [][]float64) { asConcurrent(r, record.KindTrace, ttfts) }

// asConcurrent is asTrace for a step of kind (trace or conversation).
func asConcurrent(r *runs.Run, kind string, ttfts [][]float64) {
	base := r.Repetitions[0]
	r.Repetitions = nil
	for k, reps := range ttfts {
		st := record.StepArtifact{Step: "trace", Kind: kind, DeltaScope: record.ScopeStep}
		for i, v := range reps {
			q := record.Request{Step: "trace", IndexInStep: i}
			q.Prompt.Identity, q.Prompt.Shape = fmt.Sprintf("sha256:%d", i), fmt.Sprintf("shape:%d", i)
			q.Result.TimeToFirstOutputMS = ptr(v)
			q.Result.DecodeTokensPerSecond = ptr(50.0)
			st.Requests = append(st.Requests, q)
		}
		step := derive.Assemble(st)
		section := record.Section{Step: "trace"}
		if kind == record.KindTrace {
			sec := derive.TraceOf(step, "trace.json")
			section.Trace = &sec
		} else {
			sec := derive.ConversationOf(step, "trace.json")
			section.Conversation = &sec
		}
		rep := derive.Repetition{Repetition: base.Repetition, Steps: []derive.Step{step}, Sections: []record.Section{section}}
		rep.Index = k
		r.Repetitions = append(r.Repetitions, rep)
	}
}

// ttftsOf are n requests' TTFTs from 10 ms up, in the order a seeded shuffle gives, each
// scaled by up to ±jitter: the same distribution, met by other requests.
func ttftsOf(n int, seed int64, jitter float64) []float64 {
	rng := rand.New(rand.NewSource(seed))
	out := make([]float64, n)
	for i := range out {
		out[i] = (10 + float64(i)) * (1 + jitter*(2*rng.Float64()-1))
	}
	rng.Shuffle(n, func(i, j int) { out[i], out[j] = out[j], out[i] })
	return out
}

// TestCompareTraceStepsByDistribution: a trace step's requests overlap, so request i meets
// other neighbours every run; two runs of the same distribution in another order are no
// regression, and a shifted p90 is.
func TestCompareTraceStepsByDistribution(t *testing.T) {
	b, c := load(t, "baseline"), load(t, "baseline")
	asTrace(b, [][]float64{ttftsOf(40, 1, 0.01), ttftsOf(40, 2, 0.01)})
	asTrace(c, [][]float64{ttftsOf(40, 3, 0.01), ttftsOf(40, 4, 0.01)})
	res := mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	if res.Regression {
		t.Fatalf("shuffled requests of one distribution regressed: %q", res.Findings)
	}
	st := res.Steps[0]
	if len(st.Requests) != 0 {
		t.Errorf("a trace step compared request by request: %d requests", len(st.Requests))
	}
	var names []string
	for _, m := range st.Distribution {
		names = append(names, m.Metric)
		if m.Judgement != stats.Unchanged {
			t.Errorf("%s: %s", m.Metric, m.Judgement)
		}
	}
	want := []string{"time_to_first_output_ms_p50", "time_to_first_output_ms_p90", "time_to_first_output_ms_p99", "decode_tokens_per_second_p50"}
	if !slices.Equal(names, want) {
		t.Fatalf("distribution metrics %q, want %q (no tier shares without counters)", names, want)
	}

	// The slowest sixth of the candidate's requests are 60% slower: p90 and p99 move.
	slow := func(v []float64) []float64 {
		for i := range v {
			if v[i] > 43 {
				v[i] *= 1.6
			}
		}
		return v
	}
	asTrace(c, [][]float64{slow(ttftsOf(40, 3, 0.01)), slow(ttftsOf(40, 4, 0.01))})
	res = mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	var got []string
	for _, m := range res.Steps[0].Distribution {
		if m.Judgement == stats.Regressed {
			got = append(got, m.Metric)
		}
	}
	if !slices.Equal(got, []string{"time_to_first_output_ms_p90", "time_to_first_output_ms_p99"}) {
		t.Fatalf("regressed %q, findings %q", got, res.Findings)
	}
	if len(res.Findings) != 2 || !strings.HasPrefix(res.Findings[0], "trace time_to_first_output_ms_p90 rose") {
		t.Errorf("findings %q", res.Findings)
	}
	var text strings.Builder
	if err := res.WriteText(&text); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(text.String(), "trace  all  time_to_first_output_ms_p90") {
		t.Errorf("the table has no whole-step row:\n%s", text.String())
	}
}

// TestCompareConversationStepsByDistribution: a conversation step compares as a trace step
// does (it has no decode rate in its section), and a request that failed only in the
// candidate is a finding.
func TestCompareConversationStepsByDistribution(t *testing.T) {
	b, c := load(t, "baseline"), load(t, "baseline")
	asConcurrent(b, record.KindConversation, [][]float64{ttftsOf(30, 1, 0.01)})
	asConcurrent(c, record.KindConversation, [][]float64{ttftsOf(30, 2, 0.01)})
	res := mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	if res.Regression || len(res.Steps[0].Requests) != 0 || len(res.Steps[0].Distribution) != 3 {
		t.Fatalf("findings %q, step %+v", res.Findings, res.Steps[0])
	}
	c.Repetitions[0].Steps[0].Requests[5].Result.ErrorKind = "http_status"
	c.Repetitions[0].Sections[0].Conversation.FailedRequests = 1
	res = mustCompare(t, b, c, Options{Tolerance: DefaultTolerance})
	if len(res.Findings) != 1 || !strings.Contains(res.Findings[0], "1 request(s) failed in the candidate, none in the baseline") {
		t.Errorf("findings %q", res.Findings)
	}
}

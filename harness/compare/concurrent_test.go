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
func asTrace(r *runs.Run, ttfts [][]float64) {
	base := r.Repetitions[0]
	r.Repetitions = nil
	for k, reps := range ttfts {
		st := record.StepArtifact{Step: "trace", Kind: record.KindTrace, DeltaScope: record.ScopeStep}
		for i, v := range reps {
			q := record.Request{Step: "trace", IndexInStep: i}
			q.Prompt.Identity, q.Prompt.Shape = fmt.Sprintf("sha256:%d", i), fmt.Sprintf("shape:%d", i)
			q.Result.TimeToFirstOutputMS = ptr(v)
			q.Result.DecodeTokensPerSecond = ptr(50.0)
			st.Requests = append(st.Requests, q)
		}
		step := derive.Assemble(st)
		sec := derive.TraceOf(step, "trace.json")
		rep := derive.Repetition{Repetition: base.Repetition, Steps: []derive.Step{step}, Sections: []record.Section{{Step: "trace", Trace: &sec}}}
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

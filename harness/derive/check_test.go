package derive

import (
	"errors"
	"math"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

// TestCheckNamesImpossibleValues: each value no measurement gives is named by its JSON path;
// absent values, zeros and server counter readings are not judged.
func TestCheckNamesImpossibleValues(t *testing.T) {
	ok := func() record.Request {
		ttft, decode := 40.0, 200.0
		return record.Request{PlannedTokens: 400, Prompt: record.Prompt{Tokens: 400}, Result: record.Result{TimeToFirstOutputMS: &ttft, DecodeTokensPerSecond: &decode, PromptTokens: i(400), CachedPromptTokens: i(0)},
			// A server's counter readings are kept as read, whatever they are.
			Counters: span(map[metrics.Counter]float64{metrics.StoreBytes: -5}, map[metrics.Counter]float64{metrics.StoreBytes: -3})}
	}
	cases := []struct {
		edit func(q *record.Request)
		want string
	}{
		{func(q *record.Request) {}, ""},
		{func(q *record.Request) { q.Result.TimeToFirstOutputMS = nil; q.Result.PromptTokens = nil }, ""},
		{func(q *record.Request) { *q.Result.TimeToFirstOutputMS = -5 }, "result.time_to_first_output_ms is -5: no duration, rate or count is negative"},
		{func(q *record.Request) { *q.Result.DecodeTokensPerSecond = -1e300 }, "result.decode_tokens_per_second is -1e+300"},
		{func(q *record.Request) { *q.Result.DecodeTokensPerSecond = math.Inf(1) }, "result.decode_tokens_per_second is +Inf: not a number any measurement gives"},
		{func(q *record.Request) { q.Result.EndToEndMS = f(math.NaN()) }, "result.end_to_end_ms is NaN"},
		{func(q *record.Request) { q.Result.OutputTokens = -1 }, "result.output_tokens is -1: no count is negative"},
		{func(q *record.Request) { q.Result.CachedPromptTokens = i(-8) }, "result.cached_prompt_tokens is -8"},
		{func(q *record.Request) { q.PlannedTokens = -400 }, "planned_tokens is -400"},
		{func(q *record.Request) { q.Result.InterTokenMS = &record.Spread{N: 3, Median: 1, P90: -2} }, "result.inter_token_ms.p90 is -2"},
		{func(q *record.Request) { q.Isolation = &record.Isolation{WaitAfterMS: -1} }, "isolation.wait_after_ms is -1"},
	}
	for _, c := range cases {
		q := ok()
		c.edit(&q)
		err := q.Check()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("a sound request: %v", err)
		case c.want != "" && (!errors.Is(err, record.ErrImpossible) || !strings.HasPrefix(err.Error(), c.want)):
			t.Errorf("%v, want %q", err, c.want)
		}
	}
	a := record.StepArtifact{Requests: []record.Request{ok(), ok()}}
	*a.Requests[1].Result.TimeToFirstOutputMS = -5
	if err := a.Check(); err == nil || !strings.HasPrefix(err.Error(), "requests[1].result.time_to_first_output_ms is -5") {
		t.Errorf("artifact: %v", err)
	}
	a = record.StepArtifact{Client: &record.ClientCost{CPUMS: -3}}
	if err := a.Check(); err == nil || !strings.HasPrefix(err.Error(), "client.cpu_ms is -3") {
		t.Errorf("client cost: %v", err)
	}
}

package derive

import (
	"fmt"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// coldRequest is a sequence request of tokens prompt tokens behind a 128-token shared
// prefix; cached < 0 leaves usage's cached tokens absent.
func coldRequest(tokens, cached int) record.Request {
	q := record.Request{Prompt: record.Prompt{Tokens: tokens, SharedPrefixTokens: 128}, Result: record.Result{PromptTokens: i(tokens)}}
	if cached >= 0 {
		q.Result.CachedPromptTokens = i(cached)
	}
	return q
}

func keysOf[V any](m map[int]V) []int {
	var out []int
	for k := range m {
		out = append(out, k)
	}
	return out
}

func present(v float64, source string) metrics.Reading {
	return metrics.Reading{Value: v, Present: true, Source: source}
}

func f(v float64) *float64 { return &v }

// snap is a snapshot with the given counters present, each read from "test:<name>".
func snap(counters map[metrics.Counter]float64) metrics.Snapshot {
	s := metrics.Snapshot{Counters: map[metrics.Counter]metrics.Reading{}}
	for c, v := range counters {
		s.Counters[c] = present(v, "test:"+string(c))
	}
	return s
}

func ids(v ...int) []int { return v }

func eqInt(a, b *int) bool { return a == nil && b == nil || a != nil && b != nil && *a == *b }

func fmtInt(p *int) any {
	if p == nil {
		return "null"
	}
	return *p
}

func fidelityScenario(t *testing.T, temperature float64) *scenarios.Scenario {
	t.Helper()
	src := `name = "f"
[request]
temperature = ` + fmt.Sprintf("%.1f", temperature) + `
[[step]]
id = "seq"
planned_context_tokens = [1200]
[[step]]
id = "replay"
replay = { step = "seq", request = 0 }
`
	sc, err := scenarios.Parse([]byte(src), "f.toml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func i(v int) *int { return &v }

func isolated(id string, reqs ...record.Request) record.StepArtifact {
	for i := range reqs {
		reqs[i].Step, reqs[i].IndexInStep = id, i
	}
	return record.StepArtifact{Schema: record.StepSchema, Step: id, Kind: record.KindSequence, DeltaScope: record.ScopeRequest, Requests: reqs}
}

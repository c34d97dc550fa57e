package study

import (
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
)

// shardStep is shard k of 2 with the server's prefix counters read at from and to: queries
// and hits before and after.
func shardStep(k int, from, to time.Time, q0, q1, h0, h1 float64) derive.Step {
	c := &record.Counters{BeforeAt: from, AfterAt: to, Valid: true, Values: map[metrics.Counter]record.CounterChange{
		metrics.GPUPrefixQueries: {Before: &q0, After: &q1, Source: "queries"},
		metrics.GPUPrefixHits:    {Before: &h0, After: &h1, Source: "hits"},
	}}
	var st derive.Step
	st.Step = "load"
	st.Trace = &record.TraceReplay{Shard: &record.TraceShard{Index: k, Count: 2}}
	st.Counters = c
	return st
}

// TestJoinStepTiers: shards that ran at once read the same server's counters, each span
// holding both shards' traffic: the join takes the one span from the first reading to the
// last, not their sum; shards that ran apart add up; a counter going down between the
// shards' readings is a restart, and the join has no split.
func TestJoinStepTiers(t *testing.T) {
	t0 := time.Date(2026, 12, 2, 3, 0, 0, 0, time.UTC)
	at := func(s int) time.Time { return t0.Add(time.Duration(s) * time.Second) }
	cases := []struct {
		name          string
		a, b          derive.Step
		method        string
		prompt, gpuIn float64
	}{
		// At once: queries 100 -> 1000 over both (shard 1 read 100..900, shard 2 150..1000).
		{"overlapping", shardStep(1, at(0), at(10), 100, 900, 10, 500), shardStep(2, at(1), at(11), 150, 1000, 20, 600), "span", 900, 590},
		{"one after the other", shardStep(1, at(0), at(10), 100, 500, 10, 210), shardStep(2, at(20), at(30), 500, 800, 210, 310), "sum", 700, 300},
		{"restart", shardStep(1, at(0), at(10), 100, 900, 10, 500), shardStep(2, at(5), at(11), 50, 1000, 20, 600), "", 0, 0},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			j := joinStep([]derive.Step{c.a, c.b})
			if c.method == "" {
				if j.Tiers != nil || j.TiersUnavailable == "" {
					t.Errorf("tiers %+v, want none and why", j.Tiers)
				}
				return
			}
			if j.Tiers == nil || j.TiersMethod != c.method || *j.Tiers.PromptTokens != c.prompt || *j.Tiers.GPUHitTokens != c.gpuIn {
				t.Fatalf("tiers %+v (%s, %s), want %s: %v prompt, %v GPU hits", j.Tiers, j.TiersMethod, j.TiersUnavailable, c.method, c.prompt, c.gpuIn)
			}
			if j.Ideal != nil || j.IdealUnavailable == "" {
				t.Error("an ideal summed over shards")
			}
		})
	}
}

package study

import (
	"cmp"
	"fmt"
	"maps"
	"slices"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// ShardsSchema is the schema of a join of shard runs (kvbench summarize --shards).
const ShardsSchema = "anvil-serving.kvbench-trace-shards/v1"

// Shards is the N runs of one scenario's trace window, each with --shard K/N, joined into
// one record of the window (docs/traces.md, "Sharding").
type Shards struct {
	Schema   string `json:"schema"`
	Scenario string `json:"scenario"`
	Count    int    `json:"shards"`
	// Runs are the shard runs in shard order.
	Runs  []ShardRun   `json:"runs"`
	Steps []ShardsStep `json:"steps"`
}

// ShardRun is one shard's run.
type ShardRun struct {
	Dir    string `json:"dir"`
	Shard  int    `json:"shard"`
	Status string `json:"status"`
}

// ShardsStep is one trace step over every shard: request counts and the per-request usage
// summed (each request was sent by one shard), and the tier split of the server's counters
// over all of them (TiersMethod says how; null with TiersUnavailable when it cannot be had).
type ShardsStep struct {
	Step            string `json:"step"`
	File            string `json:"file"`
	SHA256          string `json:"sha256"`
	PlannedRequests int    `json:"planned_requests"`
	Requests        int    `json:"requests"`
	FailedRequests  int    `json:"failed_requests"`
	// PromptTokens and CachedPromptTokens sum the requests' usage; null when a shard had none.
	PromptTokens       *float64 `json:"prompt_tokens"`
	CachedPromptTokens *float64 `json:"cached_prompt_tokens"`
	// Tiers: TiersMethod is "span" (the shards overlapped: the server's counters from the
	// first shard's reading before to the last's after, one span holding every shard) or
	// "sum" (the shards ran one after another: each span held its own requests, and their
	// changes add up).
	Tiers            *record.TierShares `json:"tiers"`
	TiersMethod      string             `json:"tiers_method,omitempty"`
	TiersUnavailable string             `json:"tiers_unavailable,omitempty"`
	// Ideal is null: each shard's ideal models its requests alone in the server's caches,
	// while the shards shared them, so the window's ideal is not their sum.
	Ideal            *record.IdealTiers `json:"ideal"`
	IdealUnavailable string             `json:"ideal_unavailable"`
}

// idealNotAdditive is why a join has no ideal.
const idealNotAdditive = "the ideal is not additive over shards (each shard's models its requests alone in the caches the shards shared): compute the window's with kvbench trace analyze at the pool sizes"

// ShardsDirs loads the runs in dirs and joins them (JoinShards).
func ShardsDirs(dirs []string, allowIncomplete bool) (*Shards, error) {
	rs, err := runs.LoadAll(absDirs(dirs))
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		if r.Status != record.StatusCompleted && !allowIncomplete {
			return nil, fmt.Errorf("summarize --shards: %s is %s (%s): not every step was measured (--allow-incomplete to join it anyway)", r.Dir, r.Status, r.StopReason)
		}
	}
	return JoinShards(rs)
}

// JoinShards joins the runs of shards 1..N of one scenario's trace: it refuses runs of
// another scenario or trace, of different N, a shard twice or missing, or a run that is no
// shard.
func JoinShards(rs []*runs.Run) (*Shards, error) {
	type shardRun struct {
		r     *runs.Run
		index int
		steps []derive.Step
	}
	var all []shardRun
	out := &Shards{Schema: ShardsSchema}
	for _, r := range rs {
		var steps []derive.Step
		index, count := 0, 0
		for _, st := range r.Repetitions[0].Steps {
			if st.Trace == nil {
				continue
			}
			sh := st.Trace.Shard
			if sh == nil {
				return nil, fmt.Errorf("summarize --shards: %s step %s replayed its whole window, not a shard (--shard K/N)", r.Dir, st.Step)
			}
			if index != 0 && (sh.Index != index || sh.Count != count) {
				return nil, fmt.Errorf("summarize --shards: %s: its steps replayed different shards", r.Dir)
			}
			index, count = sh.Index, sh.Count
			steps = append(steps, st)
		}
		switch {
		case len(steps) == 0:
			return nil, fmt.Errorf("summarize --shards: %s has no trace step", r.Dir)
		case out.Count == 0:
			out.Count, out.Scenario = count, r.Scenario.Name
		case r.Scenario.Name != out.Scenario:
			return nil, fmt.Errorf("summarize --shards: %s ran scenario %q, %s %q: not shards of one scenario", r.Dir, r.Scenario.Name, all[0].r.Dir, out.Scenario)
		case count != out.Count:
			return nil, fmt.Errorf("summarize --shards: %s is a shard of %d, %s of %d", r.Dir, count, all[0].r.Dir, out.Count)
		}
		for _, o := range all {
			if o.index == index {
				return nil, fmt.Errorf("summarize --shards: %s and %s are both shard %d/%d", o.r.Dir, r.Dir, index, count)
			}
			if len(o.steps) != len(steps) {
				return nil, fmt.Errorf("summarize --shards: %s has %d trace steps, %s %d", r.Dir, len(steps), o.r.Dir, len(o.steps))
			}
			for i := range steps {
				a, b := o.steps[i].Trace, steps[i].Trace
				if o.steps[i].Step != steps[i].Step || a.SHA256 != b.SHA256 || a.StartSeconds != b.StartSeconds || a.DurationSeconds != b.DurationSeconds ||
					a.RequestLimit != b.RequestLimit || a.MaxInputTokens != b.MaxInputTokens || a.BlockTokens != b.BlockTokens {
					return nil, fmt.Errorf("summarize --shards: %s step %s and %s step %s replayed different traces or windows", o.r.Dir, o.steps[i].Step, r.Dir, steps[i].Step)
				}
			}
		}
		all = append(all, shardRun{r, index, steps})
	}
	if len(all) != out.Count {
		var have []int
		for _, s := range all {
			have = append(have, s.index)
		}
		slices.Sort(have)
		return nil, fmt.Errorf("summarize --shards: %d runs of shards %v, want all %d shards", len(all), have, out.Count)
	}
	slices.SortFunc(all, func(a, b shardRun) int { return cmp.Compare(a.index, b.index) })
	for _, s := range all {
		out.Runs = append(out.Runs, ShardRun{Dir: s.r.Dir, Shard: s.index, Status: s.r.Status})
	}
	for i := range all[0].steps {
		var steps []derive.Step
		for _, s := range all {
			steps = append(steps, s.steps[i])
		}
		out.Steps = append(out.Steps, joinStep(steps))
	}
	return out, nil
}

// joinStep joins one trace step's shards.
func joinStep(steps []derive.Step) ShardsStep {
	first := steps[0].Trace
	j := ShardsStep{Step: steps[0].Step, File: first.File, SHA256: first.SHA256, IdealUnavailable: idealNotAdditive}
	prompt, cached := new(float64), new(float64)
	for _, st := range steps {
		s := derive.TraceOf(st, "")
		j.PlannedRequests += s.PlannedRequests
		j.Requests += s.Requests
		j.FailedRequests += s.FailedRequests
		prompt, cached = addOrNil(prompt, s.PromptTokens), addOrNil(cached, s.CachedPromptTokens)
	}
	j.PromptTokens, j.CachedPromptTokens = prompt, cached
	spans := make([]*record.Counters, len(steps))
	for i, st := range steps {
		if st.Counters == nil || !st.Counters.Valid {
			j.TiersUnavailable = fmt.Sprintf("shard %d/%d's counters are not usable", st.Trace.Shard.Index, st.Trace.Shard.Count)
			return j
		}
		spans[i] = st.Counters
	}
	slices.SortFunc(spans, func(a, b *record.Counters) int { return a.BeforeAt.Compare(b.BeforeAt) })
	overlap, gap := false, false
	end := spans[0].AfterAt
	for _, s := range spans[1:] {
		if s.BeforeAt.Before(end) {
			overlap = true
		} else {
			gap = true
		}
		if s.AfterAt.After(end) {
			end = s.AfterAt
		}
	}
	var split record.TierSplit
	switch {
	case overlap && gap:
		j.TiersUnavailable = "some shards overlapped and some ran apart: neither one span nor a sum of spans holds every shard's requests alone"
		return j
	case overlap:
		c, why := unionSpan(spans)
		if c == nil {
			j.TiersUnavailable = why
			return j
		}
		split, j.TiersMethod = derive.SplitTiers(c), "span"
	default:
		var ok bool
		if split, ok = sumTiers(spans); !ok {
			j.TiersUnavailable = "the shards' counters split the tiers from different sources: their counts do not add up"
			return j
		}
		j.TiersMethod = "sum"
	}
	shares := split.Shares()
	j.Tiers = &shares
	return j
}

// unionSpan is the server's counters from the earliest shard's reading before to the latest
// reading after (spans sorted by BeforeAt, overlapping), or nil and why: every reading of a
// counter, from all the shards in time order, must go up, or a restart could hide between.
func unionSpan(spans []*record.Counters) (*record.Counters, string) {
	last := spans[0]
	for _, s := range spans {
		if s.AfterAt.After(last.AfterAt) {
			last = s
		}
	}
	out := &record.Counters{BeforeAt: spans[0].BeforeAt, AfterAt: last.AfterAt, Values: map[record.Counter]record.CounterChange{}, Valid: true}
	type reading struct {
		at    int64
		value float64
	}
	for _, k := range slices.Sorted(maps.Keys(spans[0].Values)) {
		var rs []reading
		ok := true
		for _, s := range spans {
			cc := s.Values[k]
			if !cc.Present() || cc.Decreased {
				ok = false
				break
			}
			rs = append(rs, reading{s.BeforeAt.UnixNano(), *cc.Before}, reading{s.AfterAt.UnixNano(), *cc.After})
		}
		if !ok {
			continue // not read on every shard: absent from the union
		}
		slices.SortStableFunc(rs, func(a, b reading) int { return cmp.Compare(a.at, b.at) })
		for i := 1; i < len(rs); i++ {
			if rs[i].value < rs[i-1].value {
				return nil, fmt.Sprintf("%s went down between the shards' readings: the server restarted while they ran", k)
			}
		}
		b, a := spans[0].Values[k], last.Values[k]
		out.Values[k] = record.CounterChange{Before: b.Before, After: a.After, Source: a.Source}
	}
	return out, ""
}

// sumTiers adds the tier splits of spans that ran one after another; a count absent from
// any is absent from the sum. False when the splits come from different sources.
func sumTiers(spans []*record.Counters) (record.TierSplit, bool) {
	var sum record.TierSplit
	for i, s := range spans {
		t := derive.SplitTiers(s)
		if i == 0 {
			sum = t
			continue
		}
		if t.Source != sum.Source {
			return record.TierSplit{}, false
		}
		sum.PromptTokens = addOrNil(sum.PromptTokens, t.PromptTokens)
		sum.GPUHitTokens = addOrNil(sum.GPUHitTokens, t.GPUHitTokens)
		sum.HostHitTokens = addOrNil(sum.HostHitTokens, t.HostHitTokens)
		sum.RecomputeTokens = addOrNil(sum.RecomputeTokens, t.RecomputeTokens)
	}
	return sum, true
}

// addOrNil is a+b, nil when either is.
func addOrNil(a, b *float64) *float64 {
	if a == nil || b == nil {
		return nil
	}
	v := *a + *b
	return &v
}

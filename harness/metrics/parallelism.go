package metrics

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/units"
)

// Parallelism says what the labels of an engine's series split, for every family it reads,
// those it learns later included (docs/domain.md, "Parallelism labels"). Ranks of one
// replica see the same requests: each tensor- or pipeline-parallel rank holds its shard of
// the same tokens' KV, so a token count takes one rank and the ranks must agree (else the
// reading carries a note saying so), while bytes and seconds, each rank's own, add up.
// Replicas (data-parallel ranks, engines, workers) serve other requests: everything adds up.
type Parallelism struct {
	// Shards are the labels whose values are ranks of one replica (tp_rank, pp_rank,
	// LMCache's worker_id).
	Shards []string
	// Replicas are the labels whose values serve other requests (dp_rank, engine): their
	// series add up, as those of every label not named in Shards or Within do. Named so the
	// choice is written down.
	Replicas []string
	// Within are labels one rank splits its own count across (LMCache's role: a process may
	// report part under role="scheduler" and part under "worker"): summed within a rank.
	Within []string
	// RankSummed are families an older version serves without the shard labels while every
	// rank writes them: prometheus_client's multiprocess registry sums the ranks' files, so
	// a token count reads TensorParallel times the tokens.
	RankSummed map[string]bool
	// TensorParallel is the replica's tensor-parallel size where known (the scenario's
	// topology.tensor_parallel_size), 0 when unknown: a RankSummed token count is divided by
	// it, or, unknown, carries a note that it may be a multiple.
	TensorParallel int
}

// addsOverRanks reports whether c is each rank's own quantity (bytes moved, seconds spent),
// which adds up over the ranks of a replica, rather than a count of tokens or requests that
// every rank sees once.
func addsOverRanks(c Counter) bool {
	switch c {
	case StoreBytes, LoadBytes, StoreSeconds, LoadSeconds, LookupSyncSeconds, LookupAsyncSeconds, DiskStagedBytes, DiskStoreBytes:
		return true
	}
	return false
}

// combining is how one reading combines its series.
type combining struct {
	takeMax bool // over replicas (a gauge of the fullest pool, the block size)
	// perRank: the reading adds up over ranks (bytes, seconds, a byte gauge); else it
	// takes one rank.
	perRank bool
	// counter: a monotonic count, whose ranks must agree and whose RankSummed series are
	// divided by the TP size.
	counter bool
}

// shardOf splits m's labels into its replica key (every label but the shard and within
// labels) and its rank (the shard labels' values); ranked is false when m carries none.
func (par Parallelism) shardOf(m *dto.Metric) (key, rank string, ranked bool) {
	var k, r strings.Builder
	for _, lp := range m.GetLabel() {
		switch {
		case slices.Contains(par.Shards, lp.GetName()):
			r.WriteString(lp.GetName() + "=" + lp.GetValue() + " ")
			ranked = true
		case slices.Contains(par.Within, lp.GetName()):
		default:
			k.WriteString(lp.GetName() + "=" + lp.GetValue() + "\xff")
		}
	}
	return k.String(), strings.TrimSpace(r.String()), ranked
}

// combineRanks applies the rule to the series of one family that matched a selector:
// values[key][rank] is a replica's rank's sum over its within labels; unranked is true when
// no series carried a shard label. It returns the reading and what a reader must know of it.
func (par Parallelism) combineRanks(family string, values map[string]map[string]float64, unranked bool, how combining) (v float64, notes []string) {
	first := true
	for _, key := range slices.Sorted(maps.Keys(values)) {
		byRank := values[key]
		x := 0.0
		if how.perRank {
			for _, y := range byRank {
				x += y
			}
		} else {
			x = math.Inf(-1)
			for _, y := range byRank {
				x = max(x, y)
			}
			if how.counter && len(byRank) > 1 {
				if n := disagreement(byRank); n != "" {
					notes = append(notes, n)
				}
			}
		}
		switch {
		case first:
			v, first = x, false
		case how.takeMax:
			v = max(v, x)
		default:
			v += x
		}
	}
	if unranked && how.counter && !how.perRank && par.RankSummed[family] {
		switch tp := par.TensorParallel; {
		case tp > 1:
			v /= float64(tp)
			notes = append(notes, fmt.Sprintf("%s has no rank labels in this version and sums the %d tensor-parallel ranks' equal counts: read as TP x tokens, divided by %d", family, tp, tp))
		case tp <= 0:
			notes = append(notes, fmt.Sprintf("uncertain: %s has no rank labels in this version and sums the tensor-parallel ranks' equal counts (TP x tokens); the TP size is unknown (set topology.tensor_parallel_size), so this is the tokens only at TP 1", family))
		}
	}
	return v, notes
}

// disagreement says how the ranks of one replica disagree on a count they all see, "" when
// they agree.
func disagreement(byRank map[string]float64) string {
	ranks := slices.Sorted(maps.Keys(byRank))
	lo, hi := byRank[ranks[0]], byRank[ranks[0]]
	for _, r := range ranks {
		lo, hi = min(lo, byRank[r]), max(hi, byRank[r])
	}
	if lo == hi {
		return ""
	}
	parts := make([]string, len(ranks))
	for i, r := range ranks {
		parts[i] = fmt.Sprintf("%s: %s", r, units.Exact(byRank[r]))
	}
	return "the ranks of one replica disagree (" + strings.Join(parts, ", ") + "); read the largest"
}

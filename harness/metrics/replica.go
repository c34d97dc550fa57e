package metrics

import (
	"fmt"
	"maps"
	"math"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// activityCounters move on the replica that serves a request, and only there.
var activityCounters = []Counter{PromptTokens, GPUPrefixQueries}

// ReplicaReading is one replica's activity counters: a replica is one metrics URL and, where
// the server labels its series with engine (vLLM's data-parallel engines), one engine label
// value. Tensor-parallel ranks of one engine are not replicas.
type ReplicaReading struct {
	Replica  string              `json:"replica"`
	Counters map[Counter]float64 `json:"counters"` // only the counters this replica serves
}

// Unknown is the replica of a window whose counters do not name one.
const Unknown = record.UnknownReplica

// Attribution says which replica served a request, and how that was decided: the record's
// Replica.
type Attribution = record.Replica

// replicaName is source plus the engine label's value when the series carry one.
func replicaName(source, engine string, labelled bool) string {
	if !labelled {
		return source
	}
	if source == "" {
		return "engine=" + engine
	}
	return source + " engine=" + engine
}

// replicas reads the activity counters per engine label value, each counter from its first
// candidate that has series, as read does for the sums.
func (e Exposition) replicas(p Profile) []ReplicaReading {
	byName := map[string]map[Counter]float64{}
	for _, c := range activityCounters {
		for _, sel := range p.Counters[c] {
			values, ok := e.perEngine(sel)
			if !ok {
				continue
			}
			for name, v := range values {
				if byName[name] == nil {
					byName[name] = map[Counter]float64{}
				}
				byName[name][c] = v
			}
			break
		}
	}
	out := make([]ReplicaReading, 0, len(byName))
	for _, name := range slices.Sorted(maps.Keys(byName)) {
		out = append(out, ReplicaReading{Replica: name, Counters: byName[name]})
	}
	return out
}

// perEngine sums sel's finite series by their engine label; ok is false when none matched.
func (e Exposition) perEngine(sel Selector) (map[string]float64, bool) {
	mf := e.families[sel.Metric]
	if mf == nil {
		return nil, false
	}
	out := map[string]float64{}
	for _, m := range mf.GetMetric() {
		if !matches(m, sel.Labels) {
			continue
		}
		x, ok := sampleValue(mf.GetType(), m)
		if !ok || math.IsNaN(x) || math.IsInf(x, 0) {
			continue // a NaN or infinite series says nothing about activity
		}
		engine, labelled := "", false
		for _, lp := range m.GetLabel() {
			if lp.GetName() == "engine" {
				engine, labelled = lp.GetValue(), true
			}
		}
		out[replicaName(e.Source, engine, labelled)] += x
	}
	return out, len(out) > 0
}

// ReplicaMoved names the replica whose activity counters (prompt tokens, prefix-cache
// queries) moved from before to after. It is nil when the server has one replica: there is
// nothing to attribute.
func ReplicaMoved(before, after Snapshot) *Attribution {
	if len(before.Replicas) < 2 && len(after.Replicas) < 2 {
		return nil
	}
	prev := map[string]ReplicaReading{}
	for _, r := range before.Replicas {
		prev[r.Replica] = r
	}
	var moved, went []string
	var how string
	for _, r := range after.Replicas {
		for _, c := range activityCounters {
			a, okA := r.Counters[c]
			b, okB := prev[r.Replica].Counters[c]
			if !okA || !okB {
				continue
			}
			if a < b {
				went = append(went, fmt.Sprintf("%s (%s went down)", r.Replica, c))
				break
			}
			if a > b {
				moved = append(moved, r.Replica)
				how = fmt.Sprintf("the only replica whose %s moved (+%s)", c, units.Exact(a-b))
				break
			}
		}
	}
	switch {
	case len(went) > 0:
		return &Attribution{Replica: Unknown, By: "counters went down: " + strings.Join(went, ", ")}
	case len(moved) == 1:
		return &Attribution{Replica: moved[0], By: how}
	case len(moved) == 0:
		return &Attribution{Replica: Unknown, By: fmt.Sprintf("no replica's %s or %s moved", PromptTokens, GPUPrefixQueries)}
	default:
		return &Attribution{Replica: Unknown, By: "several replicas' counters moved: " + strings.Join(moved, ", ")}
	}
}

// ReplicaCount is how many replicas the snapshot saw: 0 or 1 when the server is one.
func (s Snapshot) ReplicaCount() int { return len(s.Replicas) }

package export

import (
	"slices"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

// TestSweepIdentityShard: a sharded sweep's series carry its shard, so N shards' pushes
// keep apart; a whole-window sweep's carry no shard label.
func TestSweepIdentityShard(t *testing.T) {
	sw := &record.Sweep{Scenario: "trace", Shard: &record.TraceShard{Index: 2, Count: 3}}
	if got := SweepIdentity(sw); !slices.Contains(got, Label{"shard", "2/3"}) {
		t.Errorf("labels %v, want shard=2/3", got)
	}
	sw.Shard = nil
	if got := SweepIdentity(sw); slices.ContainsFunc(got, func(l Label) bool { return l.Name == "shard" }) {
		t.Errorf("labels %v: a whole-window sweep labelled by shard", got)
	}
}

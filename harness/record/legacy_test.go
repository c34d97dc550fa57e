package record

import (
	"encoding/json"

	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"

	"github.com/anvil-serving/kvbench/harness/verdict"
)

// TestV1SlotVerdict: v1's slot attribution kept its common prefix in its evidence.
func TestV1SlotVerdict(t *testing.T) {
	old := `{"verdict":"cpu_reload","reason":"r","slot_attribution":{"verdict":"cpu_reload","live_slot_tokens":818,"host_cache_tokens":5206,
	"evidence":{"common_prefix_with_previous_prompt":818,"slots":1,"tolerance_tokens":16}},"evidence":{"counters_valid":true}}`
	var v Verdict
	if err := json.Unmarshal([]byte(old), &v); err != nil {
		t.Fatal(err)
	}
	if v.DecidedBy != verdict.BySlot || *v.Slot.CommonPrefix != 818 || *v.Slot.HostTokens != 5206 || v.Slot.Slots != 1 || !v.legacy {
		t.Fatalf("%+v", v)
	}
	v.rebuild(nil)
	if v.Interpretation != "The replay was restored from the host-RAM prompt cache." || v.SetupValid != capacity.Unknown {
		t.Fatalf("%q %s", v.Interpretation, v.SetupValid)
	}
}

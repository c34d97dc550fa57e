package record

import (
	"encoding/json"
	"testing"
)

// TestV1SlotVerdict: v1's slot attribution kept its common prefix in its evidence; the
// record reads it into today's shape and marks the verdict for derive to word anew.
func TestV1SlotVerdict(t *testing.T) {
	old := `{"verdict":"cpu_reload","reason":"r","slot_attribution":{"verdict":"cpu_reload","live_slot_tokens":818,"host_cache_tokens":5206,
	"evidence":{"common_prefix_with_previous_prompt":818,"slots":1,"tolerance_tokens":16}},"evidence":{"counters_valid":true}}`
	var v Decision
	if err := json.Unmarshal([]byte(old), &v); err != nil {
		t.Fatal(err)
	}
	if v.Verdict != "cpu_reload" || *v.Slot.CommonPrefix != 818 || *v.Slot.HostTokens != 5206 || *v.Slot.LiveTokens != 818 || v.Slot.Slots != 1 || v.Slot.Tolerance != 16 || !v.FromV1 || v.SetupValid != AnswerUnknown {
		t.Fatalf("%+v", v)
	}
	// Today's shape reads as written, and is not marked.
	var now Decision
	if err := json.Unmarshal([]byte(`{"verdict":"recompute","reason":"r","setup_valid":"yes","setup_reason":"s","interpretation":"i"}`), &now); err != nil {
		t.Fatal(err)
	}
	if now.Verdict != "recompute" || now.SetupValid != AnswerYes || now.Interpretation != "i" || now.FromV1 {
		t.Fatalf("%+v", now)
	}
}

package record

import (
	"fmt"

	"github.com/anvil-serving/kvbench/harness/units"
)

// Unattributed is the change, across a span, of the series under one label value that the
// engine's model does not know (a new source, tier or direction of a family kvbench reads):
// kvbench cannot say which tier it is, so it is recorded with the value named, never
// dropped nor counted as another tier. Written as
//
//	{"family": "vllm:prompt_tokens_cached_by_source_total", "label": "source", "value": "foo",
//	 "before": 0, "after": 11264, "delta": 11264, "unit": "tokens", "model": "vllm"}
//
// with before null where the series did not exist yet (it was created in the span, at 0, so
// the delta is what it reads after), and after and delta null where it is gone.
type Unattributed struct {
	Family string   `json:"family"`
	Label  string   `json:"label"`
	Value  string   `json:"value"`
	Before *float64 `json:"before"`
	After  *float64 `json:"after"`
	Delta  *float64 `json:"delta"`
	Unit   string   `json:"unit"`
	// Model is the engine model (backend) that does not know the value.
	Model string `json:"model"`
}

// Sentence says what moved under the unknown value, as the console prints it.
func (u Unattributed) Sentence() string {
	amount := "no reading after the span"
	if u.Delta != nil {
		amount = units.Whole(*u.Delta) + " " + u.Unit
	}
	return fmt.Sprintf("%s %s `%s`: %s, a %s kvbench's model of %s does not know", u.Family, u.Label, u.Value, amount, u.Label, u.Model)
}

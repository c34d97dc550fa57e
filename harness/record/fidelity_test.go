package record

import (
	"fmt"

	"testing"

	"github.com/anvil-serving/kvbench/scenarios"
)

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

package study

import (
	"testing"

	"github.com/anvil-serving/kvbench/scenarios"
)

// TestDemoStudiesUseTheEnginesOwnBuiltins: an engine with its own built-in runs it; the
// others run the shared one, and every name resolves.
func TestDemoStudiesUseTheEnginesOwnBuiltins(t *testing.T) {
	cases := map[string][2]string{
		"vllm":   {"eviction-6x150k-replay", "offload8-control"},
		"sglang": {"sglang-eviction-replay", "offload8-control"},
		"trtllm": {"trtllm-eviction-replay", "trtllm-offload8-control"},
	}
	for engine, want := range cases {
		got := DemoStudies(engine)
		if len(got) != 2 || got[0].Scenario != want[0] || got[1].Scenario != want[1] {
			t.Errorf("%s: %+v, want %v", engine, got, want)
			continue
		}
		for _, s := range got {
			if _, err := scenarios.Builtin(s.Scenario); err != nil {
				t.Errorf("%s: %v", engine, err)
			}
		}
		if got[0].Profile == got[1].Profile {
			t.Errorf("%s: both studies on profile %s", engine, got[0].Profile)
		}
	}
}

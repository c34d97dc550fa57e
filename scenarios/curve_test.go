package scenarios

import (
	"slices"
	"strings"
	"testing"
)

const curveSrc = `name = "c"
[server]
max_model_len = 4096
gpu_kv_tokens = 8192
block_size = 16
[prompt]
shared_prefix_tokens = 256
token_counting = "server"
[request]
max_tokens = 16
[[step]]
id = "warm"
planned_context_tokens = [600]
[[step]]
id = "curve"
kind = "reload-curve"
from_tokens = 1024
[[gate]]
step = "curve"
verdict = "cpu_reload"
require_store = true
require_identical_output = true
`

func TestReloadCurveRefusals(t *testing.T) {
	for _, tc := range []struct {
		name, from, to, want string
	}{
		{"estimate counting", `token_counting = "server"`, `token_counting = "estimate"`, `needs "server"`},
		{"factor", `from_tokens = 1024`, "from_tokens = 1024\nfactor = 1.01", "factor: must be between 1.1 and 100"},
		{"too small", `from_tokens = 1024`, `from_tokens = 100`, "from_tokens: must be larger than prompt.shared_prefix_tokens"},
		{"to below from", `from_tokens = 1024`, "from_tokens = 1024\nto_tokens = 512", "to_tokens: must be"},
		{"to a word", `from_tokens = 1024`, "from_tokens = 1024\nto_tokens = \"all\"", "max_model_len"},
		{"no twin", `from_tokens = 1024`, "from_tokens = 1024\ncold_twin = false", "cannot be turned off"},
		{"curve fields elsewhere", `planned_context_tokens = [600]`, "planned_context_tokens = [600]\nfactor = 2", "need kind = \"reload-curve\""},
		{"concurrency zero", `from_tokens = 1024`, "from_tokens = 1024\nconcurrency = 0", "concurrency must be 1"},
		{"requests zero", `from_tokens = 1024`, "from_tokens = 1024\nrequests = 0", "drop requests"},
		{"replay of a curve", `[[gate]]`, "[[step]]\nid = \"again\"\nreplay = { step = \"curve\", request = 0 }\n[[gate]]", "is a reload curve"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			_, err := Parse([]byte(strings.Replace(curveSrc, tc.from, tc.to, 1)), "c.toml")
			if err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

// TestCurvePointNames: a point is named by its size class, the same whatever max_model_len
// made its exact size, and a class two points share gets a count.
func TestCurvePointNames(t *testing.T) {
	for tokens, want := range map[int]string{1024: "1k", 1400: "1k", 1500: "2k", 4016: "4k", 8112: "8k", 130000: "128k", 261604: "256k", 262000: "256k", 500: "512", 8: "8"} {
		if got := CurveClass(tokens); got != want {
			t.Errorf("CurveClass(%d) = %q, want %q", tokens, got, want)
		}
	}
	got := CurvePointNames("c", []int{1024, 1536, 2304, 261604})
	want := []string{"c_1k", "c_2k", "c_2k_2", "c_256k"}
	if !slices.Equal(got, want) {
		t.Errorf("names %v, want %v", got, want)
	}
}

// TestStableStepID: a record's curve steps named by exact size (kvbench before size classes)
// map to their class names, and so does a bare old name of the curve; other steps keep theirs.
func TestStableStepID(t *testing.T) {
	old := &Scenario{Curves: []Curve{{ID: "curve", Points: []CurveSteps{
		{Tokens: 1024, Sequence: "curve_1024", Replay: "curve_1024_replay"},
		{Tokens: 261604, Sequence: "curve_261604", Replay: "curve_261604_replay"},
	}}}}
	for id, want := range map[string]string{
		"curve_1024": "curve_1k", "curve_261604_replay": "curve_256k_replay", "curve_256k_replay": "curve_256k_replay",
		"curve_130000_replay": "curve_128k_replay", "warm": "warm", "other_1024": "other_1024", "curve_x": "curve_x", "curve_2k_2": "curve_2k_2",
	} {
		if got := old.StableStepID(id); got != want {
			t.Errorf("StableStepID(%q) = %q, want %q", id, got, want)
		}
	}
	if got := (*Scenario)(nil).StableStepID("curve_1024"); got != "curve_1024" {
		t.Errorf("a run without a scenario maps %q", got)
	}
}

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

func TestReloadCurveExpands(t *testing.T) {
	sc, err := Parse([]byte(curveSrc), "c.toml")
	if err != nil {
		t.Fatal(err)
	}
	if !sc.HasCurves() || len(sc.StepRequests(sc.StepByID("curve"))) != 0 {
		t.Fatal("an unexpanded curve has no requests")
	}
	b, ok := sc.ScenarioCurveBounds()
	if !ok {
		t.Fatal("the scenario states max_model_len and the pool")
	}
	if err := sc.ExpandCurves(b); err != nil {
		t.Fatal(err)
	}
	// Top: 4096 - 16 (max_tokens) - 64 (counting margin) = 4016; 1024, 2048, then the top.
	var ids []string
	for _, st := range sc.Steps {
		ids = append(ids, st.ID)
	}
	want := []string{"warm", "curve_1024", "curve_1024_replay", "curve_2048", "curve_2048_replay", "curve_4016", "curve_4016_replay"}
	if !slices.Equal(ids, want) || sc.HasCurves() {
		t.Fatalf("steps %v, want %v", ids, want)
	}
	c := sc.Curves[0]
	// Eviction: the pool (8192) + 2% (163) + 2 blocks = 8387 unique tokens, in prompts of at
	// most 4016 - 256 unique tokens each: 3 of 2796 (+ the 256-token prefix).
	if c.ToTokens != 4016 || c.EvictionRequests != 3 || c.EvictionTokens != 3*2796 || len(c.Points) != 3 || c.Points[1].Replay != "curve_2048_replay" {
		t.Errorf("curve %+v", c)
	}
	seq := sc.StepByID("curve_2048")
	if !slices.Equal(seq.PlannedContextTokens, []int{2048, 3052, 3052, 3052}) || seq.Requests != 4 || seq.FirstOrdinal != 5 || seq.CurvePoint.Tokens != 2048 {
		t.Errorf("point step %+v", seq)
	}
	if r := sc.StepByID("curve_2048_replay"); r.Replay.Step != "curve_2048" || r.Replay.Request != 0 {
		t.Errorf("replay %+v", r.Replay)
	}
	// The gate applies to each point: replay checks to the replay, the store to the sequence.
	var gates []string
	for _, g := range sc.Gates {
		gates = append(gates, g.Step)
		if strings.HasSuffix(g.Step, "_replay") && (g.RequireStore || !g.RequireIdenticalOutput || g.Verdict != "cpu_reload") {
			t.Errorf("replay gate %+v", g)
		}
	}
	if len(gates) != 6 || gates[0] != "curve_1024_replay" || gates[1] != "curve_1024" {
		t.Errorf("gates on %v", gates)
	}
}

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
	sc, err := Parse([]byte(curveSrc), "c.toml")
	if err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		name string
		b    CurveBounds
		want string
	}{
		{"no max_model_len", CurveBounds{GPUKVTokens: 8192}, "max_model_len, which is unknown"},
		{"no pool", CurveBounds{MaxModelLen: 4096}, "than the GPU KV pool holds, which is unknown"},
		{"from above the top", CurveBounds{MaxModelLen: 1000, GPUKVTokens: 8192, MaxModelLenSource: "server"}, "from_tokens 1024 is above the largest prompt max_model_len 1000 (server)"},
		{"too many tokens", CurveBounds{MaxModelLen: 4096, GPUKVTokens: 200_000_000}, "above the ceiling"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c := *sc
			c.Steps = slices.Clone(sc.Steps)
			if err := c.ExpandCurves(tc.b); err == nil || !strings.Contains(err.Error(), tc.want) {
				t.Fatalf("error %v, want %q", err, tc.want)
			}
		})
	}
}

func TestReloadCurveBuiltin(t *testing.T) {
	sc, err := Builtin("reload-curve")
	if err != nil {
		t.Fatal(err)
	}
	// Against seed 001's server: 262,144 tokens of context, a 506,288-token GPU pool.
	if err := sc.ExpandCurves(CurveBounds{MaxModelLen: 262144, GPUKVTokens: 506288, BlockSize: 16}); err != nil {
		t.Fatal(err)
	}
	var sizes []int
	for _, p := range sc.Curves[0].Points {
		sizes = append(sizes, p.Tokens)
	}
	if want := []int{1024, 2048, 4096, 8192, 16384, 32768, 65536, 131072, 261604}; !slices.Equal(sizes, want) {
		t.Errorf("sizes %v, want %v", sizes, want)
	}
	if c := sc.Curves[0]; c.EvictionRequests != 2 || c.EvictionTokens < 506288 {
		t.Errorf("eviction %d requests, %d unique tokens: must exceed the pool", c.EvictionRequests, c.EvictionTokens)
	}
}

package engine

import (
	"strings"
	"testing"
)

func TestEveryEngineSaysHowItsColdTwinMisses(t *testing.T) {
	want := map[string]string{"vllm": "cache_salt", "lmcache": "", "kvbm": "cache_salt", "sglang": "cache_salt", "trtllm": "cache_salt", "llamacpp": "cache_prompt=false"}
	for _, d := range All() {
		tw := d.ColdTwin
		m, ok := want[d.Name]
		if !ok {
			t.Errorf("%s: no expectation for its cold twin: add it here and to docs/domain.md", d.Name)
			continue
		}
		if tw.Mechanism != m || tw.Available() != (m != "") {
			t.Errorf("%s: cold twin %q (available %v), want %q", d.Name, tw.Mechanism, tw.Available(), m)
		}
		if tw.Available() && tw.Caveat == "" || !tw.Available() && tw.None == "" {
			t.Errorf("%s: a cold twin needs its caveat, and its absence its reason: %+v", d.Name, tw)
		}
	}
	// Only vLLM's API is known to stream generated token ids on chat.
	for _, d := range All() {
		if got, vllmAPI := d.TokenIDsField, d.Name == "vllm" || d.Name == "lmcache" || d.Name == "kvbm"; (got == "return_token_ids") != vllmAPI {
			t.Errorf("%s: token ids field %q", d.Name, got)
		}
	}
}

func TestColdTwinBody(t *testing.T) {
	f1, v1 := VLLM.ColdTwin.Body()
	f2, v2 := VLLM.ColdTwin.Body()
	if f1 != "cache_salt" || f2 != f1 || v1 == v2 || !strings.HasPrefix(v1.(string), "kvbench-twin-") || len(v1.(string)) != len("kvbench-twin-")+24 {
		t.Errorf("salts %v, %v: want a fresh kvbench-twin- salt each time", v1, v2)
	}
	if f, v := LlamaCpp.ColdTwin.Body(); f != "cache_prompt" || v != false {
		t.Errorf("llama.cpp twin body %s=%v, want cache_prompt=false", f, v)
	}
}

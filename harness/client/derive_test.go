package client

import (
	"math"
	"testing"
)

func floatPtr(v float64) *float64 { return &v }

// Seed 001's replay (shared/reference/001_a767f3ca5b08805d.txt): output_tokens 162,
// prompt_tokens 113674, time_to_first_output_ms 824.5862000039779,
// end_to_end_ms 2192.102500004694.
func TestDerivedRatesReproduceSeed001(t *testing.T) {
	ttfo, e2e := floatPtr(824.5862000039779), floatPtr(2192.102500004694)
	decode := DecodeTokensPerSecond(162, ttfo, e2e)
	assertRelClose(t, "decode_tokens_per_second", decode, 117.73168626941829)
	prefill := EffectivePrefillTokensPerSecond(intPtr(113674), ttfo)
	assertRelClose(t, "effective_prefill_tokens_per_second", prefill, 137855.8117992414)
}

func assertRelClose(t *testing.T, name string, got *float64, want float64) {
	t.Helper()
	if got == nil {
		t.Fatalf("%s absent, want %v", name, want)
	}
	if rel := math.Abs(*got-want) / want; rel > 1e-6 {
		t.Errorf("%s = %v, want %v (relative error %g)", name, *got, want, rel)
	}
}

func TestDerivedRatesAbsent(t *testing.T) {
	decodeCases := []struct {
		name      string
		output    int
		ttfo, e2e *float64
	}{
		{"no first output", 10, nil, floatPtr(100)},
		{"no end", 10, floatPtr(50), nil},
		{"no tokens", 0, floatPtr(50), floatPtr(100)},
		{"single chunk: zero decode time", 1, floatPtr(50), floatPtr(50)},
		{"end before first output", 10, floatPtr(50), floatPtr(40)},
		{"NaN timing", 10, floatPtr(math.NaN()), floatPtr(40)},
	}
	for _, tc := range decodeCases {
		if got := DecodeTokensPerSecond(tc.output, tc.ttfo, tc.e2e); got != nil {
			t.Errorf("decode rate with %s = %v, want absent", tc.name, *got)
		}
	}
	prefillCases := []struct {
		name   string
		prompt *int
		ttfo   *float64
	}{
		{"no prompt tokens", nil, floatPtr(10)},
		{"no first output", intPtr(100), nil},
		{"zero time", intPtr(100), floatPtr(0)},
		{"negative time", intPtr(100), floatPtr(-1)},
	}
	for _, tc := range prefillCases {
		if got := EffectivePrefillTokensPerSecond(tc.prompt, tc.ttfo); got != nil {
			t.Errorf("prefill rate with %s = %v, want absent", tc.name, *got)
		}
	}
}

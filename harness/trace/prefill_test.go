package trace

import (
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// handCurve is measured at 1,000 tokens (recompute 1,000 ms, reload 500 ms) and 3,000
// (4,000 ms, 1,000 ms): every rate below is a power-of-two fraction, exact in floating point.
func handCurve(t *testing.T) *PrefillCurve {
	t.Helper()
	f := func(v float64) *float64 { return &v }
	c, err := NewPrefillCurve("run", record.ReloadCurve{ID: "curve", Points: []record.CurvePoint{
		{Tokens: 3000, ReplayTTFTMS: f(1000), TwinTTFTMS: f(4000), Verdict: verdict.CPUReload, Counted: true},
		{Tokens: 1024, PromptTokens: ptrInt(1000), ReplayTTFTMS: f(500), TwinTTFTMS: f(1000), Verdict: verdict.CPUReload, Counted: true},
		{Tokens: 8000, ReplayTTFTMS: f(9), Verdict: verdict.Recompute, Excluded: "the replay was no reload"},
	}})
	if err != nil {
		t.Fatal(err)
	}
	return c
}

// TestPrefillRates: linear between the measured sizes, clamped per token outside them.
func TestPrefillRates(t *testing.T) {
	c := handCurve(t)
	if len(c.Points) != 2 || c.Points[0].PromptTokens != 1000 {
		t.Fatalf("points %+v: the uncounted point is left out, the measured prompt size used, sorted", c.Points)
	}
	for _, tc := range []struct {
		tokens    int
		host, gpu float64
		clamped   bool
	}{
		{1000, 0.5, 1, false},
		{2000, 0.875, 1.25, false}, // recompute 2,500 ms, reload 750 ms
		{3000, 1, 4.0 / 3, false},
		{500, 0.5, 1, true},      // the 1,000-token point's rates
		{6000, 1, 4.0 / 3, true}, // the 3,000-token point's
	} {
		host, gpu, clamped := c.rates(tc.tokens)
		if host != tc.host || gpu != tc.gpu || clamped != tc.clamped {
			t.Errorf("%d tokens: host %g gpu %g clamped %v, want %g %g %v", tc.tokens, host, gpu, clamped, tc.host, tc.gpu, tc.clamped)
		}
	}
}

// TestPrefillCurveNeedsTwoPoints: a curve with one usable point prices nothing.
func TestPrefillCurveNeedsTwoPoints(t *testing.T) {
	f := func(v float64) *float64 { return &v }
	_, err := NewPrefillCurve("run", record.ReloadCurve{ID: "curve", Points: []record.CurvePoint{
		{Tokens: 1000, ReplayTTFTMS: f(1), TwinTTFTMS: f(2), Counted: true},
		{Tokens: 2000, ReplayTTFTMS: f(1), Excluded: "no cold twin timing"},
	}})
	if err == nil || !strings.Contains(err.Error(), `reload curve "curve" has 1 usable point(s)`) || !strings.Contains(err.Error(), "at least 2") {
		t.Errorf("err %v", err)
	}
}

// prefillTrace: A and B (2,000 tokens, four blocks of 500) half an hour apart, then C
// (4,000 tokens, outside the curve) sharing A's four blocks, an hour after A.
const prefillTrace = `{"timestamp": 0, "input_length": 2000, "output_length": 1, "hash_ids": [1, 2, 3, 4]}
{"timestamp": 1800000, "input_length": 2000, "output_length": 1, "hash_ids": [1, 2, 3, 4]}
{"timestamp": 3600000, "input_length": 4000, "output_length": 1, "hash_ids": [1, 2, 3, 4, 5, 6, 7, 8]}
`

// TestSizePricesHostHitsByTheCurve works the trace through by hand. Without a GPU tier, B's
// three hittable blocks (1,500 tokens) come from the host at 0.875 ms a token (1,312.5 ms)
// and C's four stored blocks (2,000 tokens) at the clamped 1 ms (2,000 ms): 3.3125 s in an
// hour of trace. With a GPU tier that holds everything the GPU serves them instead, at the
// whole recompute time: 1,500 x 1.25 + 2,000 x 4/3 ms.
func TestSizePricesHostHitsByTheCurve(t *testing.T) {
	cost := 2.0
	r := sizeText(t, prefillTrace, SizeConfig{BlockTokens: 500, GPUTokens: 0, HostTokens: []int64{0, 1e6}, Curve: handCurve(t), GPUHourCost: &cost})
	none, big := r.Sizes[0].TierSaving, r.Sizes[1].TierSaving
	if none == nil || big == nil || r.Prefill == nil {
		t.Fatalf("no pricing: %+v", r)
	}
	if r.Sizes[1].HostHitTokens != 3500 {
		t.Fatalf("host hits %d, want 3,500: the hand count is off", r.Sizes[1].HostHitTokens)
	}
	if none.PrefillSecondsSaved != 0 || *none.PrefillSecondsSavedPerHour != 0 || none.ClampedRequests != 0 {
		t.Errorf("no host tier saves %+v", none)
	}
	if big.PrefillSecondsSaved != 3.3125 || *big.PrefillSecondsSavedPerHour != 3.3125 || big.ClampedRequests != 1 {
		t.Errorf("host tier saves %+v, want 3.3125 s (1 clamped request)", big)
	}
	if got, want := *big.CostSavedPerHour, 3.3125/3600*2; got != want {
		t.Errorf("cost %g, want %g", got, want)
	}
	p := r.Prefill
	if p.TraceSeconds != 3600 || p.ClampedRequests != 1 || p.GPUPrefillSecondsSaved != 0 || *p.GPUHourCost != 2 {
		t.Errorf("prefill %+v", p)
	}

	g := sizeText(t, prefillTrace, SizeConfig{BlockTokens: 500, GPUTokens: 1e6, HostTokens: []int64{1e6}, Curve: handCurve(t)})
	if g.Sizes[0].HostHitTokens != 0 || g.Sizes[0].PrefillSecondsSaved != 0 {
		t.Errorf("the host tier served %d behind a GPU tier that holds everything", g.Sizes[0].HostHitTokens)
	}
	if got, want := g.Prefill.GPUPrefillSecondsSaved, (1500*1.25+2000*(4.0/3))/1000; math.Abs(got-want) > 1e-12 {
		t.Errorf("GPU saves %g s, want %g", got, want)
	}
	if g.Prefill.GPUCostSavedPerHour != nil || g.Sizes[0].CostSavedPerHour != nil {
		t.Error("a cost without --gpu-hour-cost")
	}

	// One instant of trace time: no hour to divide by, so null, never a number.
	one := sizeText(t, prefillTrace[:strings.Index(prefillTrace, "\n")+1], SizeConfig{BlockTokens: 500, HostTokens: []int64{1e6}, Curve: handCurve(t), GPUHourCost: &cost})
	b, _ := json.Marshal(one)
	for _, want := range []string{`"prefill_seconds_saved_per_hour":null`, `"cost_saved_per_hour":null`, `"gpu_prefill_seconds_saved_per_hour":null`, `"trace_seconds":0`} {
		if !strings.Contains(string(b), want) {
			t.Errorf("one instant: JSON lacks %s: %s", want, b)
		}
	}

	// Without a curve nothing is priced, and the JSON has none of its fields.
	plain := sizeText(t, prefillTrace, SizeConfig{BlockTokens: 500, HostTokens: []int64{1e6}})
	b, _ = json.Marshal(plain)
	if plain.Prefill != nil || strings.Contains(string(b), "prefill") || strings.Contains(string(b), "predicted") {
		t.Errorf("no curve: %s", b)
	}
}

func ptrInt(v int) *int { return &v }

// TestSizeTextShowsTheSaving: the table gains the curve's columns and says how it priced.
func TestSizeTextShowsTheSaving(t *testing.T) {
	cost := 2.0
	r := sizeText(t, prefillTrace, SizeConfig{BlockTokens: 500, HostTokens: []int64{0, 1e6}, Curve: handCurve(t), GPUHourCost: &cost})
	share := 0.25
	r.Sizes[1].PredictedHostShare = &share // as a calibration fills it
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	text := b.String()
	for _, want := range []string{"predicted host", "prefill s saved/h", "cost saved/h", "3.3", "0.0018", "25.00%",
		"1 of 3 requests lay outside the measured sizes", "clamped, not extrapolated", "ignores queueing, batching"} {
		if !strings.Contains(text, want) {
			t.Errorf("text lacks %q:\n%s", want, text)
		}
	}
	if strings.Contains(text, "measured host") {
		t.Errorf("a measured column without measurements:\n%s", text)
	}
}

// TestSizePricingOnePassMatchesAlone: in one pass of many sizes each size is priced as a pass
// of that size alone prices it, request by request.
func TestSizePricingOnePassMatchesAlone(t *testing.T) {
	cfg := DefaultGeneratorConfig()
	cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = 1, 300, 1.0/16, 16
	text := generateText(t, cfg)
	f := func(v float64) *float64 { return &v }
	curve, err := NewPrefillCurve("run", record.ReloadCurve{ID: "c", Points: []record.CurvePoint{
		{Tokens: 256, ReplayTTFTMS: f(60), TwinTTFTMS: f(40), Counted: true},
		{Tokens: 1024, ReplayTTFTMS: f(70), TwinTTFTMS: f(200), Counted: true},
		{Tokens: 4096, ReplayTTFTMS: f(110), TwinTTFTMS: f(900), Counted: true},
	}})
	if err != nil {
		t.Fatal(err)
	}
	hosts := []int64{0, 512, 4096, 32768, 1 << 20}
	for _, p := range []string{"vllm", "vllm:store_threshold=2", "sglang-write-back"} {
		all := sizeText(t, text, SizeConfig{BlockTokens: 16, GPUTokens: 2048, HostTokens: hosts, Policy: policy(t, p), Curve: curve})
		var priced bool
		for i, h := range hosts {
			alone := sizeText(t, text, SizeConfig{BlockTokens: 16, GPUTokens: 2048, HostTokens: []int64{h}, Policy: policy(t, p), Curve: curve})
			got, want := all.Sizes[i].TierSaving, alone.Sizes[0].TierSaving
			if got.PrefillSecondsSaved != want.PrefillSecondsSaved || got.ClampedRequests != want.ClampedRequests {
				t.Errorf("%s host %d: one pass %+v, alone %+v", p, h, got, want)
			}
			priced = priced || got.PrefillSecondsSaved != 0
			if all.Prefill.GPUPrefillSecondsSaved != alone.Prefill.GPUPrefillSecondsSaved {
				t.Errorf("%s host %d: GPU saving %g, alone %g", p, h, all.Prefill.GPUPrefillSecondsSaved, alone.Prefill.GPUPrefillSecondsSaved)
			}
		}
		if !priced || all.Prefill.GPUPrefillSecondsSaved == 0 {
			t.Errorf("%s: nothing priced: the trace does not exercise the curve", p)
		}
	}
}

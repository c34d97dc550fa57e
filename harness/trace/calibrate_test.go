package trace

import (
	"context"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestFitRecoversPolicy: a host share one policy gives at a size is fitted by that policy
// with no residual, among candidates that give other shares there.
func TestFitRecoversPolicy(t *testing.T) {
	cfg := DefaultGeneratorConfig()
	cfg.Seed, cfg.Requests, cfg.Scale, cfg.BlockTokens = 3, 300, 1.0/64, 8
	path := filepath.Join(t.TempDir(), "t.jsonl")
	if err := os.WriteFile(path, []byte(generateText(t, cfg)), 0o600); err != nil {
		t.Fatal(err)
	}
	var cands []Policy
	for _, s := range []string{"vllm", "vllm:store_threshold=2", "vllm:store_threshold=3", "sglang-write-back"} {
		cands = append(cands, policy(t, s))
	}
	sc := SizeConfig{BlockTokens: 8, GPUTokens: 80, PoolHoldsOutput: true}
	const host = 400
	shares := map[string]float64{}
	for _, p := range cands {
		c := sc
		c.Policy, c.HostTokens = p, []int64{host}
		r, err := SizeFile(context.Background(), path, Window{}, c)
		if err != nil {
			t.Fatal(err)
		}
		shares[p.String()] = r.Sizes[0].HostShare
	}
	if len(shares) != len(cands) || shares["vllm"] == shares["vllm:store_threshold=2"] {
		t.Fatalf("the candidates do not differ at %d tokens: %v", host, shares)
	}
	for _, want := range cands {
		cal, got, err := FitFile(context.Background(), path, Window{}, sc, host, shares[want.String()], cands)
		if err != nil {
			t.Fatal(err)
		}
		if got.String() != want.String() || cal.Policy != want.String() || cal.ResidualPoints != 0 || !cal.Fits || len(cal.Candidates) != len(cands) {
			t.Errorf("measured %s's share: fitted %s (residual %.3f, fits %v)", want, cal.Policy, cal.ResidualPoints, cal.Fits)
		}
	}
	// A share no candidate gives within a point is a finding, fitted to the closest.
	cal, _, err := FitFile(context.Background(), path, Window{}, sc, host, 0.99, cands)
	if err != nil {
		t.Fatal(err)
	}
	if cal.Fits || !strings.HasPrefix(cal.Finding, NoFitFinding) || math.Abs(cal.ResidualPoints) < FitTolerancePoints {
		t.Errorf("an impossible share fits: %+v", cal)
	}
}

// TestSizeTextCalibrated: the table carries the predicted and measured columns and the
// deployed mark; the calibration and where each figure came from are printed above it.
func TestSizeTextCalibrated(t *testing.T) {
	measured, pred := 0.2, 0.19
	r := &SizeReport{Requests: 1, PromptTokens: 10, BlockTokens: 16, GPUTokens: 100, Policy: "vllm",
		Sizes: []TierSize{{HostTokens: 0}, {HostTokens: 320, HostBlocks: 20}},
		From:  &SizeFrom{Run: "runs/r", Step: "load", GPUTokens: &Sourced{Value: int64(100), Source: "the run's ideal"}}}
	r.Predict(&SizeReport{Sizes: []TierSize{{}, {}}}, &Calibration{Policy: "vllm:store_threshold=2", HostTokens: 320, MeasuredHostShare: measured, PredictedHostShare: pred, Finding: "found"})
	r.MarkDeployed(320, &measured)
	var b strings.Builder
	if err := r.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{"from run runs/r (step load)", "GPU tokens            100 (the run's ideal)", "engine                unknown",
		"fitted policy vllm:store_threshold=2: predicts 19.00%", "predicted host  measured host", "320 (deployed)", "20.00%"} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("text lacks %q:\n%s", want, b.String())
		}
	}
}

package derive

import (
	"context"
	"encoding/json"
	"math"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/scenarios"
)

func TestCompareOutputs(t *testing.T) {
	for _, tc := range []struct {
		name      string
		a, b      record.Result
		basis     string
		identical bool
		first     *int
		compared  int
		why       string
	}{
		{"same ids", record.Result{OutputTokenIDs: ids(1, 2, 3), OutputText: "x"}, record.Result{OutputTokenIDs: ids(1, 2, 3), OutputText: "y"}, record.BasisTokenIDs, true, nil, 3, ""},
		{"ids differ at 1", record.Result{OutputTokenIDs: ids(1, 2, 3)}, record.Result{OutputTokenIDs: ids(1, 9, 3)}, record.BasisTokenIDs, false, i(1), 3, ""},
		{"replay stops early", record.Result{OutputTokenIDs: ids(1, 2, 3)}, record.Result{OutputTokenIDs: ids(1, 2)}, record.BasisTokenIDs, false, i(2), 2, ""},
		{"shorter one was cut where kvbench stopped keeping", record.Result{OutputTokenIDs: ids(1, 2, 3)}, record.Result{OutputTokenIDs: ids(1, 2), OutputTokenIDsTruncated: true}, record.BasisTokenIDs, true, nil, 2, ""},
		{"text when one has no ids", record.Result{OutputTokenIDs: ids(1), OutputText: "the KV"}, record.Result{OutputText: "the KW"}, record.BasisText, false, i(5), 6, ""},
		{"answer of an old record", record.Result{Answer: "hello"}, record.Result{Answer: "hello"}, record.BasisAnswer, true, nil, 5, ""},
		{"failed replay", record.Result{OutputTokenIDs: ids(1)}, record.Result{ErrorKind: "stream_cut"}, "", false, nil, 0, "the request failed"},
		{"nothing kept", record.Result{}, record.Result{}, "", false, nil, 0, "kept no output"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			c, why := compareOutputs(&tc.a, &tc.b)
			if tc.why != "" {
				if !strings.Contains(why, tc.why) {
					t.Fatalf("why %q, want %q", why, tc.why)
				}
				return
			}
			if why != "" || c.basis != tc.basis || c.identical != tc.identical || c.compared != tc.compared || !eqInt(c.first, tc.first) {
				t.Errorf("got basis %s identical %v first %v compared %d (%s), want %s %v %v %d", c.basis, c.identical, fmtInt(c.first), c.compared, why, tc.basis, tc.identical, fmtInt(tc.first), tc.compared)
			}
		})
	}
}

func TestReloadFidelityFindings(t *testing.T) {
	orig := &record.Request{Step: "seq", Result: record.Result{OutputTokenIDs: ids(5, 6, 7, 8)}}
	same := &record.Request{Step: "replay", Result: record.Result{OutputTokenIDs: ids(5, 6, 7, 8)}}
	diff := &record.Request{Step: "replay", Result: record.Result{OutputTokenIDs: ids(5, 6, 9, 9)}}
	twinSame := &record.Request{Step: "replay", ColdTwin: &record.ColdTwin{Mechanism: "cache_salt"}, Result: record.Result{OutputTokenIDs: ids(5, 6, 7, 8)}}
	twinDiff := &record.Request{Step: "replay", ColdTwin: &record.ColdTwin{Mechanism: "cache_salt"}, Result: record.Result{OutputTokenIDs: ids(5, 1, 7, 8)}}
	greedy, sampled := fidelityScenario(t, 0), fidelityScenario(t, 0.7)
	fp8 := "fp8"

	f := reloadFidelity(greedy, same, orig, twinSame, nil)
	if !f.Compared || !*f.Identical || f.FirstDivergence != nil || *f.ComparedTokens != 4 || f.Finding != "" || !*f.ColdTwinIdentical {
		t.Errorf("identical: %+v", f)
	}
	f = reloadFidelity(greedy, diff, orig, twinSame, &fp8)
	for _, want := range []string{"from token 2 on (of 4, compared by token ids)", "possible KV corruption on reload", "batch-variant kernels", "(this server's is fp8)", "the difference came with the reload"} {
		if !strings.Contains(f.Finding, want) {
			t.Errorf("finding %q lacks %q", f.Finding, want)
		}
	}
	if *f.Identical || *f.FirstDivergence != 2 {
		t.Errorf("diverging: %+v", f)
	}
	f = reloadFidelity(greedy, diff, orig, twinDiff, nil)
	if *f.ColdTwinIdentical || *f.ColdTwinFirstDivergence != 1 || !strings.Contains(f.Finding, "the cold twin differs from the original too (from token 1)") {
		t.Errorf("twin diverging too: %+v", f)
	}
	if f := reloadFidelity(sampled, diff, orig, nil, nil); f.Compared || f.Identical != nil || !strings.Contains(f.Reason, "temperature 0.7") {
		t.Errorf("sampled: %+v", f)
	}
	if f := reloadFidelity(greedy, diff, nil, nil, nil); f.Compared || f.Reason == "" {
		t.Errorf("no original: %+v", f)
	}
}

func TestOffloadGain(t *testing.T) {
	ms := func(v float64) *float64 { return &v }
	replay := &record.Request{Result: record.Result{TimeToFirstOutputMS: ms(40), DecodeTokensPerSecond: ms(100)}}
	zero := map[metrics.Counter]float64{metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.StoreBytes: 0}
	stored := map[metrics.Counter]float64{metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0, metrics.StoreBytes: 20790 * 1000}
	twin := &record.Request{ColdTwin: &record.ColdTwin{Mechanism: "cache_salt"}, Counters: span(zero, stored),
		Result: record.Result{TimeToFirstOutputMS: ms(400), DecodeTokensPerSecond: ms(125)}}
	g := offloadGain(replay, twin)
	if g.ColdTwin != "cache_salt" || *g.TTFTRatio != 10 || *g.PrefillSecondsSaved != 0.36 || *g.DecodeRatio != 0.8 || *g.TwinStoreBytes != 20790*1000 || g.TwinMissed != capacity.Yes || !g.Pays() {
		t.Errorf("gain: %+v", g)
	}
	hit := *twin
	hit.Counters = span(zero, map[metrics.Counter]float64{metrics.GPUPrefixHits: 256, metrics.ExternalPrefixHits: 0, metrics.StoreBytes: 0})
	if g := offloadGain(replay, &hit); g.TwinMissed != capacity.No || !strings.Contains(g.TwinMissReason, "gpu_prefix_hits moved by 256") {
		t.Errorf("a twin that hit: %+v", g)
	}
	bare := *twin
	bare.Counters = nil
	if g := offloadGain(replay, &bare); g.TwinMissed != capacity.Unknown {
		t.Errorf("a twin nothing reports on: %+v", g)
	}
	failed := *twin
	failed.Result = record.Result{ErrorKind: "http_status", Error: "400 cache_salt"}
	if g := offloadGain(replay, &failed); g.TTFTRatio != nil || g.TwinError == "" || g.Pays() {
		t.Errorf("failed twin: %+v", g)
	}
	skipped := *replay
	skipped.ColdTwinSkipped = "LMCache V1 ignores cache_salt"
	if g := offloadGain(&skipped, nil); g.Skipped != "LMCache V1 ignores cache_salt" || g.TTFTRatio != nil {
		t.Errorf("skipped: %+v", g)
	}
}

func TestReloadBandwidthSeed001(t *testing.T) {
	sc := fidelityScenario(t, 0)
	// Seed 001's replay: 1,001,721,600 bytes in 0.3436592254638672 s, TP2.
	c := span(map[metrics.Counter]float64{metrics.LoadBytes: 0, metrics.LoadSeconds: 0},
		map[metrics.Counter]float64{metrics.LoadBytes: 1001721600, metrics.LoadSeconds: 0.3436592254638672})
	b := reloadBandwidth(sc, c)
	if b == nil || math.Abs(b.BytesPerSecond-2.9149e9) > 1e6 || b.LinkFraction != nil || !strings.Contains(b.Finding, "2.91 GB/s") || !strings.Contains(b.Finding, "no host link bandwidth is stated") {
		t.Fatalf("unstated link: %+v", b)
	}
	sc.Topology = map[string]any{"tensor_parallel_size": int64(2)}
	sc.Server.HostLinkGBps = 63
	b = reloadBandwidth(sc, c)
	if b.TensorParallelSize != 2 || math.Abs(*b.LinkFraction-0.0463) > 0.0005 || *b.StatedLinkBytesPerSecond != 63e9 ||
		!strings.Contains(b.Finding, "over the 2 tensor-parallel workers") || !strings.Contains(b.Finding, "up to 5.83 GB/s") || !strings.Contains(b.Finding, "4.6% of the stated 63 GB/s host link") {
		t.Errorf("stated link: %+v", b)
	}
	sc.Server.HostLinkGBps = 1
	if b := reloadBandwidth(sc, c); !strings.Contains(b.Finding, "faster than the stated 1 GB/s host link") {
		t.Errorf("above the link: %s", b.Finding)
	}
	if b := reloadBandwidth(sc, span(map[metrics.Counter]float64{metrics.LoadBytes: 0}, map[metrics.Counter]float64{metrics.LoadBytes: 5})); b != nil {
		t.Errorf("no load seconds: %+v, want nil", b)
	}
}

func TestBreakEven(t *testing.T) {
	pt := func(tokens int, gain float64) record.CurvePoint {
		return record.CurvePoint{Tokens: tokens, Gain: &gain, Counted: true, Verdict: verdict.CPUReload}
	}
	for _, tc := range []struct {
		name   string
		points []record.CurvePoint
		want   float64 // 0: none
		words  string
	}{
		{"crosses once", []record.CurvePoint{pt(1000, 0.5), pt(2000, 0.8), pt(4000, 2)}, 2000 * math.Pow(2, math.Log(1/0.8)/math.Log(2/0.8)), "reloading pays from about"},
		{"always pays", []record.CurvePoint{pt(1000, 1.5), pt(2000, 3)}, 0, "faster than recomputing at every measured size (from 1,000 tokens)"},
		{"never pays", []record.CurvePoint{pt(1000, 0.5), pt(2000, 0.9)}, 0, "at least as fast as reloading up to the largest measured size (2,000 tokens)"},
		{"not monotone", []record.CurvePoint{pt(1000, 1.2), pt(2000, 0.9), pt(4000, 3)}, 0, "not monotone"},
		{"excluded points do not count", []record.CurvePoint{{Tokens: 1000, Excluded: "no reload"}, pt(2000, 0.5), pt(4000, 4)}, 2000 * math.Pow(2, math.Log(2)/math.Log(8)), "reloading pays"},
	} {
		t.Run(tc.name, func(t *testing.T) {
			x, words := breakEven(tc.points)
			if !strings.Contains(words, tc.words) {
				t.Errorf("words %q, want %q", words, tc.words)
			}
			switch {
			case tc.want == 0 && tc.name != "not monotone" && x != nil:
				t.Errorf("break-even %g, want none", *x)
			case tc.want > 0 && (x == nil || math.Abs(*x-tc.want) > 0.5):
				t.Errorf("break-even %v, want %g", x, tc.want)
			}
		})
	}
}

// curveRun is a run with one reload-curve point of 1000 tokens: its sequence and a replay
// with a cold twin.
func curveRun(t *testing.T) *Run {
	t.Helper()
	src := `name = "c"
[server]
max_model_len = 4096
gpu_kv_tokens = 2048
[prompt]
shared_prefix_tokens = 100
[request]
max_tokens = 4
[[step]]
id = "curve"
kind = "reload-curve"
from_tokens = 1000
to_tokens = 1000
[[gate]]
step = "curve"
require_identical_output = true
`
	sc, err := scenarios.Parse([]byte(src), "c.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, err := plan.Make(context.Background(), sc, plan.Facts{})
	if err != nil {
		t.Fatal(err)
	}
	sc = p.Scenario
	ms := func(v float64) *float64 { return &v }
	c0 := map[metrics.Counter]float64{metrics.LoadBytes: 0, metrics.LoadSeconds: 0, metrics.GPUPrefixHits: 0, metrics.ExternalPrefixHits: 0}
	c1 := map[metrics.Counter]float64{metrics.LoadBytes: 1e6, metrics.LoadSeconds: 0.001, metrics.GPUPrefixHits: 96, metrics.ExternalPrefixHits: 900}
	seq := isolated("curve_1k", record.Request{Ordinal: 0, Result: record.Result{OutputTokenIDs: ids(1, 2, 3, 4)}})
	replay := record.StepArtifact{Step: "curve_1k_replay", Kind: record.KindReplay, DeltaScope: record.ScopeRequest, Requests: []record.Request{
		{Step: "curve_1k_replay", Replay: true, ReplayOf: &record.ReplayRef{Step: "curve_1k"}, Counters: span(c0, c1),
			Result: record.Result{PromptTokens: i(1000), TimeToFirstOutputMS: ms(50), OutputTokenIDs: ids(1, 2, 3, 4)}, Verdict: &record.Decision{Verdict: verdict.CPUReload}},
		{Step: "curve_1k_replay", IndexInStep: 1, ColdTwin: &record.ColdTwin{Mechanism: "cache_salt", Field: "cache_salt", Value: "s"},
			Counters: span(c0, c0), Result: record.Result{PromptTokens: i(1000), TimeToFirstOutputMS: ms(150), OutputTokenIDs: ids(1, 2, 3, 4)}},
	}}
	r := NewRun(RunInfo{Scenario: sc})
	r.Derive([]Repetition{{Steps: []Step{Assemble(seq), Assemble(replay)}}})
	return r
}

func TestDeriveFillsReloadEvidenceAndCurve(t *testing.T) {
	r := curveRun(t)
	rp := r.Replay("curve_1k_replay")
	if rp == nil || rp.ReloadFidelity == nil || !*rp.ReloadFidelity.Identical || *rp.OffloadGain.TTFTRatio != 3 || rp.ReloadBandwidth.BytesPerSecond != 1e9 {
		t.Fatalf("replay section: %+v", rp)
	}
	if len(r.Curves) != 1 || r.Curves[0].ID != "curve" || len(r.Curves[0].Points) != 1 {
		t.Fatalf("curves: %+v", r.Curves)
	}
	p := r.Curves[0].Points[0]
	if !p.Counted || *p.Gain != 3 || *p.LoadBytes != 1e6 || *p.ReplayTTFTMS != 50 || *p.TwinTTFTMS != 150 || !*p.Identical {
		t.Errorf("point: %+v", p)
	}
	// The record round-trips through run.json: the curve under reload_curves, keyed by id.
	data, err := json.Marshal(r)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(string(data), `"reload_curves":{"curve":{"curve":{"id":"curve"`) {
		t.Errorf("run.json lacks the keyed curve: %.400s", data)
	}
	var back record.Run
	if err := json.Unmarshal(data, &back); err != nil {
		t.Fatal(err)
	}
	if len(back.Curves) != 1 || back.Curves[0].ID != "curve" || *back.Curves[0].Points[0].Gain != 3 || back.Replay("curve_1k_replay").OffloadGain.ColdTwin != "cache_salt" {
		t.Errorf("decoded: %+v", back.Curves)
	}
}

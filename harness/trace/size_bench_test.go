package trace

import (
	"context"
	"math"
	"runtime"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
)

// twentyHostSizes are no host tier and 19 sizes from 100k to 200M tokens, evenly spaced in log.
func twentyHostSizes() []int64 {
	sizes := []int64{0}
	for i := range 19 {
		sizes = append(sizes, int64(1e5*math.Pow(2000, float64(i)/18)))
	}
	return sizes
}

// heapSampler passes a source through, sampling the live heap every 500 requests.
type heapSampler struct {
	src  Source
	n    int
	peak uint64
}

func (h *heapSampler) Next(req *Request) error {
	if h.n++; h.n%500 == 0 {
		var ms runtime.MemStats
		runtime.ReadMemStats(&ms)
		h.peak = max(h.peak, ms.HeapAlloc)
	}
	return h.src.Next(req)
}

// BenchmarkSizeConversation is `kvbench trace size` of the 12k-request conversation trace
// (the generator's defaults) at 20 host-tier sizes behind a 1M-token GPU tier, file reading
// and parsing included, per policy (goal: under 2 s), and for vllm with every request priced
// by a reload curve (+curve). peak-heap-MiB is the largest live heap seen during a pass.
func BenchmarkSizeConversation(b *testing.B) {
	path := conversationFile(b)
	f := func(v float64) *float64 { return &v }
	curve, err := NewPrefillCurve("bench", record.ReloadCurve{ID: "curve", Points: []record.CurvePoint{
		{Tokens: 1024, ReplayTTFTMS: f(470), TwinTTFTMS: f(225), Counted: true},
		{Tokens: 16384, ReplayTTFTMS: f(520), TwinTTFTMS: f(3500), Counted: true},
		{Tokens: 131072, ReplayTTFTMS: f(900), TwinTTFTMS: f(40000), Counted: true},
	}})
	if err != nil {
		b.Fatal(err)
	}
	for _, p := range []string{"vllm", "vllm+curve", "vllm:store_threshold=2", "sglang-write-through", "sglang-write-through-selective", "sglang-write-back", "llamacpp"} {
		b.Run(p, func(b *testing.B) {
			name, priced := strings.CutSuffix(p, "+curve")
			pol, err := ParsePolicy(name)
			if err != nil {
				b.Fatal(err)
			}
			cfg := SizeConfig{GPUTokens: 1e6, HostTokens: twentyHostSizes(), Policy: pol}
			if priced {
				cfg.Curve = curve
			}
			var peak uint64
			for b.Loop() {
				f, err := OpenFormat(context.Background(), path, FormatAuto, 0)
				if err != nil {
					b.Fatal(err)
				}
				cfg.BlockTokens = f.BlockTokens()
				runtime.GC()
				s := &heapSampler{src: f}
				r, err := Size(s, cfg)
				f.Close()
				if err != nil || len(r.Sizes) != 20 {
					b.Fatal(err)
				}
				peak = max(peak, s.peak)
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
		})
	}
}

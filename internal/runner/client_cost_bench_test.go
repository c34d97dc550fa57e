package runner

import (
	"context"
	"fmt"
	"os"
	"path/filepath"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/scenarios"
)

// costProfile is the sim the client-cost benchmark runs against, in real time (speed 1):
// 50 ms to the first token (the request overhead; prefill is all but free), then 1 ms per
// token, no jitter, a GPU pool that holds every stream.
const costProfile = `description = "client cost benchmark: 50 ms to first token, 1 ms per token"
model = "kvbench/cost-sim"
served_model_name = "cost-sim"
max_model_len = 8192
block_size = 16
num_gpu_blocks = 16384
cpu_offload_gib = 1
store_bytes_per_token = 2048
speed = 1
prefill_tokens_per_second = 1e12
decode_tokens_per_second = 1000
cpu_to_gpu_bytes_per_second = 1e12
request_overhead = "50ms"
default_max_tokens = 256
answer_tokens_min = 256
answer_tokens_max = 256
`

// costTTFTMS is the sim's configured time to first token: what a client measures beyond it
// is the client's error.
const costTTFTMS = 50

// Client cost workload: 64 streams in a closed loop, 30 requests each, 1,024-token prompts
// (token ids) and 256 output tokens.
const (
	costStreams      = 64
	costRequests     = 1920
	costPromptTokens = 1024
	costOutputTokens = 256
)

// BenchmarkClientCostSim measures what the streaming client costs as a user runs it: `kvbench
// sim` (costProfile) in a process of its own, and this process replaying costRequests
// completions at costStreams in flight through a trace step (closed loop), with the counters
// scraped from the sim's /metrics and every request journaled to a run directory. It reports
// the client's CPU per 1k output tokens, its TTFT error (measured time to first output minus
// the sim's configured 50 ms), median and p99, and the socket reads that brought tokens per
// token, with the CPU per such read; and how often the run read /metrics. Run with
// -benchtime=1x (docs/traces.md, "Client cost", has the figures and the Python aiohttp
// comparison); skipped under -short.
func BenchmarkClientCostSim(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a server process and streams for about ten seconds")
	}
	dir := b.TempDir()
	profile := filepath.Join(dir, "cost.toml")
	if err := os.WriteFile(profile, []byte(costProfile), 0o644); err != nil {
		b.Fatal(err)
	}
	root := startSimProcess(b, profile)
	gen := trace.DefaultGeneratorConfig()
	gen.Requests, gen.Turns, gen.SystemPrompts, gen.BlockTokens = costRequests, 1, 0, 16
	gen.FirstTurn = trace.Length{Mean: costPromptTokens}
	gen.Output = trace.Length{Mean: costOutputTokens}
	for range b.N {
		cfg := costConfig(b, gen, root)
		scrapes := &countingMetrics{inner: cfg.Metrics}
		cfg.Metrics = scrapes
		out, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		sec := out.Record.Trace("load")
		if sec == nil || sec.Requests != costRequests || sec.FailedRequests != 0 {
			b.Fatalf("section %+v", sec)
		}
		cc := out.Steps[0].Client
		if cc == nil || cc.CPUMSPer1kOutputTokens == nil {
			b.Fatal("the step measured no client CPU per output token")
		}
		var ttftErr []float64
		tokens, chunks, batched := 0, 0, 0
		for _, q := range out.Steps[0].Requests {
			if q.Result.TimeToFirstOutputMS == nil {
				b.Fatalf("request %d has no time to first output", q.IndexInStep)
			}
			ttftErr = append(ttftErr, *q.Result.TimeToFirstOutputMS-costTTFTMS)
			tokens += q.Result.OutputTokens
			chunks += q.Result.GeneratedChunks
			batched += q.Result.BatchedChunks
		}
		if tokens != costRequests*costOutputTokens {
			b.Fatalf("%d output tokens, want %d", tokens, costRequests*costOutputTokens)
		}
		p := derive.PercentilesOf(ttftErr)
		b.ReportMetric(*cc.CPUMSPer1kOutputTokens, "client-CPU-ms/1k-output-tokens")
		b.ReportMetric(*p.P50, "TTFT-error-p50-ms")
		b.ReportMetric(*p.P99, "TTFT-error-p99-ms")
		b.ReportMetric(float64(len(sec.Series)), "scrape-intervals")
		b.ReportMetric(float64(scrapes.n.Load()), "metrics-scrapes")
		// A client that falls behind finds several chunks per socket read and pays less per
		// token: the figure compares clients only where both read about once a token.
		b.ReportMetric(float64(chunks-batched)/float64(chunks), "reads/token")
		// What a read costs is the figure two clients compare on whatever their read rates.
		b.ReportMetric(cc.CPUMS*1000/float64(chunks-batched), "client-CPU-us/read")
	}
}

// costConfig plans the benchmark's trace step over the generated trace gen describes and
// connects to the sim at root as `kvbench run` does: its client, its /metrics.
func costConfig(b *testing.B, gen trace.GeneratorConfig, root string) Config {
	dir := b.TempDir()
	writeTrace(b, gen, filepath.Join(dir, "t.jsonl"))
	src := fmt.Sprintf(`name = "client-cost"
[target]
endpoint = %q
metrics = [%q]
model = "cost-sim"
[server]
gpu_kv_tokens = 262144
block_size = 16
[prompt]
token_counting = "estimate"
[[step]]
id = "load"
kind = "trace"
file = "t.jsonl"
block_tokens = %d
concurrency = %d
`, root+"/v1", root+"/metrics", gen.BlockTokens, costStreams)
	sc, err := scenarios.Parse([]byte(src), filepath.Join(dir, "s.toml"))
	if err != nil {
		b.Fatal(err)
	}
	t, err := Connect(sc, "")
	if err != nil {
		b.Fatal(err)
	}
	p, err := plan.Make(context.Background(), sc, plan.Facts{Model: "cost-sim"})
	if err != nil {
		b.Fatal(err)
	}
	return Config{Scenario: sc, Plan: p, Chat: t.Client, Completions: t.Client, Metrics: t.Metrics, Engine: t.Engine.Def,
		Sinks: runDir(b), BlockSize: 16, NoProbes: true}
}

// countingMetrics counts the scrapes of the source it wraps.
type countingMetrics struct {
	inner MetricsSource
	n     atomic.Int64
}

func (c *countingMetrics) Snapshot(ctx context.Context) (metrics.Snapshot, error) {
	c.n.Add(1)
	return c.inner.Snapshot(ctx)
}

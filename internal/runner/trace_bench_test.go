package runner

import (
	"bufio"
	"bytes"
	"context"
	"fmt"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/scenarios"
)

// completionServer is a fast stand-in for an engine's /v1/completions: it reads the whole
// prompt, counts its token ids, and streams max_tokens output tokens in 16 chunks, then usage
// and [DONE]. Its own memory is small (the body goes to a discarding buffer).
func completionServer(b testing.TB) *httptest.Server {
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		// Count the body's commas as it streams past and keep its tail, where max_tokens
		// follows the prompt.
		buf := make([]byte, 64<<10)
		var tail []byte
		commas := 0
		for {
			n, err := r.Body.Read(buf)
			commas += bytes.Count(buf[:n], []byte{','})
			tail = append(tail, buf[:n]...)
			if len(tail) > 512 {
				tail = tail[len(tail)-512:]
			}
			if err != nil {
				break
			}
		}
		maxTokens := 16
		if i := bytes.Index(tail, []byte(`"max_tokens":`)); i >= 0 {
			rest := tail[i+len(`"max_tokens":`):]
			if j := bytes.IndexAny(rest, ",}"); j > 0 {
				if n, err := strconv.Atoi(string(rest[:j])); err == nil {
					maxTokens = n
				}
			}
		}
		ids := commas - 5 // the commas between the body's other members
		w.Header().Set("Content-Type", "text/event-stream")
		fl := w.(http.Flusher)
		word := strings.Repeat(" tok", max(maxTokens/16, 1))
		for i := range 16 {
			finish := "null"
			if i == 15 {
				finish = `"length"`
			}
			fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[{\"index\":0,\"text\":%q,\"logprobs\":null,\"finish_reason\":%s}]}\n\n", word, finish)
			fl.Flush()
		}
		fmt.Fprintf(w, "data: {\"id\":\"cmpl-1\",\"object\":\"text_completion\",\"created\":1,\"model\":\"m\",\"choices\":[],\"usage\":{\"prompt_tokens\":%d,\"completion_tokens\":%d,\"total_tokens\":%d}}\n\ndata: [DONE]\n\n", ids, maxTokens, ids+maxTokens)
		fl.Flush()
	}))
	b.Cleanup(srv.Close)
	return srv
}

// benchTraceConfig plans a trace step over the generated trace cfg describes, sent with the
// real client to the server at root (no /v1), which serves model.
func benchTraceConfig(b *testing.B, gen trace.GeneratorConfig, step, root, model string) Config {
	dir := b.TempDir()
	writeTrace(b, gen, filepath.Join(dir, "t.jsonl"))
	src := fmt.Sprintf(`name = "trace-bench"
[target]
endpoint = %q
model = %q
[server]
gpu_kv_tokens = 1000000
block_size = 16
[prompt]
token_counting = "estimate"
[[step]]
id = "load"
kind = "trace"
file = "t.jsonl"
block_tokens = %d
%s
`, root+"/v1", model, gen.BlockTokens, step)
	sc, err := scenarios.Parse([]byte(src), filepath.Join(dir, "s.toml"))
	if err != nil {
		b.Fatal(err)
	}
	p, err := plan.Make(context.Background(), sc, plan.Facts{})
	if err != nil {
		b.Fatal(err)
	}
	c := client.New(client.Config{BaseURL: root + "/v1"})
	return Config{Scenario: sc, Plan: p, Chat: c, Completions: c, Metrics: newFakeMetrics(), Sinks: runDir(b), BlockSize: 16, NoProbes: true,
		Capacity: []capacity.Figures{plan.ScenarioFigures(sc)}}
}

// writeTrace writes the trace gen describes to path as JSONL.
func writeTrace(b *testing.B, gen trace.GeneratorConfig, path string) {
	g, err := trace.NewGenerator(gen)
	if err != nil {
		b.Fatal(err)
	}
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	defer f.Close()
	w := bufio.NewWriter(f)
	if _, err := trace.WriteJSONL(w, g); err != nil {
		b.Fatal(err)
	}
	if err := w.Flush(); err != nil {
		b.Fatal(err)
	}
}

// peakRSS samples the process's resident set while it runs: the kernel's high-water mark,
// reset at the start (/proc/self/clear_refs), and the Go heap's peak sampled every 50 ms.
type peakRSS struct {
	stop     chan struct{}
	done     chan struct{}
	heapPeak atomic.Uint64
}

func startPeakRSS(b *testing.B) *peakRSS {
	if err := os.WriteFile("/proc/self/clear_refs", []byte("5"), 0); err != nil {
		b.Skipf("no resident-set high-water mark to reset here: %v", err)
	}
	p := &peakRSS{stop: make(chan struct{}), done: make(chan struct{})}
	go func() {
		defer close(p.done)
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(50 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			if v := sample[0].Value.Uint64(); v > p.heapPeak.Load() {
				p.heapPeak.Store(v)
			}
			select {
			case <-p.stop:
				return
			case <-t.C:
			}
		}
	}()
	return p
}

// finish returns the peak resident set and heap, in MiB.
func (p *peakRSS) finish(b *testing.B) (rss, heap float64) {
	close(p.stop)
	<-p.done
	data, err := os.ReadFile("/proc/self/status")
	if err != nil {
		b.Fatal(err)
	}
	for _, line := range strings.Split(string(data), "\n") {
		if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
			kb, _ := strconv.ParseFloat(f[1], 64)
			rss = kb / 1024
		}
	}
	return rss, float64(p.heapPeak.Load()) / (1 << 20)
}

// BenchmarkTraceReplayMemory replays the default generated trace (the public conversation
// trace's shape: 12,031 requests in an hour, about 12k prompt tokens each, 147M in all), and
// its first quarter, in a closed loop of 64 against a fast fake engine, with the real client,
// and reports the process's peak resident set (the fake engine's share included) and peak
// heap. Prompts are built just in time, so memory follows the requests in flight and the
// records kept (every request's, for the step file), not the trace's tokens: the two runs
// show the records' share. Run with -benchtime=1x.
func BenchmarkTraceReplayMemory(b *testing.B) {
	srv := completionServer(b)
	full := trace.DefaultGeneratorConfig()
	for _, n := range []int{full.Requests / 4, full.Requests} {
		b.Run(fmt.Sprintf("requests=%d", n), func(b *testing.B) {
			gen := full
			gen.Requests = n
			for range b.N {
				cfg := benchTraceConfig(b, gen, "concurrency = 64", srv.URL, "m")
				runtime.GC()
				rss := startPeakRSS(b)
				start := time.Now()
				out, err := Run(context.Background(), cfg)
				if err != nil {
					b.Fatal(err)
				}
				peak, heap := rss.finish(b)
				sec := out.Record.Trace("load")
				if sec == nil || sec.Requests != gen.Requests || sec.FailedRequests != 0 {
					b.Fatalf("section %+v", sec)
				}
				b.ReportMetric(peak, "peak-RSS-MiB")
				b.ReportMetric(heap, "peak-heap-MiB")
				b.ReportMetric(float64(*sec.PromptTokens)/1e6, "Mtokens-sent")
				b.ReportMetric(float64(sec.Requests)/time.Since(start).Seconds(), "requests/s")
			}
		})
	}
}

// BenchmarkTraceDispatchLag replays 1,000 requests with the public conversation trace's
// lengths (12k prompt tokens on average) arriving as a Poisson process at 100 requests/s
// (one turn per conversation, so the rate holds from the first request) in an open loop
// against a fast fake engine, and reports how late requests went out: the dispatch lag's p50,
// p99 and max (goal: p99 <= 2 ms). Run with -benchtime=1x.
func BenchmarkTraceDispatchLag(b *testing.B) {
	srv := completionServer(b)
	gen := trace.DefaultGeneratorConfig()
	gen.Requests, gen.Rate, gen.Turns = 1000, 100, 1
	for range b.N {
		cfg := benchTraceConfig(b, gen, "", srv.URL, "m")
		out, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		sec := out.Record.Trace("load")
		if sec == nil || sec.Requests != gen.Requests || sec.FailedRequests != 0 || sec.DispatchLagMS.P99 == nil {
			b.Fatalf("section %+v", sec)
		}
		b.ReportMetric(*sec.OfferedRequestsPerSecond, "offered-requests/s")
		b.ReportMetric(*sec.DispatchLagMS.P50, "lag-p50-ms")
		b.ReportMetric(*sec.DispatchLagMS.P99, "lag-p99-ms")
		b.ReportMetric(*sec.DispatchLagMS.Max, "lag-max-ms")
		b.ReportMetric(float64(sec.PeakInFlight), "peak-in-flight")
	}
}

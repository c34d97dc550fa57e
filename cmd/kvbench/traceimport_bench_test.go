package main

import (
	"bytes"
	"cmp"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"os"
	"path/filepath"
	"runtime/metrics"
	"strconv"
	"strings"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// importLog writes n logged chat requests: 50 system prompts of about 200 words shared by
// the requests, each with a user turn of 20 to 120 seeded words, 100 ms apart.
func importLog(b *testing.B, dir string, n int) string {
	rng := rand.New(rand.NewPCG(7, 7))
	word := func() string { return strconv.FormatUint(rng.Uint64N(1<<20), 36) }
	systems := make([]string, 50)
	for i := range systems {
		w := make([]string, 200)
		for j := range w {
			w[j] = word()
		}
		systems[i] = strings.Join(w, " ")
	}
	var buf bytes.Buffer
	for i := range n {
		w := make([]string, 20+rng.IntN(100))
		for j := range w {
			w[j] = word()
		}
		line, _ := json.Marshal(map[string]any{"model": "tiny-sim", "timestamp": i * 100, "max_tokens": 64, "messages": []map[string]string{
			{"role": "system", "content": systems[rng.IntN(len(systems))]}, {"role": "user", "content": strings.Join(w, " ")}}})
		buf.Write(line)
		buf.WriteByte('\n')
	}
	path := filepath.Join(dir, "requests.jsonl")
	if err := os.WriteFile(path, buf.Bytes(), 0o600); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkTraceImport imports 10,000 logged requests through the embedded engine's
// /tokenize (in this process, so the peaks include the engine's share) and reports the time
// per import, the requests tokenized a second, and the peak Go heap and resident set
// (KVBENCH_IMPORT_CONCURRENCY sets --concurrency, 8 by default):
//
//	go test ./cmd/kvbench -run '^$' -bench TraceImport -benchtime 3x
func BenchmarkTraceImport(b *testing.B) {
	srv, err := sim.Start(sim.Options{Profile: "tiny"})
	if err != nil {
		b.Fatal(err)
	}
	defer srv.Close()
	const n = 10000
	dir := b.TempDir()
	log := importLog(b, dir, n)
	_ = os.WriteFile("/proc/self/clear_refs", []byte("5"), 0) // resets VmHWM where allowed
	var heapPeak atomic.Uint64
	stop := make(chan struct{})
	go func() {
		sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
		t := time.NewTicker(20 * time.Millisecond)
		defer t.Stop()
		for {
			metrics.Read(sample)
			heapPeak.Store(max(heapPeak.Load(), sample[0].Value.Uint64()))
			select {
			case <-stop:
				return
			case <-t.C:
			}
		}
	}()
	conc := cmp.Or(os.Getenv("KVBENCH_IMPORT_CONCURRENCY"), "8")
	b.ResetTimer()
	for i := range b.N {
		var errb bytes.Buffer
		err := run(context.Background(), []string{"trace", "import", log, "--endpoint", srv.URL() + "/v1", "--block-tokens", "16",
			"--concurrency", conc, "-o", filepath.Join(dir, fmt.Sprintf("trace-%d.jsonl", i))}, &bytes.Buffer{}, &errb)
		if code := cli.ExitCode(err, &errb); code != cli.ExitOK {
			b.Fatalf("exit %d: %s", code, errb.String())
		}
	}
	b.StopTimer()
	close(stop)
	b.ReportMetric(float64(n)*float64(b.N)/b.Elapsed().Seconds(), "requests/s")
	b.ReportMetric(float64(heapPeak.Load())/(1<<20), "peak-heap-MiB")
	if data, err := os.ReadFile("/proc/self/status"); err == nil {
		for _, line := range strings.Split(string(data), "\n") {
			if f := strings.Fields(line); len(f) == 3 && f[0] == "VmHWM:" {
				kb, _ := strconv.ParseFloat(f[1], 64)
				b.ReportMetric(kb/1024, "peak-RSS-MiB")
			}
		}
	}
}

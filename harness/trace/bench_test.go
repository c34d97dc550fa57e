package trace

import (
	"bufio"
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"strconv"
	"testing"
)

// tenCapacities spans a GPU prefix cache to a large host tier: 100k to 100M tokens.
var tenCapacities = []int64{1e5, 3e5, 1e6, 2e6, 3e6, 5e6, 1e7, 2e7, 5e7, 1e8}

// conversationFile writes the default (conversation-shaped, 12,031-request) trace to a file.
func conversationFile(b *testing.B) string {
	b.Helper()
	path := filepath.Join(b.TempDir(), "conversation.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	g, _ := NewGenerator(DefaultGeneratorConfig())
	if _, err := WriteJSONL(f, g); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	return path
}

// BenchmarkAnalyzeConversation is `kvbench trace analyze` of a 12k-request conversation
// trace at 10 capacities, file reading and parsing included (goal: <= 2 s).
func BenchmarkAnalyzeConversation(b *testing.B) {
	path := conversationFile(b)
	b.Run("10-capacities", func(b *testing.B) {
		for b.Loop() {
			if _, err := AnalyzeFile(context.Background(), path, Window{}, Config{CapacityTokens: tenCapacities}); err != nil {
				b.Fatal(err)
			}
		}
	})
	b.Run("10-capacities+tiers", func(b *testing.B) {
		for b.Loop() {
			if _, err := AnalyzeFile(context.Background(), path, Window{}, Config{CapacityTokens: tenCapacities, Tiers: &Tiers{GPUTokens: 1e6, HostTokens: 1e7}}); err != nil {
				b.Fatal(err)
			}
		}
	})
}

// BenchmarkAnalyzeDirectLRU is the alternative to the stack-distance pass: the same trace
// read once, each request fed to one O(1) LRU per capacity. It gives the same hit tokens
// (TestStackDistanceMatchesDirectLRU) at a cost that grows with the number of capacities.
func BenchmarkAnalyzeDirectLRU(b *testing.B) {
	path := conversationFile(b)
	for b.Loop() {
		f, err := Open(context.Background(), path, DefaultBlockTokens)
		if err != nil {
			b.Fatal(err)
		}
		models := make([]*tierModel, len(tenCapacities))
		for i, c := range tenCapacities {
			models[i] = newTierModel(c/DefaultBlockTokens, 0)
		}
		var req Request
		var keys []uint64
		for n := uint64(1); ; n++ {
			err := f.Next(&req)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			keys = blockKeys(keys[:0], &req, DefaultBlockTokens, n)
			for _, m := range models {
				m.serve(keys, (req.InputLength-1)/DefaultBlockTokens, 0)
			}
		}
		f.Close()
	}
}

// BenchmarkReadConversation is the parsing alone.
func BenchmarkReadConversation(b *testing.B) {
	path := conversationFile(b)
	for b.Loop() {
		f, err := Open(context.Background(), path, DefaultBlockTokens)
		if err != nil {
			b.Fatal(err)
		}
		var req Request
		for f.Next(&req) == nil {
		}
		f.Close()
	}
}

// BenchmarkGenerateConversation writes the default trace.
func BenchmarkGenerateConversation(b *testing.B) {
	for b.Loop() {
		g, _ := NewGenerator(DefaultGeneratorConfig())
		if _, err := WriteJSONL(io.Discard, g); err != nil {
			b.Fatal(err)
		}
	}
}

// burstGPTRows writes a BurstGPT CSV of n rows, one a second, as its README describes them.
func burstGPTRows(w io.Writer, n int) error {
	bw := bufio.NewWriterSize(w, 1<<20)
	bw.WriteString("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
	var line []byte
	for i := range n {
		in, out := 1+i%4000, i%700
		line = strconv.AppendInt(line[:0], int64(i), 10)
		line = append(line, ",ChatGPT,"...)
		line = strconv.AppendInt(line, int64(in), 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(out), 10)
		line = append(line, ',')
		line = strconv.AppendInt(line, int64(in+out), 10)
		line = append(line, ",Conversation log\n"...)
		bw.Write(line)
	}
	return bw.Flush()
}

// BenchmarkReadBurstGPT reads a 1M-line BurstGPT CSV file to its end: time and allocations
// per file, and the peak live heap while reading (the reader streams: it does not grow with
// the file).
func BenchmarkReadBurstGPT(b *testing.B) {
	const rows = 1_000_000
	path := filepath.Join(b.TempDir(), "burstgpt.csv")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	if err := burstGPTRows(f, rows); err != nil {
		b.Fatal(err)
	}
	if err := f.Close(); err != nil {
		b.Fatal(err)
	}
	b.ReportAllocs()
	var peak uint64
	for b.Loop() {
		tf, err := OpenFormat(context.Background(), path, FormatAuto, 0)
		if err != nil {
			b.Fatal(err)
		}
		var req Request
		n := 0
		for {
			err := tf.Next(&req)
			if errors.Is(err, io.EOF) {
				break
			}
			if err != nil {
				b.Fatal(err)
			}
			if n++; n%100_000 == 0 {
				var ms runtime.MemStats
				runtime.ReadMemStats(&ms)
				peak = max(peak, ms.HeapAlloc)
			}
		}
		tf.Close()
		if n != rows {
			b.Fatalf("read %d rows, want %d", n, rows)
		}
	}
	b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
}

package trace

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
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

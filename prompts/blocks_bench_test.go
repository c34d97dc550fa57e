package prompts

import (
	"context"
	"errors"
	"io"
	"os"
	"path/filepath"
	"runtime"
	"runtime/metrics"
	"strconv"
	"testing"

	"github.com/anvil-serving/kvbench/harness/trace"
)

// BenchmarkBlockPromptsConversationTrace builds, just in time, the prompt of every request
// of a 12,031-request conversation-shaped trace (about 147M prompt tokens), read from its
// file as a replay reads it, and encodes each as the JSON body a replay sends: token ids
// for /v1/completions, or the text form. It reports the peak live heap, sampled after every
// request, against the replay client's budget (300 MiB RSS for the whole trace).
func BenchmarkBlockPromptsConversationTrace(b *testing.B) {
	path := filepath.Join(b.TempDir(), "conversation.jsonl")
	f, err := os.Create(path)
	if err != nil {
		b.Fatal(err)
	}
	g, _ := trace.NewGenerator(trace.DefaultGeneratorConfig())
	if _, err := trace.WriteJSONL(f, g); err != nil {
		b.Fatal(err)
	}
	f.Close()
	for _, form := range []string{"token-ids", "text"} {
		b.Run(form, func(b *testing.B) {
			sample := []metrics.Sample{{Name: "/memory/classes/heap/objects:bytes"}}
			runtime.GC()
			metrics.Read(sample)
			base := sample[0].Value.Uint64()
			var peak, promptTokens, bodyBytes uint64
			for b.Loop() {
				blocks, err := NewBlockBuilder(BlockConfig{Seed: 1})
				if err != nil {
					b.Fatal(err)
				}
				tf, err := trace.Open(context.Background(), path, trace.DefaultBlockTokens)
				if err != nil {
					b.Fatal(err)
				}
				var req trace.Request
				var tokens []int32
				var body []byte
				for {
					err := tf.Next(&req)
					if errors.Is(err, io.EOF) {
						break
					}
					if err != nil {
						b.Fatal(err)
					}
					body = append(body[:0], `{"model":"m","max_tokens":`...)
					body = strconv.AppendInt(body, int64(req.OutputLength), 10)
					body = append(body, `,"ignore_eos":true,"stream":true,"prompt":`...)
					if form == "text" {
						body = append(body, '"') // the words need no JSON escaping
						body, err = blocks.AppendText(body, req.HashIDs, req.InputLength, uint64(req.Line))
						body = append(body, '"')
					} else {
						tokens, err = blocks.AppendTokenIDs(tokens[:0], req.HashIDs, req.InputLength, uint64(req.Line))
						body = append(body, '[')
						for i, tok := range tokens {
							if i > 0 {
								body = append(body, ',')
							}
							body = strconv.AppendInt(body, int64(tok), 10)
						}
						body = append(body, ']')
					}
					if err != nil {
						b.Fatal(err)
					}
					body = append(body, '}')
					promptTokens += uint64(req.InputLength)
					bodyBytes += uint64(len(body))
					metrics.Read(sample)
					peak = max(peak, sample[0].Value.Uint64())
				}
				tf.Close()
			}
			b.ReportMetric(float64(peak)/(1<<20), "peak-heap-MiB")
			b.ReportMetric(float64(base)/(1<<20), "base-heap-MiB")
			b.ReportMetric(float64(promptTokens)/float64(b.N), "prompt-tokens/op")
			b.ReportMetric(float64(bodyBytes)/float64(b.N)/(1<<20), "body-MiB/op")
		})
	}
}

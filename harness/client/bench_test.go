package client

import (
	"context"
	"fmt"
	"net/http"
	"strings"
	"testing"
	"time"
)

// BenchmarkStreamPerToken measures the client-side cost of one streamed token: a fake
// server writes pre-rendered vLLM-shaped chunks from memory, so the figure is dominated
// by go-openai's line reading, chunk decoding and bookkeeping. Target: under 5 µs/token.
func BenchmarkStreamPerToken(b *testing.B) {
	const tokensPerRequest = 2000
	var body strings.Builder
	fmt.Fprintf(&body, "data: %s\n\n", roleChunk())
	for i := range tokensPerRequest {
		field := "content"
		if i < tokensPerRequest/2 {
			field = "reasoning"
		}
		fmt.Fprintf(&body, "data: %s\n\n", deltaChunk(field, " tok"))
	}
	fmt.Fprintf(&body, "data: %s\n\ndata: %s\n\ndata: [DONE]\n\n", finishChunk("length"),
		usageChunk(113674, tokensPerRequest, `,"prompt_tokens_details":{"cached_tokens":113408}`))
	rendered := []byte(body.String())

	srv := sseServer(b, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		w.Write(rendered)
	})
	c := newTestClient(srv)
	req := ChatRequest{Model: "m", Messages: testMessages, MaxTokens: tokensPerRequest}
	progress := func(Progress) {}

	b.ReportAllocs()
	b.ResetTimer()
	start := time.Now()
	for b.Loop() {
		res := c.StreamChat(context.Background(), req, progress)
		if res.Failed() || res.GeneratedChunks != tokensPerRequest {
			b.Fatalf("stream: %s %s, %d chunks", res.ErrorKind, res.Error, res.GeneratedChunks)
		}
	}
	b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*tokensPerRequest), "ns/token")
}

// BenchmarkDecodeChunk isolates decoding and folding one chunk into a Result.
func BenchmarkDecodeChunk(b *testing.B) {
	line := []byte(deltaChunk("reasoning", " tok"))
	var res Result
	acc := streamAccumulator{res: &res, progress: func(Progress) {}, start: time.Now(), interval: time.Hour}
	now := time.Now()
	b.ReportAllocs()
	for b.Loop() {
		if err := acc.add(line, now, 1); err != nil {
			b.Fatal(err)
		}
	}
}

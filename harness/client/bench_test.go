package client

import (
	"context"
	"fmt"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"testing"
	"time"

	openai "github.com/sashabaranov/go-openai"
)

const tokensPerRequest = 2000

// renderedStream is a vLLM-shaped stream of tokensPerRequest tokens, half reasoning.
func renderedStream() []byte {
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
	return []byte(body.String())
}

// renderedServer serves renderedStream from memory.
func renderedServer(b *testing.B) *httptest.Server {
	rendered := renderedStream()
	return sseServer(b, func(w http.ResponseWriter, r *http.Request) {
		io.Copy(io.Discard, r.Body)
		startStream(w)
		w.Write(rendered)
	})
}

// BenchmarkStreamPerToken measures the client-side cost of one streamed token: a fake
// server writes pre-rendered vLLM-shaped chunks from memory, so the figure is dominated
// by net/http's reads, the SSE reader's line splitting, chunk decoding and bookkeeping.
// Target: under 5 µs/token.
func BenchmarkStreamPerToken(b *testing.B) {
	srv := renderedServer(b)
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

// BenchmarkDecodeChunk isolates decoding and folding one chunk into a Result: a chat delta
// and a completion's text chunk as vLLM (and kvbench sim) stream them, each read from the
// template of the stream's last chunk (template.go) as a stream reads its token chunks, and
// scanned in full as a chunk of another shape is.
func BenchmarkDecodeChunk(b *testing.B) {
	for _, c := range []struct{ name, line string }{
		{"chat", deltaChunk("reasoning", " tok")},
		{"completion", `{"id":"cmpl-de0ba3b3442d5d880001","object":"text_completion","created":1796183855,"model":"m",` +
			`"choices":[{"index":0,"text":" offload","logprobs":null,"finish_reason":null,"stop_reason":null}]}`},
	} {
		for _, template := range []bool{true, false} {
			name := c.name + "/template"
			if !template {
				name = c.name + "/scan"
			}
			b.Run(name, func(b *testing.B) {
				line := []byte(c.line)
				var res Result
				acc := streamAccumulator{res: &res, progress: func(Progress) {}, start: time.Now(), interval: time.Hour}
				now := time.Now()
				b.ReportAllocs()
				for b.Loop() {
					if !template {
						acc.template.raw = acc.template.raw[:0] // a miss: scanned, and noted as the next template
					}
					if err := acc.add(line, now, 1); err != nil {
						b.Fatal(err)
					}
				}
			})
		}
	}
}

// BenchmarkStreamReaders compares what reads and decodes a stream on net/http: the SSE
// reader (sse.go) or go-openai's stream reader (RecvRaw), each with the fast chunk decoder
// (fastchunk.go) or encoding/json alone, folding each chunk into a Result the same way. The
// go-openai cases send go-openai's own request, which cannot carry kvbench's body fields
// (ignore_eos, min_tokens, extra_body): the server here ignores the body.
func BenchmarkStreamReaders(b *testing.B) {
	srv := renderedServer(b)
	decoders := []struct {
		name   string
		decode func(data []byte, spare []chunkChoice) (streamChunk, error)
	}{
		{"fastchunk", func(data []byte, spare []chunkChoice) (streamChunk, error) {
			return decodeChunkReusing(data, spare, "m", nil)
		}},
		{"encoding-json", func(data []byte, _ []chunkChoice) (streamChunk, error) { return slowDecodeChunk(data) }},
	}
	readers := []struct {
		name string
		read func(b *testing.B, fold func(data []byte, reads int))
	}{
		{"sse.go", func(b *testing.B, fold func([]byte, int)) {
			resp := postStream(b, srv.URL)
			defer resp.Body.Close()
			ev := newEventReader(resp.Body, nil)
			defer ev.release()
			for !ev.done {
				_, err := ev.read(nil)
				for data, ok := ev.next(); ok; data, ok = ev.next() {
					if string(data) == "[DONE]" {
						ev.done = true
						break
					}
					fold(data, ev.reads)
				}
				if err != nil && !ev.done {
					b.Fatalf("read: %v", err)
				}
			}
		}},
		{"go-openai", func(b *testing.B, fold func([]byte, int)) {
			cfg := openai.DefaultConfig(testKey)
			cfg.BaseURL = srv.URL + "/v1"
			stream, err := openai.NewClientWithConfig(cfg).CreateChatCompletionStream(context.Background(),
				openai.ChatCompletionRequest{Model: "m", Messages: []openai.ChatCompletionMessage{{Role: "user", Content: "say hi"}}})
			if err != nil {
				b.Fatal(err)
			}
			defer stream.Close()
			for reads := 1; ; reads++ {
				data, err := stream.RecvRaw()
				if err == io.EOF {
					return
				}
				if err != nil {
					b.Fatalf("read: %v", err)
				}
				fold(data, reads)
			}
		}},
	}
	for _, r := range readers {
		for _, d := range decoders {
			b.Run(r.name+"/"+d.name, func(b *testing.B) {
				b.ReportAllocs()
				start := time.Now()
				for b.Loop() {
					var res Result
					acc := streamAccumulator{start: time.Now(), res: &res, progress: func(Progress) {}, interval: time.Hour}
					now := time.Now()
					r.read(b, func(data []byte, reads int) {
						chunk, err := d.decode(data, acc.choices)
						if err != nil {
							b.Fatalf("decode %q: %v", data, err)
						}
						acc.chunks++
						acc.observe(chunk, now, reads)
						if cap(chunk.Choices) > cap(acc.choices) {
							acc.choices = chunk.Choices
						}
					})
					acc.finish()
					if res.GeneratedChunks != tokensPerRequest {
						b.Fatalf("%d chunks, want %d", res.GeneratedChunks, tokensPerRequest)
					}
				}
				b.ReportMetric(float64(time.Since(start).Nanoseconds())/float64(b.N*tokensPerRequest), "ns/token")
			})
		}
	}
}

// postStream sends the benchmarks' chat request and returns its 200 answer.
func postStream(b *testing.B, url string) *http.Response {
	b.Helper()
	req, err := http.NewRequest(http.MethodPost, url+"/v1/chat/completions", strings.NewReader(`{"model":"m","stream":true}`))
	if err != nil {
		b.Fatal(err)
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil || resp.StatusCode != http.StatusOK {
		b.Fatalf("post: %v %v", resp, err)
	}
	return resp
}

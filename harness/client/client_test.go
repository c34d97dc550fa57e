package client

import (
	"context"
	"encoding/json"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"
)

// blockUntilDone holds a handler until the client goes away or the test's safety bound.
// The server notices a gone client only once the request body has been read.
func blockUntilDone(r *http.Request) {
	io.Copy(io.Discard, r.Body)
	select {
	case <-r.Context().Done():
	case <-time.After(10 * time.Second):
	}
}

func TestStreamChatSuccess(t *testing.T) {
	tests := []struct {
		name           string
		events         []string
		wantReasoning  int // chunks
		wantContent    int // chunks
		wantOutput     int
		wantSource     string
		wantPrompt     *int
		wantCached     *int
		wantDetails    bool
		wantUsage      bool
		wantVisible    bool
		wantReasonOnly bool
		wantFinish     string
		wantAnswer     string
	}{
		{
			name: "reasoning field then content, cached tokens reported",
			events: []string{roleChunk(), deltaChunk("reasoning", "think"), deltaChunk("reasoning", "ing"),
				deltaChunk("content", "Hel"), deltaChunk("content", "lo"), finishChunk("stop"),
				usageChunk(120, 4, `,"prompt_tokens_details":{"cached_tokens":96}`), "[DONE]"},
			wantReasoning: 2, wantContent: 2, wantOutput: 4, wantSource: OutputTokensFromUsage,
			wantPrompt: intPtr(120), wantCached: intPtr(96), wantDetails: true, wantUsage: true,
			wantVisible: true, wantFinish: "stop", wantAnswer: "Hello",
		},
		{
			name: "reasoning_content field, usage without prompt_tokens_details",
			events: []string{roleChunk(), deltaChunk("reasoning_content", "hmm"),
				deltaChunk("content", "Hi"), finishChunk("stop"), usageChunk(10, 2, ""), "[DONE]"},
			wantReasoning: 1, wantContent: 1, wantOutput: 2, wantSource: OutputTokensFromUsage,
			wantPrompt: intPtr(10), wantUsage: true, wantVisible: true, wantFinish: "stop", wantAnswer: "Hi",
		},
		{
			name: "details present but cached_tokens omitted (vLLM omits 0)",
			events: []string{deltaChunk("content", "a"), deltaChunk("content", "b"), finishChunk("stop"),
				usageChunk(7, 2, `,"prompt_tokens_details":{}`), "[DONE]"},
			wantContent: 2, wantOutput: 2, wantSource: OutputTokensFromUsage, wantPrompt: intPtr(7),
			wantDetails: true, wantUsage: true, wantVisible: true, wantFinish: "stop", wantAnswer: "ab",
		},
		{
			name: "cached_tokens 0",
			events: []string{deltaChunk("content", "a"), finishChunk("stop"),
				usageChunk(7, 1, `,"prompt_tokens_details":{"cached_tokens":0}`), "[DONE]"},
			wantContent: 1, wantOutput: 1, wantSource: OutputTokensFromUsage, wantPrompt: intPtr(7),
			wantCached: intPtr(0), wantDetails: true, wantUsage: true, wantVisible: true, wantFinish: "stop",
			wantAnswer: "a",
		},
		{
			name: "prompt_tokens_details null",
			events: []string{deltaChunk("content", "a"), finishChunk("stop"),
				usageChunk(7, 1, `,"prompt_tokens_details":null`), "[DONE]"},
			wantContent: 1, wantOutput: 1, wantSource: OutputTokensFromUsage, wantPrompt: intPtr(7),
			wantUsage: true, wantVisible: true, wantFinish: "stop", wantAnswer: "a",
		},
		{
			name: "reasoning only until max_tokens",
			events: []string{roleChunk(), deltaChunk("reasoning", "a"), deltaChunk("reasoning", "b"),
				deltaChunk("reasoning", "c"), finishChunk("length"), usageChunk(50, 3, ""), "[DONE]"},
			wantReasoning: 3, wantOutput: 3, wantSource: OutputTokensFromUsage, wantPrompt: intPtr(50),
			wantUsage: true, wantReasonOnly: true, wantFinish: "length",
		},
		{
			name:        "no usage chunk: output counted from chunks",
			events:      []string{deltaChunk("content", "x"), deltaChunk("content", "y"), deltaChunk("content", "z"), finishChunk("stop"), "[DONE]"},
			wantContent: 3, wantOutput: 3, wantSource: OutputTokensFromCountedChunks,
			wantVisible: true, wantFinish: "stop", wantAnswer: "xyz",
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, tt.events...)
			})
			res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(),
				ChatRequest{Model: "m", Messages: testMessages, MaxTokens: 64}, nil)

			if res.Failed() {
				t.Fatalf("request failed: %s: %s", res.ErrorKind, res.Error)
			}
			if res.HTTPStatus != http.StatusOK {
				t.Errorf("http_status = %d, want 200", res.HTTPStatus)
			}
			if res.ReasoningChunks != tt.wantReasoning || res.ContentChunks != tt.wantContent {
				t.Errorf("reasoning/content chunks = %d/%d, want %d/%d", res.ReasoningChunks, res.ContentChunks, tt.wantReasoning, tt.wantContent)
			}
			if res.GeneratedChunks != tt.wantReasoning+tt.wantContent {
				t.Errorf("generated_chunks = %d, want %d", res.GeneratedChunks, tt.wantReasoning+tt.wantContent)
			}
			if res.OutputTokens != tt.wantOutput || res.OutputTokensSource != tt.wantSource {
				t.Errorf("output tokens = %d from %q, want %d from %q", res.OutputTokens, res.OutputTokensSource, tt.wantOutput, tt.wantSource)
			}
			assertIntPtr(t, "prompt_tokens", res.PromptTokens, tt.wantPrompt)
			assertIntPtr(t, "cached_prompt_tokens", res.CachedPromptTokens, tt.wantCached)
			if res.PromptTokensDetailsPresent != tt.wantDetails || res.UsagePresent != tt.wantUsage {
				t.Errorf("details/usage present = %v/%v, want %v/%v", res.PromptTokensDetailsPresent, res.UsagePresent, tt.wantDetails, tt.wantUsage)
			}
			if res.VisibleAnswer != tt.wantVisible || res.ReasoningOnly != tt.wantReasonOnly {
				t.Errorf("visible/reasoning_only = %v/%v, want %v/%v", res.VisibleAnswer, res.ReasoningOnly, tt.wantVisible, tt.wantReasonOnly)
			}
			if res.FinishReason != tt.wantFinish || res.Answer != tt.wantAnswer {
				t.Errorf("finish/answer = %q/%q, want %q/%q", res.FinishReason, res.Answer, tt.wantFinish, tt.wantAnswer)
			}
			assertTimingOrder(t, res)
			assertDerivedRates(t, res)
		})
	}
}

func assertIntPtr(t *testing.T, name string, got, want *int) {
	t.Helper()
	switch {
	case got == nil && want == nil:
	case got == nil || want == nil:
		t.Errorf("%s = %v, want %v (nil means absent)", name, fmtIntPtr(got), fmtIntPtr(want))
	case *got != *want:
		t.Errorf("%s = %d, want %d", name, *got, *want)
	}
}

func fmtIntPtr(p *int) any {
	if p == nil {
		return "absent"
	}
	return *p
}

// assertTimingOrder checks presence and order of the timings, never their size.
func assertTimingOrder(t *testing.T, res Result) {
	t.Helper()
	if res.GeneratedChunks == 0 {
		if res.TimeToFirstOutputMS != nil || res.EndToEndMS != nil {
			t.Errorf("timings present without generated output")
		}
		return
	}
	if res.TimeToFirstOutputMS == nil || res.EndToEndMS == nil {
		t.Fatalf("time_to_first_output_ms or end_to_end_ms absent after %d generated chunks", res.GeneratedChunks)
	}
	ttfo, e2e := *res.TimeToFirstOutputMS, *res.EndToEndMS
	if ttfo <= 0 || e2e < ttfo || res.StreamMS < e2e {
		t.Errorf("timings out of order: ttfo %v, e2e %v, stream %v", ttfo, e2e, res.StreamMS)
	}
	if res.VisibleAnswer {
		if res.TimeToFirstVisibleTokenMS == nil {
			t.Fatalf("time_to_first_visible_token_ms absent with a visible answer")
		}
		if v := *res.TimeToFirstVisibleTokenMS; v < ttfo || v > e2e {
			t.Errorf("ttfvt %v outside [ttfo %v, e2e %v]", v, ttfo, e2e)
		}
	} else if res.TimeToFirstVisibleTokenMS != nil {
		t.Errorf("time_to_first_visible_token_ms present without visible content")
	}
}

// assertDerivedRates checks the result's rates are docs/domain.md's formulas over its own fields.
func assertDerivedRates(t *testing.T, res Result) {
	t.Helper()
	sameRate := func(name string, got, want *float64) {
		if (got == nil) != (want == nil) || (got != nil && *got != *want) {
			t.Errorf("%s = %v, want %v", name, got, want)
		}
	}
	sameRate("decode_tokens_per_second", res.DecodeTokensPerSecond,
		DecodeTokensPerSecond(res.OutputTokens, res.TimeToFirstOutputMS, res.EndToEndMS))
	sameRate("effective_prefill_tokens_per_second", res.EffectivePrefillTokensPerSecond,
		EffectivePrefillTokensPerSecond(res.PromptTokens, res.TimeToFirstOutputMS))
	if res.PromptTokens != nil && res.EffectivePrefillTokensPerSecond == nil {
		t.Errorf("effective_prefill_tokens_per_second absent with prompt tokens and a first output")
	}
}

func TestStreamChatSendsRequestFields(t *testing.T) {
	var got struct {
		Model         string   `json:"model"`
		Stream        bool     `json:"stream"`
		MaxTokens     int      `json:"max_tokens"`
		Temperature   *float64 `json:"temperature"`
		StreamOptions struct {
			IncludeUsage bool `json:"include_usage"`
		} `json:"stream_options"`
		Messages []struct{ Role, Content string } `json:"messages"`
	}
	var path, auth string
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		path, auth = r.URL.Path, r.Header.Get("Authorization")
		if err := json.NewDecoder(r.Body).Decode(&got); err != nil {
			t.Errorf("decoding request body: %v", err)
		}
		startStream(w)
		writeEvents(w, deltaChunk("content", "ok"), "[DONE]")
	})
	res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(),
		ChatRequest{Model: "served-name", Messages: testMessages, MaxTokens: 128}, nil)
	if res.Failed() {
		t.Fatalf("request failed: %s", res.Error)
	}
	if path != "/v1/chat/completions" || auth != "Bearer "+testKey {
		t.Errorf("path %q, auth %q", path, auth)
	}
	if got.Model != "served-name" || !got.Stream || !got.StreamOptions.IncludeUsage || got.MaxTokens != 128 {
		t.Errorf("request body = %+v", got)
	}
	if got.Temperature == nil || *got.Temperature != 0 {
		t.Errorf("temperature 0 sent as %v, want 0: greedy on every engine (llama.cpp samples at any positive value)", got.Temperature)
	}
	if len(got.Messages) != 1 || got.Messages[0].Content != "say hi" {
		t.Errorf("messages = %+v", got.Messages)
	}
}

func TestStreamChatFailures(t *testing.T) {
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		wantKind   string
		wantStatus int
		wantError  string // substring of Error
		wantChunks int    // generated chunks kept from before the failure
	}{
		{
			name: "400 with nested OpenAI error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusBadRequest)
				io.WriteString(w, `{"error":{"message":"This model's maximum context length is 262144 tokens. However, you requested 300000 tokens.","type":"BadRequestError","param":null,"code":400}}`)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 400, wantError: "maximum context length is 262144",
		},
		{
			name: "404 with flat vLLM error",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusNotFound)
				io.WriteString(w, `{"object":"error","message":"The model `+"`nope`"+` does not exist.","type":"NotFoundError","param":null,"code":404}`)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 404, wantError: "The model `nope` does not exist.",
		},
		{
			name: "401 echoing the Authorization header",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "application/json")
				w.WriteHeader(http.StatusUnauthorized)
				msg, _ := json.Marshal("invalid key: " + r.Header.Get("Authorization"))
				io.WriteString(w, `{"error":{"message":`+string(msg)+`,"type":"Unauthorized"}}`)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 401, wantError: "invalid key: Bearer [REDACTED]",
		},
		{
			name: "500 plain text",
			handler: func(w http.ResponseWriter, r *http.Request) {
				http.Error(w, "Internal Server Error\n"+r.Header.Get("Authorization"), http.StatusInternalServerError)
			},
			wantKind: ErrorKindHTTPStatus, wantStatus: 500, wantError: "Internal Server Error",
		},
		{
			name: "stream ends without [DONE]",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("content", "a"), deltaChunk("content", "b"))
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: "without [DONE] after 2 chunks", wantChunks: 2,
		},
		{
			name: "HTML page with status 200",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				io.WriteString(w, "<html><body>sign in</body></html>\n")
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantError: `after 0 chunks (content type "text/html"`,
		},
		{
			name: "connection dropped mid-chunk",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("reasoning", "a"))
				conn, buf, err := http.NewResponseController(w).Hijack()
				if err != nil {
					t.Errorf("hijack: %v", err)
					return
				}
				// A chunk header promising more bytes than follow, then the close.
				buf.WriteString("40\r\ndata: {\"cho")
				buf.Flush()
				conn.Close()
			},
			wantKind: ErrorKindStreamCut, wantStatus: 200, wantChunks: 1,
		},
		{
			name: "malformed data line",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("content", "a"), `{"choices":[{"delta":{"content":"b"`, "[DONE]")
			},
			wantKind: ErrorKindMalformedChunk, wantStatus: 200, wantError: "malformed stream chunk", wantChunks: 1,
		},
		{
			name: "error event in the stream",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("content", "a"),
					`{"error":{"message":"engine died: `+r.Header.Get("Authorization")+`","type":"InternalServerError","code":500}}`)
			},
			wantKind: ErrorKindServerError, wantStatus: 200, wantError: "engine died: Bearer [REDACTED]", wantChunks: 1,
		},
		{
			name: "flat error object in the stream",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("content", "a"), `{"object":"error","message":"scheduler failed","code":500}`, "[DONE]")
			},
			wantKind: ErrorKindServerError, wantStatus: 200, wantError: "scheduler failed", wantChunks: 1,
		},
		{
			name: "usage counting negative tokens",
			handler: func(w http.ResponseWriter, r *http.Request) {
				startStream(w)
				writeEvents(w, deltaChunk("content", "a"), `{"choices":[],"usage":{"prompt_tokens":1000,"completion_tokens":-3,"prompt_tokens_details":{"cached_tokens":992}}}`, "[DONE]")
			},
			wantKind: ErrorKindMalformedChunk, wantStatus: 200, wantError: "usage.completion_tokens is -3: a token count cannot be negative", wantChunks: 1,
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sseServer(t, tt.handler)
			res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(),
				ChatRequest{Model: "m", Messages: testMessages}, nil)
			if res.ErrorKind != tt.wantKind || res.HTTPStatus != tt.wantStatus {
				t.Errorf("kind %q status %d, want %q %d (error %q)", res.ErrorKind, res.HTTPStatus, tt.wantKind, tt.wantStatus, res.Error)
			}
			if !strings.Contains(res.Error, tt.wantError) || !strings.Contains(res.Error, srv.URL) {
				t.Errorf("error %q does not name the URL and contain %q", res.Error, tt.wantError)
			}
			if strings.Contains(res.Error, "\n") {
				t.Errorf("error is not one line: %q", res.Error)
			}
			if res.GeneratedChunks != tt.wantChunks {
				t.Errorf("generated_chunks = %d, want %d", res.GeneratedChunks, tt.wantChunks)
			}
			assertNoKey(t, res)
		})
	}
}

// assertNoKey fails if the API key appears anywhere in the result's JSON.
func assertNoKey(t *testing.T, res Result) {
	t.Helper()
	encoded, err := json.Marshal(res)
	if err != nil {
		t.Fatalf("encoding result: %v", err)
	}
	if strings.Contains(string(encoded), testKey) {
		t.Errorf("API key leaked into the result: %s", encoded)
	}
}

func TestStreamChatConnectionRefused(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := testClient(t, Config{}, "http://"+addr)
	res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
	if res.ErrorKind != ErrorKindUnreachable || res.HTTPStatus != 0 {
		t.Errorf("kind %q status %d, want unreachable 0 (error %q)", res.ErrorKind, res.HTTPStatus, res.Error)
	}
	if !strings.Contains(res.Error, addr) {
		t.Errorf("error %q does not name the address", res.Error)
	}
	assertNoKey(t, res)
}

func TestStreamChatCancel(t *testing.T) {
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		writeEvents(w, deltaChunk("content", "first"))
		blockUntilDone(r)
	})
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var phases []string
	res := testClient(t, Config{}, srv.URL).StreamChat(ctx, ChatRequest{Model: "m", Messages: testMessages}, func(p Progress) {
		phases = append(phases, p.Phase)
		if p.Phase == PhaseDecode {
			cancel()
		}
	})
	if res.ErrorKind != ErrorKindCanceled {
		t.Errorf("kind %q, want canceled (error %q)", res.ErrorKind, res.Error)
	}
	if res.GeneratedChunks != 1 || res.Answer != "first" || res.HTTPStatus != 200 {
		t.Errorf("kept %d chunks, answer %q, status %d; want 1, \"first\", 200", res.GeneratedChunks, res.Answer, res.HTTPStatus)
	}
	if want := []string{PhasePrefill, PhaseDecode, PhaseDone}; strings.Join(phases, ",") != strings.Join(want, ",") {
		t.Errorf("phases %v, want %v", phases, want)
	}
}

func TestStreamChatTimeout(t *testing.T) {
	tests := []struct {
		name    string
		handler http.HandlerFunc
		status  int
	}{
		{"before headers", func(w http.ResponseWriter, r *http.Request) { blockUntilDone(r) }, 0},
		{"while streaming", func(w http.ResponseWriter, r *http.Request) {
			startStream(w)
			writeEvents(w, deltaChunk("reasoning", "a"))
			blockUntilDone(r)
		}, 200},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sseServer(t, tt.handler)
			res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(),
				ChatRequest{Model: "m", Messages: testMessages, Timeout: 50 * time.Millisecond}, nil)
			if res.ErrorKind != ErrorKindTimeout || res.HTTPStatus != tt.status {
				t.Errorf("kind %q status %d, want timeout %d (error %q)", res.ErrorKind, res.HTTPStatus, tt.status, res.Error)
			}
		})
	}
}

func TestStreamChatInvalidRequest(t *testing.T) {
	c := New(Config{BaseURL: "http://127.0.0.1:1/v1"})
	called := false
	res := c.StreamChat(context.Background(), ChatRequest{Model: "", Messages: testMessages}, func(Progress) { called = true })
	if res.ErrorKind != ErrorKindInvalidRequest || called {
		t.Errorf("kind %q (progress called %v), want invalid_request without progress", res.ErrorKind, called)
	}
}

func TestStreamChatProgress(t *testing.T) {
	var cfg Config
	const chunks = 50
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for range chunks {
			writeEvents(w, deltaChunk("content", "t"))
		}
		writeEvents(w, usageChunk(3, chunks, ""), "[DONE]")
	})
	cfg.ProgressInterval = time.Nanosecond
	c := testClient(t, cfg, srv.URL)
	var reports []Progress
	res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages},
		func(p Progress) { reports = append(reports, p) })
	if res.Failed() {
		t.Fatalf("request failed: %s", res.Error)
	}
	if len(reports) < 3 || reports[0].Phase != PhasePrefill || reports[1].Phase != PhaseDecode || reports[1].Tokens != 1 {
		t.Fatalf("reports start %+v, want prefill then decode at 1 token", reports[:min(len(reports), 2)])
	}
	last := reports[len(reports)-1]
	if last.Phase != PhaseDone || last.Tokens != chunks {
		t.Errorf("last report %+v, want done at %d tokens", last, chunks)
	}
	for i := 1; i < len(reports); i++ {
		if reports[i].Tokens < reports[i-1].Tokens || reports[i].Elapsed < reports[i-1].Elapsed {
			t.Errorf("report %d went backwards: %+v after %+v", i, reports[i], reports[i-1])
		}
	}
}

func TestStreamChatAnswerCap(t *testing.T) {
	piece := strings.Repeat("é", 100) // 200 bytes, 2-byte runes
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		for range 3 * AnswerCapBytes / len(piece) {
			writeEvents(w, deltaChunk("content", piece))
		}
		writeEvents(w, "[DONE]")
	})
	res := testClient(t, Config{}, srv.URL).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
	if res.Failed() {
		t.Fatalf("request failed: %s", res.Error)
	}
	if !res.AnswerTruncated || len(res.Answer) > AnswerCapBytes || len(res.Answer) < AnswerCapBytes-4 {
		t.Errorf("answer %d bytes, truncated %v; want close to %d and truncated", len(res.Answer), res.AnswerTruncated, AnswerCapBytes)
	}
	if !strings.HasPrefix(piece+piece, res.Answer[:2*len(piece)]) || !json.Valid([]byte(`"`+res.Answer+`"`)) {
		t.Errorf("answer cut inside a rune")
	}
}

func TestResultJSONFieldNames(t *testing.T) {
	encoded, err := json.Marshal(Result{})
	if err != nil {
		t.Fatal(err)
	}
	var fields map[string]any
	if err := json.Unmarshal(encoded, &fields); err != nil {
		t.Fatal(err)
	}
	for _, name := range []string{"started_at", "time_to_first_output_ms", "time_to_first_visible_token_ms",
		"end_to_end_ms", "output_tokens", "output_tokens_source", "prompt_tokens", "cached_prompt_tokens",
		"prompt_tokens_details_present", "visible_answer", "reasoning_only", "finish_reason", "http_status",
		"error", "decode_tokens_per_second", "effective_prefill_tokens_per_second"} {
		if _, ok := fields[name]; !ok {
			t.Errorf("field %q missing from %s", name, encoded)
		}
	}
	if fields["cached_prompt_tokens"] != nil || fields["time_to_first_output_ms"] != nil {
		t.Errorf("absent values must encode as null: %s", encoded)
	}
}

// TestStreamChatWaitsAreBounded: a server that takes the connection and never answers, or
// stops in the middle of a stream, ends the request at the header or chunk bound, far
// before its total timeout; silence before the first byte (a long prefill) is not cut.
func TestStreamChatWaitsAreBounded(t *testing.T) {
	testStreamChatWaitsAreBounded(t, Config{})
	d := New(Config{BaseURL: "http://127.0.0.1:1/v1"})
	if d.headerTimeout != DefaultHeaderTimeout || d.chunkTimeout != DefaultChunkTimeout {
		t.Errorf("defaults: header %s chunk %s", d.headerTimeout, d.chunkTimeout)
	}
}

func testStreamChatWaitsAreBounded(t *testing.T, cfg Config) {
	const total = 20 * time.Second // only a regression would reach it
	bounded := func(url string) *Client {
		cfg.HeaderTimeout, cfg.ChunkTimeout = 100*time.Millisecond, 100*time.Millisecond
		return testClient(t, cfg, url)
	}
	t.Run("no headers", func(t *testing.T) {
		url := silentServer(t)
		res := bounded(url).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: total}, nil)
		if res.ErrorKind != ErrorKindTimeout || !strings.Contains(res.Error, "no response headers") || res.StreamMS >= float64(total.Milliseconds()) {
			t.Errorf("kind %q after %.0f ms: %q; want a header timeout", res.ErrorKind, res.StreamMS, res.Error)
		}
	})
	t.Run("silent mid-stream", func(t *testing.T) {
		srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
			startStream(w)
			writeEvents(w, roleChunk(), deltaChunk("content", "a"))
			blockUntilDone(r)
		})
		res := bounded(srv.URL).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: total}, nil)
		if res.ErrorKind != ErrorKindTimeout || !strings.Contains(res.Error, "between chunks") || res.Answer != "a" {
			t.Errorf("kind %q answer %q: %q; want a chunk timeout keeping the answer", res.ErrorKind, res.Answer, res.Error)
		}
	})
	t.Run("long prefill", func(t *testing.T) {
		srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
			startStream(w)
			w.(http.Flusher).Flush()
			time.Sleep(500 * time.Millisecond) // 5x the chunk bound before the first byte
			writeEvents(w, roleChunk(), deltaChunk("content", "done"), finishChunk("stop"), usageChunk(3, 1, ""), "[DONE]")
		})
		res := bounded(srv.URL).StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, Timeout: total}, nil)
		if res.Failed() || res.Answer != "done" {
			t.Errorf("a prefill longer than the chunk bound failed: kind %q: %q", res.ErrorKind, res.Error)
		}
	})
}

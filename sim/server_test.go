package sim

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"
	"github.com/prometheus/common/model"
	openai "github.com/sashabaranov/go-openai"
)

// startTiny starts the tiny profile fast; override tweaks it.
func startTiny(t *testing.T, override func(*Profile)) *Server {
	t.Helper()
	s, err := Start(Options{Profile: "tiny", Speed: 1000, Override: override})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() {
		if err := s.Close(); err != nil {
			t.Errorf("close: %v", err)
		}
	})
	return s
}

func testContext(t *testing.T) context.Context {
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	t.Cleanup(cancel)
	return ctx
}

func openAIClient(s *Server, key string) *openai.Client {
	cfg := openai.DefaultConfig(key)
	cfg.BaseURL = s.URL() + "/v1"
	return openai.NewClientWithConfig(cfg)
}

// metrics scrapes /metrics and parses it with expfmt's text parser.
func metrics(t *testing.T, s *Server) map[string]*dto.MetricFamily {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	parser := expfmt.NewTextParser(model.UTF8Validation)
	fams, err := parser.TextToMetricFamilies(resp.Body)
	if err != nil {
		t.Fatalf("parse /metrics: %v", err)
	}
	return fams
}

// metricSum sums a family's values over every series whose labels include match
// (name, value pairs), the engine label included when given.
func metricSum(fams map[string]*dto.MetricFamily, name string, match ...string) float64 {
	f, ok := fams[name]
	if !ok {
		return -1
	}
	sum := 0.0
series:
	for _, m := range f.GetMetric() {
		for i := 0; i+1 < len(match); i += 2 {
			found := false
			for _, l := range m.GetLabel() {
				if l.GetName() == match[i] && l.GetValue() == match[i+1] {
					found = true
				}
			}
			if !found {
				continue series
			}
		}
		switch {
		case m.Counter != nil:
			sum += m.GetCounter().GetValue()
		case m.Gauge != nil:
			sum += m.GetGauge().GetValue()
		case m.Histogram != nil:
			sum += float64(m.GetHistogram().GetSampleCount())
		}
	}
	return sum
}

func userMessage(text string) []openai.ChatCompletionMessage {
	return []openai.ChatCompletionMessage{{Role: openai.ChatMessageRoleUser, Content: text}}
}

func TestStreamingWithGoOpenAI(t *testing.T) {
	s := startTiny(t, nil)
	ctx := testContext(t)
	client := openAIClient(s, "")
	text := proseOfTokens(600, 3) + "\nWhat does offloading prove?"

	run := func() (content string, usage *openai.Usage, finish openai.FinishReason) {
		stream, err := client.CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
			Model:         "tiny-sim",
			Messages:      userMessage(text),
			MaxTokens:     6, // below answer_tokens_min: always cut, finish_reason length
			Stream:        true,
			StreamOptions: &openai.StreamOptions{IncludeUsage: true},
		})
		if err != nil {
			t.Fatal(err)
		}
		defer stream.Close()
		for range 1000 {
			chunk, err := stream.Recv()
			if errors.Is(err, io.EOF) {
				return content, usage, finish
			}
			if err != nil {
				t.Fatal(err)
			}
			if chunk.Usage != nil {
				usage = chunk.Usage
			}
			for _, c := range chunk.Choices {
				content += c.Delta.Content
				if c.FinishReason != "" {
					finish = c.FinishReason
				}
			}
		}
		t.Fatal("stream did not end")
		return
	}

	content, usage, finish := run()
	promptTokens := len(Tokenize(RenderChat([]ChatMessage{{Role: "user", Content: text}}, true)))
	if usage == nil || usage.PromptTokens != promptTokens || usage.CompletionTokens != 6 || usage.TotalTokens != promptTokens+6 {
		t.Fatalf("usage %+v, want %d prompt and 6 completion tokens", usage, promptTokens)
	}
	if usage.PromptTokensDetails != nil {
		t.Errorf("cold request reports cached tokens %+v; vLLM omits 0", usage.PromptTokensDetails)
	}
	if finish != openai.FinishReasonLength || CountTokens(content) != 6 {
		t.Errorf("finish %q, content %q (%d tokens); want length and 6 tokens", finish, content, CountTokens(content))
	}

	again, usage, _ := run()
	wantCached := (promptTokens - 1) / 16 * 16
	if usage.PromptTokensDetails == nil || usage.PromptTokensDetails.CachedTokens != wantCached {
		t.Errorf("repeat cached tokens %+v, want %d", usage.PromptTokensDetails, wantCached)
	}
	if again != content {
		t.Error("the same prompt produced different output")
	}

	fams := metrics(t, s)
	for name, want := range map[string]float64{
		"vllm:prompt_tokens_total":         float64(2 * promptTokens),
		"vllm:prefix_cache_hits_total":     float64(wantCached),
		"vllm:generation_tokens_total":     12,
		"vllm:num_requests_running":        0,
		"vllm:kv_cache_usage_perc":         0,
		"vllm:time_to_first_token_seconds": 2,
		"vllm:inter_token_latency_seconds": 10,
	} {
		if got := metricSum(fams, name); got != want {
			t.Errorf("%s = %g, want %g", name, got, want)
		}
	}
	if got := metricSum(fams, "vllm:request_success_total", "finished_reason", "length"); got != 2 {
		t.Errorf("length finishes = %g, want 2", got)
	}
}

// sseEvent is one data: payload of a raw stream, decoded loosely.
type sseEvent struct {
	raw    string
	Object string `json:"object"`
	Usage  *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
	Choices []struct {
		Delta struct {
			Role             string  `json:"role"`
			Content          *string `json:"content"`
			Reasoning        *string `json:"reasoning"`
			ReasoningContent *string `json:"reasoning_content"`
		} `json:"delta"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
}

// rawStream posts a streaming chat request and returns its data: payloads in order;
// "[DONE]" appears as an event with raw "[DONE]". Malformed payloads keep only raw.
func rawStream(t *testing.T, s *Server, body map[string]any) ([]sseEvent, error) {
	t.Helper()
	data, _ := json.Marshal(body)
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	if ct := resp.Header.Get("Content-Type"); !strings.HasPrefix(ct, "text/event-stream") {
		t.Errorf("content type %q", ct)
	}
	var events []sseEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		line := sc.Text()
		if line == "" {
			continue
		}
		payload, ok := strings.CutPrefix(line, "data: ")
		if !ok {
			t.Fatalf("non-data line %q", line)
		}
		ev := sseEvent{raw: payload}
		if payload != "[DONE]" {
			_ = json.Unmarshal([]byte(payload), &ev)
		}
		events = append(events, ev)
	}
	return events, sc.Err()
}

func chatBody(text string, maxTokens int) map[string]any {
	return map[string]any{
		"model":          "tiny-sim",
		"messages":       []map[string]string{{"role": "user", "content": text}},
		"stream":         true,
		"stream_options": map[string]bool{"include_usage": true},
		"max_tokens":     maxTokens,
	}
}

func TestRawSSEShape(t *testing.T) {
	for _, field := range []string{"reasoning", "reasoning_content"} {
		t.Run(field, func(t *testing.T) {
			s := startTiny(t, func(p *Profile) {
				p.ReasoningTokensMin, p.ReasoningTokensMax = 5, 5
				p.AnswerTokensMin, p.AnswerTokensMax = 3, 3
				p.ReasoningField = field
			})
			events, err := rawStream(t, s, chatBody("Why offload?", 100))
			if err != nil {
				t.Fatal(err)
			}
			// role chunk, 5 reasoning, 3 content, usage, [DONE]
			if len(events) != 11 {
				t.Fatalf("%d events, want 11: %v", len(events), events)
			}
			if d := events[0].Choices[0].Delta; d.Role != "assistant" || d.Content == nil || *d.Content != "" {
				t.Errorf("first chunk %s, want role assistant and empty content", events[0].raw)
			}
			for i, ev := range events[1:9] {
				d := ev.Choices[0].Delta
				reasoning := d.Reasoning
				if field == "reasoning_content" {
					reasoning = d.ReasoningContent
				}
				if i < 5 && (reasoning == nil || d.Content != nil) || i >= 5 && (d.Content == nil || reasoning != nil) {
					t.Errorf("chunk %d: %s", i+1, ev.raw)
				}
				if last := i == 7; (ev.Choices[0].FinishReason != nil) != last {
					t.Errorf("chunk %d finish_reason: %s", i+1, ev.raw)
				}
			}
			if f := events[8].Choices[0].FinishReason; f == nil || *f != "stop" {
				t.Errorf("last generated chunk %s, want finish_reason stop", events[8].raw)
			}
			u := events[9]
			if !strings.Contains(u.raw, `"choices":[]`) || u.Usage == nil || u.Usage.CompletionTokens != 8 {
				t.Errorf("usage chunk %s", u.raw)
			}
			if events[10].raw != "[DONE]" {
				t.Errorf("last event %q, want [DONE]", events[10].raw)
			}
			// Right after [DONE] the server is idle.
			fams := metrics(t, s)
			if r := metricSum(fams, "vllm:num_requests_running"); r != 0 {
				t.Errorf("running = %g after [DONE]", r)
			}
		})
	}
}

func TestReasoningOnlyWithinMaxTokens(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.ReasoningTokensMin, p.ReasoningTokensMax = 50, 50 })
	events, err := rawStream(t, s, chatBody("Think hard.", 10))
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		for _, c := range ev.Choices {
			if c.Delta.Content != nil && *c.Delta.Content != "" {
				t.Fatalf("visible content in a reasoning-only answer: %s", ev.raw)
			}
		}
	}
	if u := events[len(events)-2].Usage; u == nil || u.CompletionTokens != 10 {
		t.Errorf("usage %s, want 10 completion tokens", events[len(events)-2].raw)
	}
}

func TestNonStreamingCompletion(t *testing.T) {
	s := startTiny(t, nil)
	resp, err := openAIClient(s, "").CreateChatCompletion(testContext(t), openai.ChatCompletionRequest{
		Model:               "tiny-sim",
		Messages:            userMessage("Hello there."),
		MaxCompletionTokens: 5,
		Temperature:         0.7,
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(resp.Choices) != 1 || CountTokens(resp.Choices[0].Message.Content) != 5 || resp.Choices[0].FinishReason != "length" {
		t.Errorf("response %+v", resp)
	}
	if resp.Usage.PromptTokens != CountTokens("<|user|>\nHello there.\n<|assistant|>\n") {
		t.Errorf("prompt tokens %d", resp.Usage.PromptTokens)
	}
}

func postJSON(t *testing.T, url, body string, header ...string) (int, map[string]any) {
	t.Helper()
	req, _ := http.NewRequest(http.MethodPost, url, strings.NewReader(body))
	req.Header.Set("Content-Type", "application/json")
	for i := 0; i+1 < len(header); i += 2 {
		req.Header.Set(header[i], header[i+1])
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var out map[string]any
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		t.Fatalf("%s: body is not JSON: %v", url, err)
	}
	return resp.StatusCode, out
}

func TestErrors(t *testing.T) {
	s := startTiny(t, nil)
	long := proseOfTokens(2100, 1)
	cases := []struct {
		name, body string
		status     int
		errType    string
	}{
		{"malformed JSON", `{"model": "tiny-sim", "messages": [`, 400, "BadRequestError"},
		{"unknown model", `{"model": "gpt-9", "messages": [{"role":"user","content":"hi"}]}`, 404, "NotFoundError"},
		{"over max_model_len", `{"model": "tiny-sim", "messages": [{"role":"user","content":"` + long + `"}]}`, 400, "BadRequestError"},
		{"prompt plus max_tokens over", `{"model": "tiny-sim", "max_tokens": 2040, "messages": [{"role":"user","content":"hi there"}]}`, 400, "BadRequestError"},
		{"no messages", `{"model": "tiny-sim", "messages": []}`, 400, "BadRequestError"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := postJSON(t, s.URL()+"/v1/chat/completions", c.body)
			e, _ := body["error"].(map[string]any)
			if status != c.status || e == nil || e["type"] != c.errType || e["code"] != float64(c.status) || e["message"] == "" {
				t.Errorf("status %d body %v, want %d %s", status, body, c.status, c.errType)
			}
		})
	}
}

func TestAPIKey(t *testing.T) {
	s, err := Start(Options{Profile: "tiny", Speed: 1000, APIKey: "sekret"})
	if err != nil {
		t.Fatal(err)
	}
	defer s.Close()
	ctx := testContext(t)
	for _, key := range []string{"", "wrong"} {
		_, err := openAIClient(s, key).CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "tiny-sim", Messages: userMessage("hi")})
		var apiErr *openai.APIError
		if !errors.As(err, &apiErr) || apiErr.HTTPStatusCode != 401 {
			t.Errorf("key %q: err %v, want 401", key, err)
		}
	}
	if _, err := openAIClient(s, "sekret").CreateChatCompletion(ctx, openai.ChatCompletionRequest{Model: "tiny-sim", Messages: userMessage("hi")}); err != nil {
		t.Errorf("right key: %v", err)
	}
	// As with vLLM, only /v1 routes are protected.
	if resp, err := http.Get(s.URL() + "/metrics"); err != nil || resp.StatusCode != 200 {
		t.Errorf("/metrics without key: %v", err)
	} else {
		resp.Body.Close()
	}
}

func TestInfoEndpoints(t *testing.T) {
	s := startTiny(t, nil)
	status, tok := postJSON(t, s.URL()+"/tokenize", `{"model":"tiny-sim","messages":[{"role":"user","content":"Hello, world."}],"add_generation_prompt":true}`)
	want := len(Tokenize("<|user|>\nHello, world.\n<|assistant|>\n"))
	if status != 200 || tok["count"] != float64(want) || tok["max_model_len"] != float64(2048) || len(tok["tokens"].([]any)) != want {
		t.Errorf("tokenize messages: %d %v, want count %d", status, tok, want)
	}
	status, tok = postJSON(t, s.URL()+"/tokenize", `{"model":"tiny-sim","prompt":"Hello, world."}`)
	if status != 200 || tok["count"] != float64(4) {
		t.Errorf("tokenize prompt: %d %v, want count 4", status, tok)
	}
	status, tok = postJSON(t, s.URL()+"/tokenize", `{"model":"other","prompt":"x"}`)
	if status != 404 {
		t.Errorf("tokenize unknown model: %d %v", status, tok)
	}

	get := func(path string) map[string]any {
		resp, err := http.Get(s.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		var out map[string]any
		if resp.StatusCode != 200 || json.NewDecoder(resp.Body).Decode(&out) != nil {
			t.Fatalf("GET %s: status %d", path, resp.StatusCode)
		}
		return out
	}
	models := get("/v1/models")
	data := models["data"].([]any)[0].(map[string]any)
	if models["object"] != "list" || data["id"] != "tiny-sim" || data["object"] != "model" || data["max_model_len"] != float64(2048) {
		t.Errorf("/v1/models = %v", models)
	}
	if v := get("/version")["version"]; !strings.Contains(v.(string), "kvbench.sim") {
		t.Errorf("/version = %v", v)
	}
	resp, err := http.Get(s.URL() + "/health")
	if err != nil || resp.StatusCode != 200 {
		t.Fatalf("/health: %v", err)
	}
	resp.Body.Close()
}

func TestCloseEndsInFlightStream(t *testing.T) {
	s, err := Start(Options{Profile: "tiny", Speed: 0.01}) // first token in seconds
	if err != nil {
		t.Fatal(err)
	}
	ctx := testContext(t)
	stream, err := openAIClient(s, "").CreateChatCompletionStream(ctx, openai.ChatCompletionRequest{
		Model: "tiny-sim", Messages: userMessage("slow"), Stream: true,
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	if err := s.Close(); err != nil {
		t.Fatal(err)
	}
	for range 100 {
		_, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			t.Fatal("stream completed normally after Close")
		}
		if err != nil {
			return
		}
	}
	t.Error("stream still delivering after Close")
}

package client

import (
	"context"
	"encoding/json"
	"io"
	"net/http"
	"strings"
	"testing"
	"time"
)

// TestStreamCompletion: a completion is posted to /v1/completions with its prompt as a JSON
// list of token ids (or a string), streamed, and timed by the same reader as a chat: text
// chunks are the output, usage gives the token counts and cached tokens.
func TestStreamCompletion(t *testing.T) {
	var got map[string]any
	var path string
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		path = r.URL.Path
		body, _ := io.ReadAll(r.Body)
		got = nil
		if err := json.Unmarshal(body, &got); err != nil {
			t.Errorf("body %s: %v", body, err)
		}
		startStream(w)
		writeEvents(w, textChunk("a", ""))
		time.Sleep(20 * time.Millisecond)
		writeEvents(w, textChunk(" b", ""), textChunk(" c", "length"))
		writeEvents(w, usageChunk(7, 3, `,"prompt_tokens_details":{"cached_tokens":4}`), "[DONE]")
	})
	c := newTestClient(srv)
	res := c.StreamCompletion(context.Background(), CompletionRequest{Model: "m", PromptTokenIDs: []int32{1000, 7, 31999}, MaxTokens: 3, IgnoreEOS: true, ExtraBody: map[string]any{"top_k": 1}}, nil)
	if res.Failed() {
		t.Fatalf("failed: %s %s", res.ErrorKind, res.Error)
	}
	if path != "/v1/completions" {
		t.Errorf("posted to %s", path)
	}
	if ids, ok := got["prompt"].([]any); !ok || len(ids) != 3 || ids[0] != float64(1000) || ids[2] != float64(31999) {
		t.Errorf("prompt sent as %v", got["prompt"])
	}
	if got["max_tokens"] != float64(3) || got["ignore_eos"] != true || got["stream"] != true || got["top_k"] != float64(1) || got["messages"] != nil {
		t.Errorf("body %v", got)
	}
	if res.OutputTokens != 3 || res.OutputTokensSource != OutputTokensFromUsage || res.GeneratedChunks != 3 || res.Answer != "a b c" || res.FinishReason != "length" {
		t.Errorf("output %+v", res)
	}
	if res.PromptTokens == nil || *res.PromptTokens != 7 || res.CachedPromptTokens == nil || *res.CachedPromptTokens != 4 {
		t.Errorf("usage prompt %v cached %v", res.PromptTokens, res.CachedPromptTokens)
	}
	if res.TimeToFirstOutputMS == nil || res.EndToEndMS == nil || *res.EndToEndMS-*res.TimeToFirstOutputMS <= 0 || res.DecodeTokensPerSecond == nil || !res.VisibleAnswer {
		t.Errorf("timings %v %v decode %v", res.TimeToFirstOutputMS, res.EndToEndMS, res.DecodeTokensPerSecond)
	}

	res = c.StreamCompletion(context.Background(), CompletionRequest{Model: "m", PromptText: " the of"}, nil)
	if res.Failed() || got["prompt"] != " the of" {
		t.Errorf("text prompt: %v, sent %v", res.Error, got["prompt"])
	}
}

// TestStreamCompletionFailures: a refused or bad completion is data naming the completions
// URL, and a request without a prompt is never sent.
func TestStreamCompletionFailures(t *testing.T) {
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		http.Error(w, `{"object":"error","message":"Token id 999999 is out of vocabulary"}`, http.StatusBadRequest)
	})
	c := newTestClient(srv)
	res := c.StreamCompletion(context.Background(), CompletionRequest{Model: "m", PromptTokenIDs: []int32{999999}}, nil)
	if res.ErrorKind != ErrorKindHTTPStatus || res.HTTPStatus != 400 || !strings.Contains(res.Error, "/v1/completions: http status 400") || !strings.Contains(res.Error, "out of vocabulary") {
		t.Errorf("400: %s %s", res.ErrorKind, res.Error)
	}
	for _, req := range []CompletionRequest{
		{Model: "m"},
		{PromptTokenIDs: []int32{1}},
		{Model: "m", PromptTokenIDs: []int32{1}, PromptText: "x"},
		{Model: "m", PromptTokenIDs: []int32{-1}},
		{Model: "m", PromptTokenIDs: []int32{1}, ExtraBody: map[string]any{"prompt": "x"}},
	} {
		if res := c.StreamCompletion(context.Background(), req, nil); res.ErrorKind != ErrorKindInvalidRequest {
			t.Errorf("%+v: %s %s", req, res.ErrorKind, res.Error)
		}
	}
	sent, err := SentCompletionFields(CompletionRequest{Model: "m", PromptTokenIDs: []int32{5}, MaxTokens: 9})
	if err != nil || strings.Contains(string(sent), "prompt") || !strings.Contains(string(sent), `"max_tokens":9`) {
		t.Errorf("sent fields %s %v", sent, err)
	}
}

// TestEncodeCompletion: the body, its prompt spliced in without a second scan, is byte for
// byte what marshalling the whole body gives, for token ids, text (HTML characters escaped
// as json.Marshal does) and extra_body; and a body encoded ahead is sent as it is.
func TestEncodeCompletion(t *testing.T) {
	type whole struct {
		Model         string          `json:"model"`
		Prompt        json.RawMessage `json:"prompt,omitempty"`
		MaxTokens     int             `json:"max_tokens,omitempty"`
		Temperature   float32         `json:"temperature"`
		Stream        bool            `json:"stream"`
		StreamOptions streamOptions   `json:"stream_options"`
		IgnoreEOS     bool            `json:"ignore_eos,omitempty"`
		MinTokens     int             `json:"min_tokens,omitempty"`

		ReturnCachedTokensDetails bool `json:"return_cached_tokens_details,omitempty"`
	}
	for _, req := range []CompletionRequest{
		{Model: "m<&>", PromptTokenIDs: []int32{0, 17, 31999}, MaxTokens: 9, Temperature: 0.5, IgnoreEOS: true, MinTokens: 2, CachedTokensDetails: true},
		{Model: "m", PromptText: "a <b> & \"c\"\n\u2028", MaxTokens: 1},
		{Model: "m", PromptTokenIDs: []int32{5}, ExtraBody: map[string]any{"top_k": 3}},
	} {
		var prompt []byte
		if req.PromptText != "" {
			prompt, _ = json.Marshal(req.PromptText)
		} else {
			ids, _ := json.Marshal(req.PromptTokenIDs)
			prompt = ids
		}
		want, err := json.Marshal(whole{Model: req.Model, Prompt: prompt, MaxTokens: req.MaxTokens, Temperature: req.Temperature, Stream: true,
			StreamOptions: streamOptions{IncludeUsage: true}, IgnoreEOS: req.IgnoreEOS, MinTokens: req.MinTokens, ReturnCachedTokensDetails: req.CachedTokensDetails})
		if err != nil {
			t.Fatal(err)
		}
		if len(req.ExtraBody) > 0 {
			want = append(want[:len(want)-1], `,"top_k":3}`...)
		}
		got, err := EncodeCompletion(req)
		if err != nil || string(got.Bytes()) != string(want) || got.Len() != int64(len(want)) {
			t.Errorf("%+v:\n got %s %v\nwant %s", req, got.Bytes(), err, want)
		}
	}

	var sent []byte
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		sent, _ = io.ReadAll(r.Body)
		startStream(w)
		writeEvents(w, textChunk("a", "length"), usageChunk(1, 1, ""), "[DONE]")
	})
	c := New(Config{BaseURL: srv.URL + "/v1"})
	body := []byte(`{"model":"m","prompt":[7],"stream":true}`)
	if res := c.StreamCompletion(context.Background(), CompletionRequest{Model: "m", Body: RawBody(body)}, nil); res.Failed() || string(sent) != string(body) {
		t.Errorf("sent %s (%s), want the body encoded ahead", sent, res.Error)
	}
}

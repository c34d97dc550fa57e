package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"errors"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"

	openai "github.com/sashabaranov/go-openai"
)

// textEvent is one data: payload of a completions stream.
type textEvent struct {
	raw     string
	Object  string `json:"object"`
	Choices []struct {
		Text         string  `json:"text"`
		FinishReason *string `json:"finish_reason"`
	} `json:"choices"`
	Usage *struct {
		PromptTokens        int `json:"prompt_tokens"`
		CompletionTokens    int `json:"completion_tokens"`
		PromptTokensDetails *struct {
			CachedTokens int `json:"cached_tokens"`
		} `json:"prompt_tokens_details"`
	} `json:"usage"`
}

// completionStream posts a streaming completions request and returns its payloads in order.
func completionStream(t *testing.T, s *Server, body map[string]any) []textEvent {
	t.Helper()
	body["stream"] = true
	body["stream_options"] = map[string]bool{"include_usage": true}
	data, _ := json.Marshal(body)
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		b, _ := io.ReadAll(resp.Body)
		t.Fatalf("status %d: %s", resp.StatusCode, b)
	}
	var events []textEvent
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok {
			continue
		}
		ev := textEvent{raw: payload}
		if payload != "[DONE]" {
			if err := json.Unmarshal([]byte(payload), &ev); err != nil {
				t.Fatalf("payload %q: %v", payload, err)
			}
		}
		events = append(events, ev)
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	return events
}

// tokenIDs returns n token ids, block i of 16 drawn from seed+i, so prompts that share
// seeds share exact blocks.
func tokenIDs(n int, seeds ...uint64) []int32 {
	out := make([]int32, 0, n)
	for i := 0; len(out) < n; i++ {
		out = append(out, syntheticPrompt(seeds[min(i, len(seeds)-1)]+uint64(i)*1000, 16)...)
	}
	return out[:n]
}

func TestCompletionsStreamTokenIDs(t *testing.T) {
	s := startTiny(t, nil)
	prompt := tokenIDs(40, 1)
	events := completionStream(t, s, map[string]any{"model": "tiny-sim", "prompt": prompt, "max_tokens": 5, "ignore_eos": true})
	// 5 text chunks, the usage chunk, [DONE].
	if len(events) != 7 || events[6].raw != "[DONE]" {
		t.Fatalf("%d events: %v", len(events), events)
	}
	for i, ev := range events[:5] {
		if ev.Object != "text_completion" || len(ev.Choices) != 1 || CountTokens(ev.Choices[0].Text) != 1 ||
			(ev.Choices[0].FinishReason != nil) != (i == 4) {
			t.Errorf("chunk %d: %s", i, ev.raw)
		}
	}
	if f := events[4].Choices[0].FinishReason; f == nil || *f != "length" {
		t.Errorf("ignore_eos ends on length: %s", events[4].raw)
	}
	u := events[5]
	if !strings.Contains(u.raw, `"choices":[]`) || u.Usage == nil || u.Usage.PromptTokens != 40 || u.Usage.CompletionTokens != 5 || u.Usage.PromptTokensDetails != nil {
		t.Errorf("usage chunk %s: want 40 prompt tokens, 5 completion, nothing cached", u.raw)
	}
	fams := metrics(t, s)
	if got := metricSum(fams, "vllm:prompt_tokens_total"); got != 40 {
		t.Errorf("prompt tokens counter %g, want 40", got)
	}
}

// TestCompletionsTokenIDsAreExactOnTheKVEngine: token-id prompts reach the prefix cache as
// sent: a prompt sharing two whole blocks (of 16) with an earlier one hits exactly those 32
// tokens, and an identical one hits all but the block with its last token.
func TestCompletionsTokenIDsAreExactOnTheKVEngine(t *testing.T) {
	s := startTiny(t, nil)
	first := tokenIDs(48, 7)
	shared := append(append([]int32{}, first[:32]...), tokenIDs(20, 99)...)
	cached := func(prompt []int32) int {
		events := completionStream(t, s, map[string]any{"model": "tiny-sim", "prompt": prompt, "max_tokens": 1})
		u := events[len(events)-2].Usage
		if u == nil || u.PromptTokens != len(prompt) {
			t.Fatalf("usage %s, want %d prompt tokens", events[len(events)-2].raw, len(prompt))
		}
		if u.PromptTokensDetails == nil {
			return 0
		}
		return u.PromptTokensDetails.CachedTokens
	}
	if got := cached(first); got != 0 {
		t.Errorf("a cold prompt hit %d tokens", got)
	}
	if got := cached(shared); got != 32 {
		t.Errorf("a prompt sharing 2 blocks hit %d tokens, want 32", got)
	}
	if got := cached(first); got != 32 {
		t.Errorf("a repeated 48-token prompt hit %d tokens, want 32 (its last block is computed)", got)
	}
}

// TestCompletionsStringPromptHasNoTemplate: a string prompt is tokenized as it is (4 words,
// 4 tokens), through go-openai's completion calls, streaming and not.
func TestCompletionsStringPromptHasNoTemplate(t *testing.T) {
	s := startTiny(t, nil)
	resp, err := openAIClient(s, "").CreateCompletion(testContext(t), openai.CompletionRequest{
		Model: "tiny-sim", Prompt: " the cache holds blocks", MaxTokens: 4,
	})
	if err != nil {
		t.Fatal(err)
	}
	if resp.Object != "text_completion" || len(resp.Choices) != 1 || CountTokens(resp.Choices[0].Text) != resp.Usage.CompletionTokens ||
		resp.Usage.PromptTokens != 4 || resp.Usage.CompletionTokens > 4 {
		t.Errorf("response %+v", resp)
	}
	stream, err := openAIClient(s, "").CreateCompletionStream(testContext(t), openai.CompletionRequest{
		Model: "tiny-sim", Prompt: " the cache", MaxTokens: 3, Stream: true, StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var text strings.Builder
	for range 100 {
		chunk, err := stream.Recv()
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		for _, c := range chunk.Choices {
			text.WriteString(c.Text)
		}
	}
	if CountTokens(text.String()) < 1 || CountTokens(text.String()) > 3 {
		t.Errorf("streamed text %q", text.String())
	}
}

func TestCompletionsErrors(t *testing.T) {
	s := startTiny(t, nil)
	long := `[` + strings.Repeat("1,", 2040) + `1]`
	cases := []struct {
		name, body, message string
		status              int
	}{
		{"malformed JSON", `{"model": "tiny-sim", "prompt": [`, "malformed JSON", 400},
		{"unknown model", `{"model": "gpt-9", "prompt": "hi"}`, "does not exist", 404},
		{"no prompt", `{"model": "tiny-sim"}`, "prompt is required", 400},
		{"empty string", `{"model": "tiny-sim", "prompt": ""}`, "must not be empty", 400},
		{"empty ids", `{"model": "tiny-sim", "prompt": []}`, "must not be empty", 400},
		{"id out of vocabulary", `{"model": "tiny-sim", "prompt": [1, 129280]}`, "Token id 129280 is out of vocabulary", 400},
		{"negative id", `{"model": "tiny-sim", "prompt": [-1]}`, "Token id -1 is out of vocabulary", 400},
		{"fractional id", `{"model": "tiny-sim", "prompt": [1, 2.5]}`, "token ids must be integers", 400},
		{"two prompts", `{"model": "tiny-sim", "prompt": ["a", "b"]}`, "2 prompts in one request", 400},
		{"not a prompt", `{"model": "tiny-sim", "prompt": {"a": 1}}`, "must be a string, a list of token ids", 400},
		{"max_tokens 0", `{"model": "tiny-sim", "prompt": "hi", "max_tokens": 0}`, "max_tokens must be at least 1", 400},
		{"over the context", `{"model": "tiny-sim", "prompt": ` + long + `}`, "(2041 in the prompt, 16 in the completion)", 400},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			status, body := postJSON(t, s.URL()+"/v1/completions", c.body)
			e, _ := body["error"].(map[string]any)
			msg, _ := e["message"].(string)
			if status != c.status || !strings.Contains(msg, c.message) {
				t.Errorf("status %d body %v, want %d with %q", status, body, c.status, c.message)
			}
		})
	}
	// A list holding one prompt is that prompt.
	status, body := postJSON(t, s.URL()+"/v1/completions", `{"model": "tiny-sim", "prompt": [[5, 6, 7]], "max_tokens": 1}`)
	if u, _ := body["usage"].(map[string]any); status != 200 || u["prompt_tokens"] != float64(3) {
		t.Errorf("one prompt in a list: %d %v", status, body)
	}
}

// TestFaultsCountCompletions: chat and completions requests share the fault numbering.
func TestFaultsCountCompletions(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.FailEveryNthRequest = 2 })
	if status, _ := postJSON(t, s.URL()+"/v1/chat/completions", `{"model": "tiny-sim", "messages": [{"role": "user", "content": "hi"}], "max_tokens": 1}`); status != 200 {
		t.Fatalf("request 1: %d", status)
	}
	if status, body := postJSON(t, s.URL()+"/v1/completions", `{"model": "tiny-sim", "prompt": "hi", "max_tokens": 1}`); status != 500 {
		t.Errorf("request 2 (completions): %d %v, want the injected 500", status, body)
	}
}

// rawTextStream posts a streaming completions request and returns its data payloads as
// sent, and the read error a broken connection gives.
func rawTextStream(t *testing.T, s *Server, maxTokens int) ([]string, error) {
	t.Helper()
	data, _ := json.Marshal(map[string]any{"model": "tiny-sim", "prompt": "hi", "max_tokens": maxTokens, "ignore_eos": true, "stream": true})
	resp, err := http.Post(s.URL()+"/v1/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	var payloads []string
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		if p, ok := strings.CutPrefix(sc.Text(), "data: "); ok {
			payloads = append(payloads, p)
		}
	}
	return payloads, sc.Err()
}

// TestCompletionsStreamFaults: text completions carry the same stream faults as chat: a
// cut after token 3 breaks the connection with no [DONE], and a malformed event comes
// just before token 2.
func TestCompletionsStreamFaults(t *testing.T) {
	cut := startTiny(t, func(p *Profile) { p.CutStreamAfterTokens = 3 })
	payloads, err := rawTextStream(t, cut, 10)
	if err == nil || len(payloads) != 3 || slices.Contains(payloads, "[DONE]") {
		t.Errorf("cut stream: %d events, read error %v; want 3 and a broken connection", len(payloads), err)
	}
	garbled := startTiny(t, func(p *Profile) { p.MalformedSSEAtToken = 2 })
	payloads, err = rawTextStream(t, garbled, 4)
	if err != nil {
		t.Fatal(err)
	}
	var broken []int
	for i, p := range payloads {
		if p != "[DONE]" && !json.Valid([]byte(p)) {
			broken = append(broken, i)
		}
	}
	// token 1, the broken line, tokens 2 to 4, [DONE]
	if !slices.Equal(broken, []int{1}) || len(payloads) != 6 || payloads[5] != "[DONE]" {
		t.Errorf("broken lines at %v of %d events (last %q); want [1] of 6 ending in [DONE]", broken, len(payloads), payloads[len(payloads)-1])
	}
}

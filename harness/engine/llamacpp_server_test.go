package engine

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"math/rand/v2"
	"net/http"
	"os"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/llamacpptest"
	"github.com/anvil-serving/kvbench/prompts"
)

// The eviction study of issue 6, small enough for two CPU cores: six prompts that share a
// system message, then prompt 0 again on the single slot.
const (
	studyPrompts = 6
	sharedWords  = 800  // about 825 tokens with the chat template
	uniqueWords  = 5200 // about 6k tokens per prompt in all
	maxTokens    = 8
	// blockTokens is how far the no-RAM-tier replay may differ from the shared prefix.
	blockTokens = 64
)

func TestPromptCacheReplay(t *testing.T) {
	server, model, err := llamacpptest.Locate()
	if err != nil {
		if os.Getenv("KVBENCH_REQUIRE_LLAMA") != "" {
			t.Fatalf("KVBENCH_REQUIRE_LLAMA is set but %v", err)
		}
		t.Skipf("skipping llama.cpp test: %v", err)
	}
	tests := []struct {
		name        string
		cacheRAMMiB int
		wantReload  bool // the replay reloads prompt 0 from the host-RAM tier
	}{
		{name: "cache-ram-512", cacheRAMMiB: 512, wantReload: true},
		{name: "cache-ram-0", cacheRAMMiB: 0, wantReload: false},
	}
	msgs := studyMessages(studyPrompts)
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			// The only time bound: a generous limit on the whole subtest.
			ctx, cancel := context.WithTimeout(context.Background(), 3*time.Minute)
			defer cancel()
			srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, CacheRAMMiB: tt.cacheRAMMiB})
			if err != nil {
				t.Fatal(err)
			}
			t.Cleanup(func() {
				srv.Close()
				if t.Failed() {
					t.Logf("llama-server log tail:\n%s", srv.LogTail(30))
				}
			})
			tc := NewLlamaTokenClient(srv.URL(), nil)

			ids := make([][]int, len(msgs))
			for i, m := range msgs {
				if ids[i], err = tc.TokenIDs(ctx, m); err != nil {
					t.Fatal(err)
				}
			}
			n, err := tc.CountTokens(ctx, msgs[0])
			if err != nil {
				t.Fatal(err)
			}
			if n != len(ids[0]) {
				t.Errorf("CountTokens = %d, len(TokenIDs) = %d", n, len(ids[0]))
			}
			if got, want := tc.Calls(), int64(len(msgs)+1); got != want {
				t.Errorf("Calls() = %d, want %d", got, want)
			}
			if it, err := inputTokens(ctx, srv.URL(), msgs[0]); err != nil {
				t.Error(err)
			} else if it != len(ids[0]) {
				t.Errorf("/v1/chat/completions/input_tokens = %d, /tokenize = %d", it, len(ids[0]))
			}
			shared := commonPrefix(ids[0], ids[len(ids)-1])

			var cold chatResult
			for i, m := range msgs {
				r, err := chat(ctx, srv.URL(), m)
				if err != nil {
					t.Fatalf("prompt %d: %v", i, err)
				}
				checkCompletion(t, fmt.Sprintf("prompt %d", i), r, len(ids[i]))
				if i == 0 {
					cold = r
				}
			}
			before, err := scrapeMetrics(ctx, srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			replay, err := chat(ctx, srv.URL(), msgs[0])
			if err != nil {
				t.Fatalf("replay: %v", err)
			}
			after, err := scrapeMetrics(ctx, srv.URL())
			if err != nil {
				t.Fatal(err)
			}
			checkCompletion(t, "replay", replay, len(ids[0]))

			cached := replay.Usage.PromptTokensDetails.CachedTokens
			t.Logf("prompt %d tokens, shared prefix %d; replay cached %d (cache_n %d); TTFT cold %v, replay %v; prompt_ms cold %.1f, replay %.1f",
				len(ids[0]), shared, cached, replay.Timings.CacheN, cold.TTFT.Round(time.Millisecond),
				replay.TTFT.Round(time.Millisecond), cold.Timings.PromptMS, replay.Timings.PromptMS)
			if cached != replay.Timings.CacheN {
				t.Errorf("usage cached_tokens %d != timings.cache_n %d", cached, replay.Timings.CacheN)
			}
			if cold.Usage.PromptTokensDetails.CachedTokens != 0 {
				t.Errorf("first request cached %d tokens on a fresh server", cold.Usage.PromptTokensDetails.CachedTokens)
			}
			if tt.wantReload {
				if min := len(ids[0]) * 99 / 100; cached < min {
					t.Errorf("replay cached %d of %d tokens, want >= %d (reload from the RAM tier)", cached, len(ids[0]), min)
				}
			} else if cached < shared-blockTokens || cached > shared+blockTokens {
				t.Errorf("replay cached %d tokens, want the shared prefix %d within %d (recompute)", cached, shared, blockTokens)
			}

			// The server's counters agree with usage: cached tokens are counted apart
			// from computed ones.
			dCached := after["llamacpp:prompt_tokens_cached_total"] - before["llamacpp:prompt_tokens_cached_total"]
			dComputed := after["llamacpp:prompt_tokens_total"] - before["llamacpp:prompt_tokens_total"]
			if int(dCached) != cached || int(dComputed) != replay.Usage.PromptTokens-cached {
				t.Errorf("metric deltas over the replay: cached %v, computed %v; usage says cached %d of %d",
					dCached, dComputed, cached, replay.Usage.PromptTokens)
			}
		})
	}
}

func checkCompletion(t *testing.T, what string, r chatResult, wantPrompt int) {
	t.Helper()
	if r.Usage.PromptTokens != wantPrompt {
		t.Errorf("%s: usage.prompt_tokens %d, token client counted %d", what, r.Usage.PromptTokens, wantPrompt)
	}
	// The test model's output bias rules out end-of-sequence tokens, so every request
	// runs to max_tokens.
	if r.Usage.CompletionTokens != maxTokens || r.FinishReason != "length" {
		t.Errorf("%s: %d completion tokens, finish %q; want %d, \"length\"", what, r.Usage.CompletionTokens, r.FinishReason, maxTokens)
	}
}

// studyMessages builds n chat prompts that share a system message and differ from the
// first word of the user message on. The text is deterministic word salad.
func studyMessages(n int) [][]prompts.Message {
	words := strings.Fields(`the cache holds keys and values for every token of a prompt so a server
		can skip work when the same prefix comes back later memory on the device is small while
		host memory is large and slower to reach each request names a document section table
		row field record entry value report summary detail`)
	salad := func(seed uint64, n int) string {
		r := rand.New(rand.NewPCG(seed, 6))
		var b strings.Builder
		for i := range n {
			if i > 0 {
				b.WriteByte(' ')
			}
			b.WriteString(words[r.IntN(len(words))])
		}
		return b.String()
	}
	system := "You answer questions about the documents below. " + salad(0, sharedWords)
	out := make([][]prompts.Message, n)
	for i := range out {
		out[i] = []prompts.Message{
			{Role: "system", Content: system},
			{Role: "user", Content: "Document " + strconv.Itoa(i) + ": " + salad(uint64(i)+1, uniqueWords)},
		}
	}
	return out
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

type chatUsage struct {
	PromptTokens        int `json:"prompt_tokens"`
	CompletionTokens    int `json:"completion_tokens"`
	PromptTokensDetails struct {
		CachedTokens int `json:"cached_tokens"`
	} `json:"prompt_tokens_details"`
}

type chatTimings struct {
	CacheN   int     `json:"cache_n"`
	PromptN  int     `json:"prompt_n"`
	PromptMS float64 `json:"prompt_ms"`
}

type chatResult struct {
	TTFT         time.Duration // until the first chunk with content
	FinishReason string
	Usage        chatUsage
	Timings      chatTimings
}

// chatClient opens a connection per request: llama-server closes connections after a
// streamed response, and a POST on such a pooled connection fails with EOF.
var chatClient = &http.Client{Transport: &http.Transport{DisableKeepAlives: true}}

// chat streams one chat completion and collects TTFT, usage and the server's timings.
func chat(ctx context.Context, baseURL string, msgs []prompts.Message) (chatResult, error) {
	body, _ := json.Marshal(map[string]any{
		"messages":       msgs,
		"max_tokens":     maxTokens,
		"stream":         true,
		"stream_options": map[string]any{"include_usage": true},
		"temperature":    0,
	})
	url := baseURL + "/v1/chat/completions"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return chatResult{}, err
	}
	req.Header.Set("Content-Type", "application/json")
	start := time.Now()
	resp, err := chatClient.Do(req)
	if err != nil {
		return chatResult{}, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		var msg bytes.Buffer
		msg.ReadFrom(resp.Body)
		return chatResult{}, fmt.Errorf("POST %s: status %s: %s", url, resp.Status, msg.Bytes())
	}
	var res chatResult
	sc := bufio.NewScanner(resp.Body)
	sc.Buffer(make([]byte, 1<<20), 1<<20)
	for sc.Scan() {
		data, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || data == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content string `json:"content"`
				} `json:"delta"`
				FinishReason *string `json:"finish_reason"`
			} `json:"choices"`
			Usage   *chatUsage   `json:"usage"`
			Timings *chatTimings `json:"timings"`
		}
		if err := json.Unmarshal([]byte(data), &chunk); err != nil {
			return res, fmt.Errorf("decoding chunk from %s: %w: %s", url, err, data)
		}
		for _, c := range chunk.Choices {
			if c.Delta.Content != "" && res.TTFT == 0 {
				res.TTFT = time.Since(start)
			}
			if c.FinishReason != nil {
				res.FinishReason = *c.FinishReason
			}
		}
		if chunk.Usage != nil {
			res.Usage = *chunk.Usage
		}
		if chunk.Timings != nil {
			res.Timings = *chunk.Timings
		}
	}
	if err := sc.Err(); err != nil {
		return res, fmt.Errorf("reading stream from %s: %w", url, err)
	}
	return res, nil
}

func inputTokens(ctx context.Context, baseURL string, msgs []prompts.Message) (int, error) {
	body, _ := json.Marshal(map[string]any{"messages": msgs})
	url := baseURL + "/v1/chat/completions/input_tokens"
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(body))
	if err != nil {
		return 0, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return 0, fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	var out struct {
		InputTokens int `json:"input_tokens"`
	}
	if resp.StatusCode != http.StatusOK {
		return 0, fmt.Errorf("POST %s: status %s", url, resp.Status)
	}
	if err := json.NewDecoder(resp.Body).Decode(&out); err != nil {
		return 0, fmt.Errorf("decoding response of %s: %w", url, err)
	}
	return out.InputTokens, nil
}

// scrapeMetrics returns the unlabelled llamacpp:* samples of /metrics.
func scrapeMetrics(ctx context.Context, baseURL string) (map[string]float64, error) {
	url := baseURL + "/metrics"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return nil, err
	}
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		return nil, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return nil, fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	out := map[string]float64{}
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		name, value, ok := strings.Cut(sc.Text(), " ")
		if !ok || !strings.HasPrefix(name, "llamacpp:") || strings.Contains(name, "{") {
			continue
		}
		v, err := strconv.ParseFloat(value, 64)
		if err != nil {
			return nil, fmt.Errorf("parsing %s sample %q: %w", url, sc.Text(), err)
		}
		out[name] = v
	}
	if err := sc.Err(); err != nil {
		return nil, fmt.Errorf("reading %s: %w", url, err)
	}
	for _, name := range []string{"llamacpp:prompt_tokens_total", "llamacpp:prompt_tokens_cached_total"} {
		if _, ok := out[name]; !ok {
			return nil, fmt.Errorf("%s has no %s", url, name)
		}
	}
	return out, nil
}

// TestProps: /props gives the slot count and one slot's context (-c divided among -np
// slots), which the engine model uses for the single-slot capacity math.
func TestProps(t *testing.T) {
	server, model, err := llamacpptest.Locate()
	if err != nil {
		if os.Getenv("KVBENCH_REQUIRE_LLAMA") != "" {
			t.Fatalf("KVBENCH_REQUIRE_LLAMA is set but %v", err)
		}
		t.Skipf("skipping llama.cpp test: %v", err)
	}
	for _, slots := range []int{1, 2} {
		t.Run(strconv.Itoa(slots), func(t *testing.T) {
			ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
			defer cancel()
			srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, Slots: slots, Context: 16384})
			if err != nil {
				t.Fatal(err)
			}
			defer srv.Close()
			p, err := NewLlamaTokenClient(srv.URL(), &http.Client{Timeout: 30 * time.Second}).Props(ctx)
			if err != nil {
				t.Fatal(err)
			}
			if p.Slots != slots || p.SlotContext != 16384/slots {
				t.Fatalf("props %+v, want %d slots of %d tokens", p, slots, 16384/slots)
			}
		})
	}
}

package sim

import (
	"bufio"
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
	"time"
)

// fidelityOutput is what one streamed chat answered: its text, token ids and cached tokens.
type fidelityOutput struct {
	text   string
	ids    []int32
	cached int
}

// chatOutput streams body to s's chat endpoint with return_token_ids and collects the
// output; status is the HTTP status (the body is read only on 200).
func chatOutput(t *testing.T, s *Server, body map[string]any) (fidelityOutput, int) {
	t.Helper()
	body["stream"] = true
	body["stream_options"] = map[string]bool{"include_usage": true}
	body["return_token_ids"] = true
	data, _ := json.Marshal(body)
	resp, err := http.Post(s.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(data))
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		_, _ = io.Copy(io.Discard, resp.Body)
		return fidelityOutput{}, resp.StatusCode
	}
	var out fidelityOutput
	var text strings.Builder
	sc := bufio.NewScanner(resp.Body)
	for sc.Scan() {
		payload, ok := strings.CutPrefix(sc.Text(), "data: ")
		if !ok || payload == "[DONE]" {
			continue
		}
		var chunk struct {
			Choices []struct {
				Delta struct {
					Content   *string `json:"content"`
					Reasoning *string `json:"reasoning"`
				} `json:"delta"`
				TokenIDs []int32 `json:"token_ids"`
			} `json:"choices"`
			Usage *struct {
				Details *struct {
					Cached int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		if err := json.Unmarshal([]byte(payload), &chunk); err != nil {
			t.Fatalf("chunk %q: %v", payload, err)
		}
		for _, c := range chunk.Choices {
			for _, p := range []*string{c.Delta.Reasoning, c.Delta.Content} {
				if p != nil {
					text.WriteString(*p)
				}
			}
			out.ids = append(out.ids, c.TokenIDs...)
		}
		if u := chunk.Usage; u != nil && u.Details != nil {
			out.cached = u.Details.Cached
		}
	}
	if err := sc.Err(); err != nil {
		t.Fatal(err)
	}
	out.text = text.String()
	return out, resp.StatusCode
}

// fidelityPrompt is a chat body of about n tokens unique to seed.
func fidelityPrompt(seed, n int) map[string]any {
	words := make([]string, n)
	for i := range words {
		words[i] = string(rune('a'+(seed+i)%26)) + string(rune('a'+(seed*7+i*3)%26)) + "x"
	}
	b := chatBody(strings.Join(words, " "), 16)
	b["ignore_eos"] = true
	return b
}

// evictFromGPU sends prompts enough to push everything earlier out of tiny's 4096-token GPU
// pool (each about 1500 tokens), leaving it in the 8192-token CPU tier.
func evictFromGPU(t *testing.T, s *Server) {
	t.Helper()
	for seed := 100; seed < 104; seed++ {
		if _, status := chatOutput(t, s, fidelityPrompt(seed, 1200)); status != http.StatusOK {
			t.Fatalf("filler %d: status %d", seed, status)
		}
	}
}

func TestReloadReproducesOutput(t *testing.T) {
	for _, tc := range []struct {
		name    string
		corrupt bool
	}{{"faithful reload", false}, {"corrupt reload", true}} {
		t.Run(tc.name, func(t *testing.T) {
			s := startTiny(t, func(p *Profile) { p.CorruptReload = tc.corrupt })
			original, _ := chatOutput(t, s, fidelityPrompt(1, 1200))
			if len(original.ids) != 16 || original.text == "" {
				t.Fatalf("original: %d token ids, text %q; want 16 ids and text", len(original.ids), original.text)
			}
			before := s.Engine().Counters()
			evictFromGPU(t, s)
			mid := s.Engine().Counters()
			replay, _ := chatOutput(t, s, fidelityPrompt(1, 1200))
			after := s.Engine().Counters()
			if hits := after.ExternalPrefixCacheHits - mid.ExternalPrefixCacheHits; hits < 1000 {
				t.Fatalf("replay: %d external hits (before the fillers %d); the test needs a reload", hits, before.ExternalPrefixCacheHits)
			}
			same := slices.Equal(replay.ids, original.ids) && replay.text == original.text
			if same == tc.corrupt {
				t.Errorf("replay output %v %q vs original %v %q: identical %v, want %v", replay.ids, replay.text, original.ids, original.text, same, !tc.corrupt)
			}
			// The ids name the text: each output word is one token.
			for i, w := range strings.SplitAfter(strings.TrimPrefix(replay.text, " "), " ") {
				if id := tokenID(strings.TrimSuffix(w, " "), true); id != replay.ids[i] {
					t.Fatalf("token %d %q has id %d, stream says %d", i, w, id, replay.ids[i])
				}
			}
		})
	}
}

func TestCacheSaltForcesMissWithSameOutput(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.CorruptReload = true })
	body := func(salt string) map[string]any {
		b := fidelityPrompt(3, 1200)
		if salt != "" {
			b["cache_salt"] = salt
		}
		return b
	}
	original, _ := chatOutput(t, s, body(""))
	c0 := s.Engine().Counters()
	twin, _ := chatOutput(t, s, body("twin-a"))
	c1 := s.Engine().Counters()
	if twin.cached != 0 || c1.PrefixCacheHits != c0.PrefixCacheHits || c1.ExternalPrefixCacheHits != c0.ExternalPrefixCacheHits {
		t.Errorf("salted twin of a prompt on GPU: %d cached, GPU hits +%d, external +%d; want a full miss",
			twin.cached, c1.PrefixCacheHits-c0.PrefixCacheHits, c1.ExternalPrefixCacheHits-c0.ExternalPrefixCacheHits)
	}
	if !slices.Equal(twin.ids, original.ids) {
		t.Errorf("the salt changed the output: %v vs %v (a salt changes where KV is kept, not what it holds)", twin.ids, original.ids)
	}
	if c1.GPUToCPUBytes <= c0.GPUToCPUBytes {
		t.Errorf("the salted twin stored nothing (%d -> %d bytes): it is written through under its own hashes", c0.GPUToCPUBytes, c1.GPUToCPUBytes)
	}
	// The same salt again shares the twin's blocks; another salt shares nothing.
	again, _ := chatOutput(t, s, body("twin-a"))
	other, _ := chatOutput(t, s, body("twin-b"))
	if again.cached == 0 || other.cached != 0 {
		t.Errorf("cached tokens: same salt %d (want > 0), other salt %d (want 0)", again.cached, other.cached)
	}
	if _, status := chatOutput(t, s, body("")); status != http.StatusOK {
		t.Fatalf("unsalted: status %d", status)
	}
	b := body("")
	b["cache_salt"] = ""
	if _, status := chatOutput(t, s, b); status != http.StatusBadRequest {
		t.Errorf("empty cache_salt: status %d, want 400 (vLLM: min_length 1)", status)
	}
}

func TestTRTLLMRefusesSaltOnCompletions(t *testing.T) {
	s := startTiny(t, func(p *Profile) {
		p.Dialect = DialectTRTLLM
		p.FlatOffloadMetrics, p.LabelledOffloadMetrics = false, false
	})
	for _, tc := range []struct {
		path string
		want int
	}{{"/v1/completions", http.StatusBadRequest}, {"/v1/chat/completions", http.StatusOK}} {
		body := map[string]any{"model": "tiny-sim", "max_tokens": 4, "cache_salt": "s",
			"prompt": "hello there", "messages": []map[string]string{{"role": "user", "content": "hello there"}}}
		data, _ := json.Marshal(body)
		resp, err := http.Post(s.URL()+tc.path, "application/json", bytes.NewReader(data))
		if err != nil {
			t.Fatal(err)
		}
		_, _ = io.Copy(io.Discard, resp.Body)
		resp.Body.Close()
		if resp.StatusCode != tc.want {
			t.Errorf("%s with cache_salt on trtllm: status %d, want %d", tc.path, resp.StatusCode, tc.want)
		}
	}
}

func TestReloadLatencyOnlyOnLoads(t *testing.T) {
	p := engineProfile(t, 64, 256)
	p.ReloadLatency = 250 * time.Millisecond
	e := NewEngine(p)
	cold := serve(t, e, syntheticPrompt(0, 320))
	for seed := uint64(1); seed <= 4; seed++ {
		serve(t, e, syntheticPrompt(seed, 320))
	}
	replay := serve(t, e, syntheticPrompt(0, 320))
	// Cold: 320 tokens at 1000/s. Replay: the 19 blocks' copy (304 x 50 B at 1 MB/s), the
	// fixed reload latency and one block computed on top of 304 cached tokens.
	if want := 320 * time.Millisecond; cold.Duration != want {
		t.Errorf("cold prefill %v, want %v (no reload, no latency)", cold.Duration, want)
	}
	copyTime := time.Duration(float64(304*testLoadBytes) / 1e6 * float64(time.Second))
	if want := copyTime + 250*time.Millisecond + 16*time.Millisecond; replay.Duration != want {
		t.Errorf("reload prefill %v, want %v (copy %v + latency 250ms + 16 tokens computed)", replay.Duration, want, copyTime)
	}
	if got, want := e.Counters().CPUToGPUSeconds, copyTime.Seconds(); got != want {
		t.Errorf("load seconds %g, want the copy alone, %g", got, want)
	}
}

// TestSeedProfileReloadCurveCrosses: on the seed 001 profile a short prompt recomputes
// faster than it reloads (the fixed reload latency dominates) and a long one the other way
// round, so a reload curve has a break-even. Durations are the engine's modelled ones.
func TestSeedProfileReloadCurveCrosses(t *testing.T) {
	p, err := LoadProfile("dsv4-offload16")
	if err != nil {
		t.Fatal(err)
	}
	p.NumGPUBlocks, p.MaxModelLen = 2048, 32768 // a small pool, so eviction takes few tokens
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	for _, tc := range []struct {
		tokens      int
		reloadFirst bool // the reload reaches its first token first
	}{{1024, false}, {8192, true}} {
		e := NewEngine(p)
		prompt := syntheticPrompt(uint64(tc.tokens), tc.tokens)
		cold := serve(t, e, prompt)
		for seed := uint64(1); seed <= 3; seed++ {
			serve(t, e, syntheticPrompt(1000+seed, 16000)) // 48k unique tokens through a 32k pool
		}
		reload := serve(t, e, prompt)
		if reload.ExternalHitTokens < tc.tokens-16 {
			t.Fatalf("%d tokens: %d reloaded, want the whole prompt", tc.tokens, reload.ExternalHitTokens)
		}
		if got := reload.Duration < cold.Duration; got != tc.reloadFirst {
			t.Errorf("%d tokens: reload %v, recompute %v; reload faster %v, want %v", tc.tokens, reload.Duration, cold.Duration, got, tc.reloadFirst)
		}
	}
}

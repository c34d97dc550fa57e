package engine

// This file is what kvbench uses of llama.cpp's llama-server at run time: counting prompt
// tokens and reading token ids through the server's own chat template and tokenizer, and
// reading its slot count. Starting a server for tests lives in internal/llamacpptest.

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"net/http"
	"strings"
	"sync/atomic"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/prompts"
)

var _ prompts.TokenCounter = (*LlamaTokenClient)(nil)

// LlamaTokenClient tokenizes chat messages exactly as llama-server will for a chat completion:
// POST /apply-template renders them with the model's chat template and generation prompt,
// then POST /tokenize turns the text into token ids with special tokens added and parsed,
// as the completion path does.
type LlamaTokenClient struct {
	baseURL string
	http    *http.Client
	calls   atomic.Int64
}

// NewLlamaTokenClient returns a client for the server at baseURL (e.g. Server.URL()); a nil hc
// means http.DefaultClient.
func NewLlamaTokenClient(baseURL string, hc *http.Client) *LlamaTokenClient {
	return &LlamaTokenClient{baseURL: strings.TrimRight(baseURL, "/"), http: redact.NoRedirects(hc)}
}

// CountTokens returns the number of prompt tokens msgs become, which llama-server reports
// as usage.prompt_tokens.
func (c *LlamaTokenClient) CountTokens(ctx context.Context, msgs []prompts.Message) (int, error) {
	ids, err := c.TokenIDs(ctx, msgs)
	return len(ids), err
}

// TokenIDs returns the prompt token ids msgs become.
func (c *LlamaTokenClient) TokenIDs(ctx context.Context, msgs []prompts.Message) ([]int, error) {
	c.calls.Add(1)
	var tmpl struct {
		Prompt string `json:"prompt"`
	}
	if err := c.post(ctx, "/apply-template", map[string]any{"messages": msgs}, &tmpl); err != nil {
		return nil, err
	}
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	body := map[string]any{"content": tmpl.Prompt, "add_special": true, "parse_special": true}
	if err := c.post(ctx, "/tokenize", body, &tok); err != nil {
		return nil, err
	}
	return tok.Tokens, nil
}

// CountTextTokens counts the tokens a plain prompt becomes on a completions endpoint, no
// template applied (prompts.TextTokenCounter).
func (c *LlamaTokenClient) CountTextTokens(ctx context.Context, text string) (int, error) {
	ids, err := c.TextTokenIDs(ctx, text)
	return len(ids), err
}

// TextTokenIDs returns the token ids a plain prompt becomes on a completions endpoint: POST
// /tokenize with special tokens added, as the completion path adds them, and not parsed.
func (c *LlamaTokenClient) TextTokenIDs(ctx context.Context, text string) ([]int, error) {
	c.calls.Add(1)
	var tok struct {
		Tokens []int `json:"tokens"`
	}
	body := map[string]any{"content": text, "add_special": true, "parse_special": false}
	if err := c.post(ctx, "/tokenize", body, &tok); err != nil {
		return nil, err
	}
	return tok.Tokens, nil
}

// Calls returns how many CountTokens and TokenIDs calls were made; each costs two HTTP
// requests.
func (c *LlamaTokenClient) Calls() int64 { return c.calls.Load() }

func (c *LlamaTokenClient) post(ctx context.Context, path string, in, out any) error {
	url := c.baseURL + path
	b, err := json.Marshal(in)
	if err != nil {
		return fmt.Errorf("encoding request to %s: %w", url, err)
	}
	req, err := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(b))
	if err != nil {
		return fmt.Errorf("building request to %s: %w", url, err)
	}
	req.Header.Set("Content-Type", "application/json")
	// Both endpoints are pure, so let the transport resend the request when the server
	// has closed a pooled keep-alive connection (llama-server does, after streamed
	// responses); the nil value marks it replayable without sending the header.
	req.Header["X-Idempotency-Key"] = nil
	resp, err := c.http.Do(req)
	if err != nil {
		return fmt.Errorf("POST %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		msg, _ := io.ReadAll(io.LimitReader(resp.Body, 512))
		return fmt.Errorf("POST %s: status %s: %s", url, resp.Status, bytes.TrimSpace(msg))
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		return fmt.Errorf("decoding response of %s: %w", url, err)
	}
	return nil
}

// LlamaProps is what kvbench reads of GET /props.
type LlamaProps struct {
	// Slots is total_slots (-np): with one slot, the prompt a replay's slot held before is
	// known, which is what tier attribution needs.
	Slots int
	// SlotContext is default_generation_settings.n_ctx, one slot's context in tokens (-c
	// divided among the slots); 0 when the server does not say.
	SlotContext int
}

// LlamaProps reads the server's slot count and per-slot context from GET /props.
func (c *LlamaTokenClient) Props(ctx context.Context) (LlamaProps, error) {
	url := c.baseURL + "/props"
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, url, nil)
	if err != nil {
		return LlamaProps{}, fmt.Errorf("building request to %s: %w", url, err)
	}
	resp, err := c.http.Do(req)
	if err != nil {
		return LlamaProps{}, fmt.Errorf("GET %s: %w", url, err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		return LlamaProps{}, fmt.Errorf("GET %s: status %s", url, resp.Status)
	}
	var props struct {
		TotalSlots int `json:"total_slots"`
		Defaults   struct {
			NCtx int `json:"n_ctx"`
		} `json:"default_generation_settings"`
	}
	if err := json.NewDecoder(resp.Body).Decode(&props); err != nil {
		return LlamaProps{}, fmt.Errorf("decoding response of %s: %w", url, err)
	}
	return LlamaProps{Slots: props.TotalSlots, SlotContext: props.Defaults.NCtx}, nil
}

// Slots returns the server's slot count from GET /props (total_slots).
func (c *LlamaTokenClient) Slots(ctx context.Context) (int, error) {
	p, err := c.Props(ctx)
	return p.Slots, err
}

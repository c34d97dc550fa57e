package client

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http"
	"net/url"
	"strings"
	"sync/atomic"
	"time"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/prompts"
)

// maxEndpointBody bounds an endpoint answer; /tokenize of a 256k-token prompt is ~2 MB.
const maxEndpointBody = 64 << 20

// Tokenization is the answer of vLLM's POST /tokenize.
type Tokenization struct {
	Count       int   `json:"count"`
	MaxModelLen int   `json:"max_model_len"` // 0 when the server does not say
	Tokens      []int `json:"tokens"`
}

// Tokenize counts the tokens of msgs rendered with model's chat template and the
// generation prompt appended, through POST /tokenize at the server root.
func (c *Client) Tokenize(ctx context.Context, model string, msgs []prompts.Message) (Tokenization, error) {
	body := struct {
		Model               string            `json:"model"`
		Messages            []prompts.Message `json:"messages"`
		AddGenerationPrompt bool              `json:"add_generation_prompt"`
	}{model, msgs, true}
	var answer struct {
		Count       *int  `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	u := c.rootURL + c.tokenizePath
	if err := c.callJSON(ctx, c.tokenizeTimeout, http.MethodPost, u, body, &answer); err != nil {
		return Tokenization{}, err
	}
	if answer.Count == nil {
		return Tokenization{}, fmt.Errorf("post %s: %w: no \"count\" in the answer", redact.URL(u), ErrBadResponse)
	}
	return Tokenization{Count: *answer.Count, MaxModelLen: answer.MaxModelLen, Tokens: answer.Tokens}, nil
}

// CountTextTokens counts the tokens of a plain prompt, as a completions endpoint takes it
// (no chat template; special tokens added as the server adds them), through POST /tokenize
// {"model", "prompt"} at the server root (prompts.TextTokenCounter).
func (t *Tokenizer) CountTextTokens(ctx context.Context, text string) (int, error) {
	t.calls.Add(1)
	tok, err := t.client.TokenizeText(ctx, t.model, text)
	return tok.Count, err
}

// TokenizeText tokenizes a plain prompt as a completions endpoint takes it (no chat
// template; special tokens added as the server adds them) through POST /tokenize {"model",
// "prompt"} at the server root.
func (c *Client) TokenizeText(ctx context.Context, model, text string) (Tokenization, error) {
	body := struct {
		Model  string `json:"model"`
		Prompt string `json:"prompt"`
	}{model, text}
	var answer struct {
		Count       *int  `json:"count"`
		MaxModelLen int   `json:"max_model_len"`
		Tokens      []int `json:"tokens"`
	}
	u := c.rootURL + c.tokenizePath
	if err := c.callJSON(ctx, c.tokenizeTimeout, http.MethodPost, u, body, &answer); err != nil {
		return Tokenization{}, err
	}
	if answer.Count == nil {
		return Tokenization{}, fmt.Errorf("post %s: %w: no \"count\" in the answer", redact.URL(u), ErrBadResponse)
	}
	return Tokenization{Count: *answer.Count, MaxModelLen: answer.MaxModelLen, Tokens: answer.Tokens}, nil
}

var _ prompts.TextTokenCounter = (*Tokenizer)(nil)

// Tokenizer counts tokens for one model through Client.Tokenize and counts the calls
// it made, failed ones included. It is safe for concurrent use.
type Tokenizer struct {
	client *Client
	model  string
	calls  atomic.Int64
}

var _ prompts.TokenCounter = (*Tokenizer)(nil)

// Tokenizer returns a prompts.TokenCounter for model over the server's /tokenize.
func (c *Client) Tokenizer(model string) *Tokenizer {
	return &Tokenizer{client: c, model: model}
}

// CountTokens implements prompts.TokenCounter.
func (t *Tokenizer) CountTokens(ctx context.Context, msgs []prompts.Message) (int, error) {
	t.calls.Add(1)
	tok, err := t.client.Tokenize(ctx, t.model, msgs)
	return tok.Count, err
}

// Calls returns how many /tokenize calls CountTokens has made.
func (t *Tokenizer) Calls() int64 { return t.calls.Load() }

// Model is one entry of GET /v1/models.
type Model struct {
	ID          string `json:"id"`
	Root        string `json:"root,omitempty"`          // vLLM: the path or repo it loaded
	MaxModelLen int    `json:"max_model_len,omitempty"` // 0 when the server does not say
}

// Models lists the served models through GET /v1/models.
func (c *Client) Models(ctx context.Context) ([]Model, error) {
	var answer struct {
		Data *[]Model `json:"data"`
	}
	u := c.baseURL + "/models"
	if err := c.callJSON(ctx, c.callTimeout, http.MethodGet, u, nil, &answer); err != nil {
		return nil, err
	}
	if answer.Data == nil {
		return nil, fmt.Errorf("get %s: %w: no \"data\" list in the answer", redact.URL(u), ErrBadResponse)
	}
	return *answer.Data, nil
}

// Version returns the server version from vLLM's GET /version.
func (c *Client) Version(ctx context.Context) (string, error) {
	var answer struct {
		Version *string `json:"version"`
	}
	u := c.rootURL + "/version"
	if err := c.callJSON(ctx, c.callTimeout, http.MethodGet, u, nil, &answer); err != nil {
		return "", err
	}
	if answer.Version == nil {
		return "", fmt.Errorf("get %s: %w: no \"version\" in the answer", redact.URL(u), ErrBadResponse)
	}
	return *answer.Version, nil
}

// Health checks GET /health answers 2xx.
func (c *Client) Health(ctx context.Context) error {
	return c.callJSON(ctx, c.callTimeout, http.MethodGet, c.rootURL+"/health", nil, nil)
}

// callJSON sends body (if any) as JSON and decodes a 2xx answer into out (if not nil);
// timeout bounds the whole call, connecting and reading the answer included.
// Its errors are one line, name the URL, wrap a sentinel and never hold the API key.
func (c *Client) callJSON(ctx context.Context, timeout time.Duration, method, u string, body, out any) error {
	where := strings.ToLower(method) + " " + redact.URL(u)
	outer := ctx
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	var reqBody io.Reader
	if body != nil {
		encoded, err := json.Marshal(body)
		if err != nil {
			return fmt.Errorf("%s: encoding request: %w", where, err)
		}
		reqBody = bytes.NewReader(encoded)
	}
	req, err := http.NewRequestWithContext(ctx, method, u, reqBody)
	if err != nil {
		return fmt.Errorf("%s: %s", where, c.redact(err.Error()))
	}
	req.Header.Set("Accept", "application/json")
	if body != nil {
		req.Header.Set("Content-Type", "application/json")
	}
	if c.apiKey != "" {
		req.Header.Set("Authorization", "Bearer "+c.apiKey)
	}

	resp, err := c.httpClient.Do(req)
	if err != nil {
		if outer.Err() != nil {
			return fmt.Errorf("%s: %w", where, outer.Err())
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: %w (%s)", where, ErrTimeout, timeout)
		}
		var urlErr *url.Error
		if errors.As(err, &urlErr) {
			err = urlErr.Err // its text repeats the URL
		}
		if errors.Is(err, redact.ErrRedirect) {
			return fmt.Errorf("%s: %w", where, err)
		}
		return fmt.Errorf("%s: %w: %s", where, ErrUnreachable, c.redact(oneLine(err.Error())))
	}
	defer resp.Body.Close()
	data, err := io.ReadAll(io.LimitReader(resp.Body, maxEndpointBody))
	if err != nil {
		if outer.Err() != nil {
			return fmt.Errorf("%s: reading answer: %w", where, outer.Err())
		}
		if ctx.Err() != nil {
			return fmt.Errorf("%s: reading answer: %w (%s)", where, ErrTimeout, timeout)
		}
		return fmt.Errorf("%s: %w: reading answer: %s", where, ErrUnreachable, c.redact(oneLine(err.Error())))
	}
	if resp.StatusCode < 200 || resp.StatusCode > 299 {
		detail := errorBodyMessage(data)
		if strings.Contains(resp.Header.Get("Content-Type"), "html") {
			detail = describeBody("text/html", data)
		}
		return &StatusError{Method: method, URL: redact.URL(u), StatusCode: resp.StatusCode, Detail: c.redact(detail)}
	}
	if out == nil {
		return nil
	}
	if err := json.Unmarshal(data, out); err != nil {
		return fmt.Errorf("%s: %w: expected JSON, got %s", where, ErrBadResponse,
			c.redact(describeBody(resp.Header.Get("Content-Type"), data)))
	}
	return nil
}

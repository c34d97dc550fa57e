package client

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"net"
	"net/http"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/prompts"
)

// fakeVLLM serves vLLM's helper endpoints; tokenize counts one token per byte of content.
func fakeVLLM(t *testing.T) *http.ServeMux {
	mux := http.NewServeMux()
	mux.HandleFunc("POST /tokenize", func(w http.ResponseWriter, r *http.Request) {
		var req struct {
			Model               string            `json:"model"`
			Messages            []prompts.Message `json:"messages"`
			AddGenerationPrompt bool              `json:"add_generation_prompt"`
		}
		if err := json.NewDecoder(r.Body).Decode(&req); err != nil || !req.AddGenerationPrompt || req.Model != "m" {
			http.Error(w, `{"object":"error","message":"bad tokenize request","code":400}`, http.StatusBadRequest)
			return
		}
		count := 0
		for _, m := range req.Messages {
			count += len(m.Content)
		}
		tokens := make([]int, count)
		json.NewEncoder(w).Encode(map[string]any{"count": count, "max_model_len": 262144, "tokens": tokens})
	})
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"object":"list","data":[{"id":"served","object":"model","created":1,"owned_by":"vllm","root":"deepseek-ai/DeepSeek-V4-Flash-0731","parent":null,"max_model_len":262144,"permission":[]}]}`)
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, r *http.Request) {
		io.WriteString(w, `{"version":"0.11.2"}`)
	})
	mux.HandleFunc("GET /health", func(w http.ResponseWriter, r *http.Request) {})
	return mux
}

func TestEndpoints(t *testing.T) {
	srv := sseServer(t, fakeVLLM(t).ServeHTTP)
	c := New(Config{BaseURL: srv.URL + "/v1/", APIKey: testKey})
	ctx := context.Background()

	if c.RootURL() != srv.URL {
		t.Errorf("root URL %q, want %q", c.RootURL(), srv.URL)
	}
	tok, err := c.Tokenize(ctx, "m", []prompts.Message{{Role: "user", Content: "hello"}})
	if err != nil || tok.Count != 5 || tok.MaxModelLen != 262144 || len(tok.Tokens) != 5 {
		t.Errorf("Tokenize = %+v, %v; want count 5, max_model_len 262144", tok, err)
	}

	counter := c.Tokenizer("m")
	for _, content := range []string{"ab", "abcd", "abcdef"} {
		n, err := counter.CountTokens(ctx, []prompts.Message{{Role: "user", Content: content}})
		if err != nil || n != len(content) {
			t.Errorf("CountTokens(%q) = %d, %v", content, n, err)
		}
	}
	if got := counter.Calls(); got != 3 {
		t.Errorf("Calls() = %d, want 3", got)
	}

	models, err := c.Models(ctx)
	want := Model{ID: "served", Root: "deepseek-ai/DeepSeek-V4-Flash-0731", MaxModelLen: 262144}
	if err != nil || len(models) != 1 || models[0] != want {
		t.Errorf("Models = %+v, %v; want [%+v]", models, err, want)
	}
	if v, err := c.Version(ctx); err != nil || v != "0.11.2" {
		t.Errorf("Version = %q, %v", v, err)
	}
	if err := c.Health(ctx); err != nil {
		t.Errorf("Health: %v", err)
	}
}

func TestEndpointErrors(t *testing.T) {
	htmlPage := func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html; charset=utf-8")
		io.WriteString(w, "<!DOCTYPE html>\n<html><head><title>Login</title></head>\n<body>proxy</body></html>\n")
	}
	tests := []struct {
		name       string
		handler    http.HandlerFunc
		call       func(*Client) error
		wantErr    error
		wantStatus int
		wantText   []string
	}{
		{
			name:    "HTML page instead of models JSON",
			handler: htmlPage,
			call:    func(c *Client) error { _, err := c.Models(context.Background()); return err },
			wantErr: ErrBadResponse, wantText: []string{"get ", "/v1/models", "an HTML page", "<title>Login</title>"},
		},
		{
			name: "HTML error page on version",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.Header().Set("Content-Type", "text/html")
				w.WriteHeader(http.StatusBadGateway)
				io.WriteString(w, "<html><body><h1>502 Bad Gateway</h1></body></html>")
			},
			call:    func(c *Client) error { _, err := c.Version(context.Background()); return err },
			wantErr: ErrHTTPStatus, wantStatus: 502, wantText: []string{"/version", "502", "an HTML page"},
		},
		{
			name:    "tokenize not served",
			handler: http.NotFound,
			call: func(c *Client) error {
				_, err := c.Tokenize(context.Background(), "m", testMessages)
				return err
			},
			wantErr: ErrHTTPStatus, wantStatus: 404, wantText: []string{"post ", "/tokenize", "404"},
		},
		{
			name: "401 echoing the key",
			handler: func(w http.ResponseWriter, r *http.Request) {
				w.WriteHeader(http.StatusUnauthorized)
				io.WriteString(w, `{"error":"Unauthorized: `+r.Header.Get("Authorization")+`"}`)
			},
			call:    func(c *Client) error { return c.Health(context.Background()) },
			wantErr: ErrHTTPStatus, wantStatus: 401, wantText: []string{"/health", "[REDACTED]"},
		},
		{
			name: "JSON without the expected field",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"object":"list"}`)
			},
			call:    func(c *Client) error { _, err := c.Models(context.Background()); return err },
			wantErr: ErrBadResponse, wantText: []string{`no "data"`},
		},
		{
			name: "tokenize answer without count",
			handler: func(w http.ResponseWriter, r *http.Request) {
				io.WriteString(w, `{"tokens":[]}`)
			},
			call: func(c *Client) error {
				_, err := c.Tokenize(context.Background(), "m", testMessages)
				return err
			},
			wantErr: ErrBadResponse, wantText: []string{`no "count"`},
		},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			srv := sseServer(t, tt.handler)
			err := tt.call(newTestClient(srv))
			assertEndpointError(t, err, tt.wantErr, srv.URL, tt.wantText...)
			var statusErr *StatusError
			if tt.wantStatus != 0 && (!errors.As(err, &statusErr) || statusErr.StatusCode != tt.wantStatus) {
				t.Errorf("error %v is not a StatusError with code %d", err, tt.wantStatus)
			}
		})
	}
}

func assertEndpointError(t *testing.T, err, sentinel error, url string, texts ...string) {
	t.Helper()
	if !errors.Is(err, sentinel) {
		t.Fatalf("error %v does not wrap %v", err, sentinel)
	}
	msg := err.Error()
	if strings.ContainsAny(msg, "\r\n") {
		t.Errorf("error is not one line: %q", msg)
	}
	if strings.Contains(msg, testKey) {
		t.Errorf("API key leaked: %q", msg)
	}
	for _, text := range append(texts, url) {
		if !strings.Contains(msg, text) {
			t.Errorf("error %q does not contain %q", msg, text)
		}
	}
}

func TestEndpointUnreachable(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	url := "http://" + ln.Addr().String()
	ln.Close()
	c := New(Config{BaseURL: url + "/v1", APIKey: testKey})
	assertEndpointError(t, c.Health(context.Background()), ErrUnreachable, url, "refused")

	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := c.Models(ctx); !errors.Is(err, context.Canceled) {
		t.Errorf("canceled Models: %v, want context.Canceled", err)
	}
	counter := c.Tokenizer("m")
	if _, err := counter.CountTokens(context.Background(), testMessages); !errors.Is(err, ErrUnreachable) || counter.Calls() != 1 {
		t.Errorf("CountTokens: %v after %d calls, want ErrUnreachable after 1", err, counter.Calls())
	}
}

func TestRedact(t *testing.T) {
	tests := []struct{ s, secret, want string }{
		{"Bearer sk-1 and sk-1", "sk-1", "Bearer [REDACTED] and [REDACTED]"},
		{"nothing here", "sk-1", "nothing here"},
		{"empty secret keeps text", "", "empty secret keeps text"},
	}
	for _, tt := range tests {
		if got := Redact(tt.s, tt.secret); got != tt.want {
			t.Errorf("Redact(%q, %q) = %q, want %q", tt.s, tt.secret, got, tt.want)
		}
	}
}

// silentServer accepts connections on 127.0.0.1 and never answers; it returns the base URL.
func silentServer(t *testing.T) string {
	t.Helper()
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	var conns []net.Conn
	done := make(chan struct{})
	go func() {
		defer close(done)
		for {
			c, err := ln.Accept()
			if err != nil {
				return
			}
			conns = append(conns, c) // held open, never read nor written
		}
	}()
	t.Cleanup(func() {
		ln.Close()
		<-done
		for _, c := range conns {
			c.Close()
		}
	})
	return "http://" + ln.Addr().String()
}

// TestEndpointCallsAreBounded: a server that accepts and never answers makes every endpoint
// call fail with ErrTimeout instead of hanging (the test's own deadline is 10 s; the
// bounds are 100 ms).
func TestEndpointCallsAreBounded(t *testing.T) {
	url := silentServer(t)
	c := New(Config{BaseURL: url + "/v1", APIKey: testKey, CallTimeout: 100 * time.Millisecond, TokenizeTimeout: 150 * time.Millisecond})
	calls := map[string]func(context.Context) error{
		"models":   func(ctx context.Context) error { _, err := c.Models(ctx); return err },
		"version":  func(ctx context.Context) error { _, err := c.Version(ctx); return err },
		"health":   c.Health,
		"tokenize": func(ctx context.Context) error { _, err := c.Tokenize(ctx, "m", testMessages); return err },
	}
	for name, call := range calls {
		t.Run(name, func(t *testing.T) {
			// The outer deadline only keeps a regression from hanging the suite.
			ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
			defer cancel()
			err := call(ctx)
			if !errors.Is(err, ErrTimeout) || ctx.Err() != nil {
				t.Fatalf("got %v (outer context: %v), want ErrTimeout from the call's own bound", err, ctx.Err())
			}
			if !strings.Contains(err.Error(), url) || strings.Contains(err.Error(), testKey) {
				t.Errorf("error %q should name %s and hide the key", err, url)
			}
		})
	}
	if d := New(Config{BaseURL: url}); d.callTimeout != DefaultCallTimeout || d.tokenizeTimeout != DefaultCallTimeout {
		t.Errorf("defaults: call %s tokenize %s, want %s", d.callTimeout, d.tokenizeTimeout, DefaultCallTimeout)
	}
}

// TestErrorsHideURLCredentials: user info and secret query values of the URLs never reach an
// error or a result, though Go's own errors quote request URLs.
func TestErrorsHideURLCredentials(t *testing.T) {
	ln, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	addr := ln.Addr().String()
	ln.Close()
	c := New(Config{BaseURL: "http://alice:PASS-1234@" + addr + "/v1", APIKey: testKey})
	res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
	_, modelsErr := c.Models(context.Background())
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) { http.Error(w, "nope", http.StatusForbidden) })
	_, statusErr := New(Config{BaseURL: strings.Replace(srv.URL, "http://", "http://bob:S3CRET@", 1) + "/v1"}).Models(context.Background())
	for _, text := range []string{res.Error, modelsErr.Error(), statusErr.Error()} {
		if strings.Contains(text, "PASS-1234") || strings.Contains(text, "S3CRET") || !strings.Contains(text, "REDACTED@") {
			t.Errorf("error %q: want the URL with its user info redacted", text)
		}
	}
	if !errors.Is(statusErr, ErrHTTPStatus) || !errors.Is(modelsErr, ErrUnreachable) {
		t.Errorf("sentinels lost: %v / %v", statusErr, modelsErr)
	}
}

package client

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/harness/redact"
)

// TestRedirectsAreRefused: a loopback endpoint answering 307 to another server must not
// get the prompts sent there; the error names both URLs.
func TestRedirectsAreRefused(t *testing.T) {
	var reached atomic.Int64
	other := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { reached.Add(1) }))
	t.Cleanup(other.Close)
	front := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		http.Redirect(w, r, other.URL+r.URL.Path, http.StatusTemporaryRedirect)
	}))
	t.Cleanup(front.Close)

	for _, hc := range []*http.Client{nil, {}} {
		c := New(Config{BaseURL: front.URL + "/v1", APIKey: testKey, HTTPClient: hc})
		_, err := c.Models(context.Background())
		if !errors.Is(err, redact.ErrRedirect) || !strings.Contains(err.Error(), front.URL+"/v1/models") ||
			!strings.Contains(err.Error(), other.URL+"/v1/models") || strings.Contains(err.Error(), "\n") {
			t.Errorf("Models: %v, want a one-line redirect refusal naming both URLs", err)
		}
		res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages}, nil)
		if res.Error == "" || !strings.Contains(res.Error, "redirect refused") || !strings.Contains(res.Error, other.URL) {
			t.Errorf("StreamChat: error %q, want a redirect refusal naming %s", res.Error, other.URL)
		}
		assertNoKey(t, res)
	}
	if n := reached.Load(); n != 0 {
		t.Errorf("the redirect's target got %d requests, want 0", n)
	}
}

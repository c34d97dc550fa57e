package redact

import (
	"context"
	"errors"
	"fmt"
	"net/http"
	"strings"
	"testing"
)

func TestURL(t *testing.T) {
	tests := []struct{ in, want string }{
		{"http://alice:PASS@host:8000/v1", "http://REDACTED@host:8000/v1"},
		{"https://tok@host/v1", "https://REDACTED@host/v1"},
		{"http://host/metrics?token=abc&job=vllm", "http://host/metrics?token=REDACTED&job=vllm"},
		{"http://host/metrics?API_KEY=abc&x-amz-signature=s&page=2", "http://host/metrics?API_KEY=REDACTED&x-amz-signature=REDACTED&page=2"},
		{"http://u:p@host/m?access_token=a%20b", "http://REDACTED@host/m?access_token=REDACTED"},
		{"http://127.0.0.1:8000/v1", "http://127.0.0.1:8000/v1"},
		{"http://host/m?job=vllm&instance=a", "http://host/m?job=vllm&instance=a"},
		{"http://u:pa/ss#w@host/v1", "http://REDACTED@host/v1"}, // url.Parse refuses it
		{"not a url", "not a url"},
	}
	for _, tt := range tests {
		if got := URL(tt.in); got != tt.want {
			t.Errorf("URL(%q) = %q, want %q", tt.in, got, tt.want)
		}
	}
}

func TestText(t *testing.T) {
	in := `scrape http://alice:PASS@h:1/metrics?token=T0K: Get "http://alice:***@h:1/metrics?token=T0K": dial tcp 127.0.0.1:1: connection refused`
	got := Text(in)
	for _, secret := range []string{"PASS", "T0K", "alice"} {
		if strings.Contains(got, secret) {
			t.Errorf("Text left %q in %q", secret, got)
		}
	}
	if !strings.Contains(got, "h:1/metrics") || !strings.Contains(got, "connection refused") {
		t.Errorf("Text lost the place or the cause: %q", got)
	}
}

// TestErrorOfNetHTTP: Go's own request error quotes the URL with its query; Error hides the
// secrets and keeps errors.Is working.
func TestErrorOfNetHTTP(t *testing.T) {
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	req, err := http.NewRequestWithContext(ctx, http.MethodGet, "http://bob:S3CRET@127.0.0.1:1/metrics?token=T0K", nil)
	if err != nil {
		t.Fatal(err)
	}
	_, err = http.DefaultClient.Do(req)
	if err == nil || !strings.Contains(err.Error(), "T0K") {
		t.Fatalf("expected net/http to quote the query: %v", err)
	}
	wrapped := fmt.Errorf("scrape: %w", err)
	red := Error(wrapped)
	if strings.Contains(red.Error(), "T0K") || strings.Contains(red.Error(), "S3CRET") || strings.Contains(red.Error(), "bob") {
		t.Errorf("Error left a secret: %q", red)
	}
	if !errors.Is(red, context.Canceled) {
		t.Errorf("Error broke errors.Is: %v", red)
	}
	if Error(nil) != nil {
		t.Error("Error(nil) is not nil")
	}
}

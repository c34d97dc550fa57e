package metrics

import (
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestRead: a URL is scraped, anything else is read as a saved file, each error naming it.
func TestRead(t *testing.T) {
	const body = "# TYPE vllm:prompt_tokens_total counter\nvllm:prompt_tokens_total 42\n"
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write([]byte(body))
	}))
	defer srv.Close()
	dir := t.TempDir()
	file := filepath.Join(dir, "http-saved.prom") // a file whose name begins like a scheme
	if err := os.WriteFile(file, []byte(body), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, src := range []string{srv.URL + "/metrics", file} {
		exp, err := Read(context.Background(), srv.Client(), src)
		if err != nil || !exp.Has("vllm:prompt_tokens_total") {
			t.Errorf("Read(%s): %v, has the family %v", src, err, exp.Has("vllm:prompt_tokens_total"))
		}
	}
	gone := httptest.NewServer(http.NotFoundHandler())
	gone.Close() // refuses at once: the URL is scraped, not opened as a file
	for _, src := range []string{gone.URL + "/metrics", filepath.Join(dir, "none.prom")} {
		if _, err := Read(context.Background(), srv.Client(), src); err == nil || !strings.Contains(err.Error(), src) {
			t.Errorf("Read(%s): %v, want an error naming it", src, err)
		}
	}
}

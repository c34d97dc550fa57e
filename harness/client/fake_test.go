package client

import (
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/prompts"
)

// testKey is the API key of the tests; it must never show up in an error or a result.
const testKey = "sk-test-7f3a9c0e1d2b4a6f"

var testMessages = []prompts.Message{{Role: "user", Content: "say hi"}}

// sseServer serves handler on 127.0.0.1 and closes it when the test ends.
func sseServer(t testing.TB, handler http.HandlerFunc) *httptest.Server {
	t.Helper()
	srv := httptest.NewServer(handler)
	t.Cleanup(srv.Close)
	return srv
}

func newTestClient(srv *httptest.Server) *Client {
	return New(Config{BaseURL: srv.URL + "/v1", APIKey: testKey})
}

// writeEvents writes each payload as an SSE data event and flushes.
func writeEvents(w http.ResponseWriter, payloads ...string) {
	for _, p := range payloads {
		fmt.Fprintf(w, "data: %s\n\n", p)
	}
	w.(http.Flusher).Flush()
}

func startStream(w http.ResponseWriter) {
	w.Header().Set("Content-Type", "text/event-stream")
	w.WriteHeader(http.StatusOK)
}

func roleChunk() string {
	return `{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"role":"assistant","content":""},"logprobs":null,"finish_reason":null}]}`
}

func deltaChunk(field, text string) string {
	quoted, _ := json.Marshal(text)
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{%q:%s},"logprobs":null,"finish_reason":null}]}`, field, quoted)
}

func finishChunk(reason string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[{"index":0,"delta":{"content":""},"logprobs":null,"finish_reason":%q,"stop_reason":null}]}`, reason)
}

// textChunk is a completion's token chunk (vLLM's text_completion object); reason "" leaves
// finish_reason null.
func textChunk(text, reason string) string {
	quoted, _ := json.Marshal(text)
	finish := "null"
	if reason != "" {
		finish = fmt.Sprintf("%q", reason)
	}
	return fmt.Sprintf(`{"id":"cmpl-1","object":"text_completion","created":1,"model":"m","choices":[{"index":0,"text":%s,"logprobs":null,"finish_reason":%s,"stop_reason":null}]}`, quoted, finish)
}

// usageChunk is the last chunk of an include_usage stream; details is the raw JSON of
// the usage's extra fields, e.g. `,"prompt_tokens_details":{"cached_tokens":5}`.
func usageChunk(prompt, completion int, details string) string {
	return fmt.Sprintf(`{"id":"chatcmpl-1","object":"chat.completion.chunk","created":1,"model":"m","choices":[],"usage":{"prompt_tokens":%d,"total_tokens":%d,"completion_tokens":%d%s}}`, prompt, prompt+completion, completion, details)
}

// testClient is a client of the server at url (its root, without /v1) configured by cfg,
// with the tests' API key unless cfg sets one.
func testClient(t testing.TB, cfg Config, url string) *Client {
	t.Helper()
	cfg.BaseURL = url + "/v1"
	if cfg.APIKey == "" {
		cfg.APIKey = testKey
	}
	return New(cfg)
}

// Bounds of the fault tests: the client's own (small), and the guard every wait of a test
// runs under, far beyond them (a hang fails the test instead of stalling the suite).
const (
	faultBound = 200 * time.Millisecond
	testGuard  = 10 * time.Second
)

// Paths to a server, which must meet each fault and time each token the same way.
const (
	pathHTTP  = "http"
	pathHTTPS = "https" // the server's bytes inside TLS
)

var paths = []string{pathHTTP, pathHTTPS}

// eachPath runs f as a subtest per path.
func eachPath(t *testing.T, f func(t *testing.T, path string)) {
	t.Helper()
	for _, path := range paths {
		t.Run(path, func(t *testing.T) { f(t, path) })
	}
}

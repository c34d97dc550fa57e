package client

import (
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"net/http/httptest"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/prompts"
)

// TestCachedTokensDetails: asked for, the request carries SGLang's
// return_cached_tokens_details and the final chunk's sglext is parsed; not asked for, the
// field is not sent and nothing is parsed.
func TestCachedTokensDetails(t *testing.T) {
	var asked []bool
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		if err := json.NewDecoder(r.Body).Decode(&body); err != nil || body["model"] != "m" {
			http.Error(w, fmt.Sprintf("body %v %v", body, err), http.StatusBadRequest)
			return
		}
		on, _ := body["return_cached_tokens_details"].(bool)
		asked = append(asked, on)
		w.Header().Set("Content-Type", "text/event-stream")
		fmt.Fprint(w, "data: {\"choices\":[{\"delta\":{\"content\":\"hi\"},\"finish_reason\":null}]}\n\n")
		ext := ""
		if on {
			ext = `,"sglext":{"cached_tokens_details":{"device":512,"host":9728,"storage":0,"storage_backend":null}}`
		}
		fmt.Fprintf(w, "data: {\"choices\":[],\"usage\":{\"prompt_tokens\":10300,\"completion_tokens\":1,\"prompt_tokens_details\":{\"cached_tokens\":10240}}%s}\n\ndata: [DONE]\n\n", ext)
	}))
	defer srv.Close()
	c := testClient(t, Config{}, srv.URL)
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	req := ChatRequest{Model: "m", Messages: []prompts.Message{{Role: "user", Content: "x"}}, MaxTokens: 1, CachedTokensDetails: true}
	res := c.StreamChat(ctx, req, nil)
	if res.Failed() {
		t.Fatal(res.Error)
	}
	if d := res.CachedTokensDetails; d == nil || d.Device != 512 || d.Host != 9728 || d.Storage != 0 {
		t.Fatalf("details %+v", d)
	}
	req.CachedTokensDetails = false
	if res := c.StreamChat(ctx, req, nil); res.Failed() || res.CachedTokensDetails != nil {
		t.Fatalf("unasked: %+v", res)
	}
	if len(asked) != 2 || !asked[0] || asked[1] {
		t.Fatalf("field sent %v, want [true false]", asked)
	}
}

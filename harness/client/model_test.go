package client

import (
	"context"
	"net/http"
	"strings"
	"testing"
)

// TestStreamChatRecordsTheServersModel: the model a stream names is recorded as the
// server's, apart from the one asked for, so that an answer from another model shows.
func TestStreamChatRecordsTheServersModel(t *testing.T) {
	for _, tc := range []struct{ asked, want string }{{"m", "m"}, {"wanted/model", "m"}} {
		srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
			startStream(w)
			writeEvents(w, roleChunk(), deltaChunk("content", "hi"), finishChunk("stop"), usageChunk(3, 1, ""), "[DONE]")
		})
		res := newTestClient(srv).StreamChat(context.Background(), ChatRequest{Model: tc.asked, Messages: testMessages}, nil)
		if res.Failed() || res.Model != tc.asked || res.ServerModel != tc.want {
			t.Errorf("asked %q: model %q, server model %q (error %q), want %q and %q", tc.asked, res.Model, res.ServerModel, res.Error, tc.asked, tc.want)
		}
	}
	// A chunk whose model is escaped takes encoding/json's path; both paths read it alike.
	chunk := strings.Replace(roleChunk(), `"model":"m"`, `"model":"\u006d2"`, 1)
	got, err := decodeChunkReusing([]byte(chunk), nil, "m", nil)
	if err != nil || got.Model != "m2" {
		t.Errorf("escaped model decoded as %q (%v), want m2", got.Model, err)
	}
	if got, ok := fastDecodeChunkReusing([]byte(roleChunk()), nil, "m"); !ok || got.Model != "m" {
		t.Errorf("fast path: model %q ok %v, want m true", got.Model, ok)
	}
}

package client

import (
	"context"
	"io"
	"math/rand/v2"
	"net/http"
	"sync"
	"testing"

	"github.com/anvil-serving/kvbench/prompts"
)

// TestStreamedBodyMatchesEncoded: a completion whose prompt streams from the block cache
// (prompts.StreamedPrompt) has, byte for byte and in length, the body of the same prompt
// encoded whole, token ids and text, with and without extra_body, on many generated requests.
func TestStreamedBodyMatchesEncoded(t *testing.T) {
	b, err := prompts.NewBlockBuilder(prompts.BlockConfig{Seed: 3, BlockTokens: 16, CacheBlocks: 4})
	if err != nil {
		t.Fatal(err)
	}
	rng := rand.New(rand.NewPCG(1, 2))
	for i := range 200 {
		n := 1 + rng.IntN(200)
		ids := make([]uint64, rng.IntN((n+15)/16+1))
		for j := range ids {
			ids[j] = uint64(rng.IntN(20))
		}
		req := CompletionRequest{Model: "m", MaxTokens: 1 + rng.IntN(500), Temperature: 0.25, IgnoreEOS: i%3 == 0, CachedTokensDetails: i%5 == 0}
		if i%4 == 0 {
			req.ExtraBody = map[string]any{"top_k": i, "seed": "s<&>"}
		}
		whole, streamed := req, req
		if i%2 == 0 {
			whole.PromptTokenIDs, _ = b.AppendTokenIDs(nil, ids, n, uint64(i))
			streamed.PromptJSON, err = b.TokenIDPrompt(ids, n, uint64(i))
		} else {
			text, _ := b.AppendText(nil, ids, n, uint64(i))
			whole.PromptText = string(text)
			streamed.PromptJSON, err = b.TextPrompt(ids, n, uint64(i))
		}
		if err != nil {
			t.Fatal(err)
		}
		want, err1 := EncodeCompletion(whole)
		got, err2 := EncodeCompletion(streamed)
		if err1 != nil || err2 != nil {
			t.Fatal(err1, err2)
		}
		if w, g := want.Bytes(), got.Bytes(); string(g) != string(w) || got.Len() != int64(len(w)) {
			t.Fatalf("request %d: streamed body (length %d)\n%s\nwant (%d bytes)\n%s", i, got.Len(), g, len(w), w)
		}
	}
	p, _ := b.TokenIDPrompt(nil, 3, 0)
	if _, err := EncodeCompletion(CompletionRequest{Model: "m", PromptText: "a", PromptJSON: p}); err == nil {
		t.Error("a text prompt and a JSON prompt at once: no error")
	}
}

// TestStreamedBodyOnTheWire: the server gets a streamed body whole, with its Content-Length
// (not chunked); and a transport that starts writing the body, gives up and starts again
// with GetBody, as net/http does when it retries a request on a connection that closed,
// sends the whole body the second time.
func TestStreamedBodyOnTheWire(t *testing.T) {
	b, err := prompts.NewBlockBuilder(prompts.BlockConfig{Seed: 8, BlockTokens: 512})
	if err != nil {
		t.Fatal(err)
	}
	p, err := b.TokenIDPrompt([]uint64{1, 2, 3}, 12000, 9)
	if err != nil {
		t.Fatal(err)
	}
	req := CompletionRequest{Model: "m", PromptJSON: p, MaxTokens: 1}
	body, err := EncodeCompletion(req)
	if err != nil {
		t.Fatal(err)
	}
	want := body.Bytes()
	var mu sync.Mutex
	var sent []string
	var lengths []int64
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		mu.Lock()
		sent, lengths = append(sent, string(data)), append(lengths, r.ContentLength)
		mu.Unlock()
		startStream(w)
		writeEvents(w, textChunk("a", "length"), usageChunk(12000, 1, ""), "[DONE]")
	})
	retrying := &http.Client{Transport: rewindingTransport{http.DefaultTransport}}
	for _, c := range []*Client{newTestClient(srv), New(Config{BaseURL: srv.URL + "/v1", HTTPClient: retrying})} {
		for _, r := range []CompletionRequest{req, {Model: "m", Body: body}} {
			if res := c.StreamCompletion(context.Background(), r, nil); res.Failed() {
				t.Fatalf("%s: %s", res.ErrorKind, res.Error)
			}
		}
	}
	if len(sent) != 4 {
		t.Fatalf("the server got %d requests, want 4", len(sent))
	}
	for i := range sent {
		if sent[i] != string(want) || lengths[i] != int64(len(want)) {
			t.Errorf("request %d: Content-Length %d, %d bytes, want the %d of the encoded body", i, lengths[i], len(sent[i]), len(want))
		}
	}
}

// rewindingTransport reads the first bytes of a request's body, then sends the request with
// a body from GetBody: what a retry does.
type rewindingTransport struct{ next http.RoundTripper }

func (t rewindingTransport) RoundTrip(r *http.Request) (*http.Response, error) {
	if r.GetBody == nil {
		return nil, io.ErrUnexpectedEOF
	}
	_, _ = io.ReadFull(r.Body, make([]byte, 1000))
	r2 := r.Clone(r.Context())
	var err error
	if r2.Body, err = r.GetBody(); err != nil {
		return nil, err
	}
	return t.next.RoundTrip(r2)
}

// TestChatBodyEncodedAhead: a chat request sent with the body EncodeChat rendered sends the
// bytes a chat request with its messages sends.
func TestChatBodyEncodedAhead(t *testing.T) {
	var sent []string
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		data, _ := io.ReadAll(r.Body)
		sent = append(sent, string(data))
		startStream(w)
		writeEvents(w, roleChunk(), deltaChunk("content", "a"), finishChunk("length"), usageChunk(3, 1, ""), "[DONE]")
	})
	c := newTestClient(srv)
	req := ChatRequest{Model: "m", Messages: []prompts.Message{{Role: "system", Content: "be <brief>"}, {Role: "user", Content: "hi \u2028 there"}},
		MaxTokens: 4, ExtraBody: map[string]any{"top_p": 0.5}}
	body, err := EncodeChat(req)
	if err != nil {
		t.Fatal(err)
	}
	ahead := ChatRequest{Model: "m", Body: body, MaxTokens: 4}
	for _, r := range []ChatRequest{req, ahead} {
		if res := c.StreamChat(context.Background(), r, nil); res.Failed() {
			t.Fatalf("%s: %s", res.ErrorKind, res.Error)
		}
	}
	if len(sent) != 2 || sent[0] != sent[1] || sent[0] != string(body.Bytes()) {
		t.Errorf("sent %q, want the same body twice", sent)
	}
}

package client

import (
	"context"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// tokenChunk is a vLLM chat chunk carrying text in field and the token ids of return_token_ids.
func tokenChunk(field, text, ids string) string {
	c := deltaChunk(field, text)
	return strings.Replace(c, `"logprobs":null`, `"logprobs":null,"token_ids":`+ids, 1)
}

func TestStreamChatKeepsOutputWhenAsked(t *testing.T) {
	srv := sseServer(t, func(w http.ResponseWriter, r *http.Request) {
		startStream(w)
		writeEvents(w, roleChunk(),
			tokenChunk("reasoning", "think", "[11]"),
			tokenChunk("content", " the", "[279]"),
			tokenChunk("content", " KV é", "[1, 22]"),
			// vLLM sends a chunk with ids and no text when detokenizing held the text back.
			strings.Replace(finishChunk("length"), `"logprobs":null`, `"logprobs":null,"token_ids":[7]`, 1),
			usageChunk(10, 5, ""), "[DONE]")
	})
	c := newTestClient(srv)
	for _, tc := range []struct {
		name string
		keep bool
		text string
		ids  []int
	}{
		{"kept", true, "think the KV é", []int{11, 279, 1, 22, 7}},
		{"not asked", false, "", nil},
	} {
		t.Run(tc.name, func(t *testing.T) {
			res := c.StreamChat(context.Background(), ChatRequest{Model: "m", Messages: testMessages, KeepOutput: tc.keep}, nil)
			if res.Failed() {
				t.Fatal(res.Error)
			}
			if res.OutputText != tc.text || !slices.Equal(res.OutputTokenIDs, tc.ids) {
				t.Errorf("kept text %q ids %v, want %q %v", res.OutputText, res.OutputTokenIDs, tc.text, tc.ids)
			}
			if res.Answer != " the KV é" {
				t.Errorf("answer %q: the visible answer is kept either way", res.Answer)
			}
		})
	}
}

func TestKeptOutputIsBounded(t *testing.T) {
	long := strings.Repeat("é", OutputTextCapBytes) // two bytes a rune: the cap falls inside one
	var acc streamAccumulator
	res := Result{}
	acc.res, acc.keepOutput = &res, true
	acc.keepText("a")
	acc.keepText(long)
	acc.keepText("more")
	acc.keepTokenIDs(make([]int, OutputTokenIDsCap-1))
	acc.keepTokenIDs([]int{1, 2, 3})
	acc.keepTokenIDs([]int{4})
	if len(acc.output) != OutputTextCapBytes-1 || !res.OutputTextTruncated || !strings.HasPrefix(string(acc.output), "aé") {
		t.Errorf("kept %d bytes (truncated %v), want %d cut on a rune boundary", len(acc.output), res.OutputTextTruncated, OutputTextCapBytes-1)
	}
	if len(res.OutputTokenIDs) != OutputTokenIDsCap || !res.OutputTokenIDsTruncated || res.OutputTokenIDs[OutputTokenIDsCap-1] != 1 {
		t.Errorf("kept %d ids (cut %v), want the first %d", len(res.OutputTokenIDs), res.OutputTokenIDsTruncated, OutputTokenIDsCap)
	}
}

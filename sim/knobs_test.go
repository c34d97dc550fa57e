package sim

import (
	"fmt"
	"net/http"
	"testing"
)

// streamOutput counts the generated tokens of a stream and returns its finish reason and
// usage completion tokens.
func streamOutput(t *testing.T, s *Server, body map[string]any) (tokens int, finish string, usage int) {
	t.Helper()
	events, err := rawStream(t, s, body)
	if err != nil {
		t.Fatal(err)
	}
	for _, ev := range events {
		for _, c := range ev.Choices {
			if (c.Delta.Content != nil && *c.Delta.Content != "") || c.Delta.Reasoning != nil || c.Delta.ReasoningContent != nil {
				tokens++
			}
			if c.FinishReason != nil {
				finish = *c.FinishReason
			}
		}
		if ev.Usage != nil {
			usage = ev.Usage.CompletionTokens
		}
	}
	return tokens, finish, usage
}

func TestIgnoreEOSAndMinTokens(t *testing.T) {
	s := startTiny(t, func(p *Profile) {
		p.ReasoningTokensMin, p.ReasoningTokensMax = 3, 3
		p.AnswerTokensMin, p.AnswerTokensMax = 5, 5 // a natural stop after 8 tokens
	})
	with := func(maxTokens int, set map[string]any) map[string]any {
		b := chatBody("How long?", maxTokens)
		for k, v := range set {
			b[k] = v
		}
		return b
	}
	cases := []struct {
		name       string
		body       map[string]any
		want       int
		wantFinish string
	}{
		{"natural stop", with(40, nil), 8, "stop"},
		{"ignore_eos runs to max_tokens", with(40, map[string]any{"ignore_eos": true}), 40, "length"},
		{"ignore_eos below the natural length", with(5, map[string]any{"ignore_eos": true}), 5, "length"},
		{"min_tokens extends the output", with(40, map[string]any{"min_tokens": 20}), 20, "stop"},
		{"min_tokens below the natural length", with(40, map[string]any{"min_tokens": 4}), 8, "stop"},
		{"ignore_eos false", with(40, map[string]any{"ignore_eos": false}), 8, "stop"},
	}
	for _, tc := range cases {
		tokens, finish, usage := streamOutput(t, s, tc.body)
		if tokens != tc.want || usage != tc.want || finish != tc.wantFinish {
			t.Errorf("%s: %d tokens streamed, usage %d, finish %q; want %d, %q", tc.name, tokens, usage, finish, tc.want, tc.wantFinish)
		}
	}
	for _, bad := range []int{-1, 41} {
		status, body := postJSON(t, s.URL()+"/v1/chat/completions",
			fmt.Sprintf(`{"model":"tiny-sim","messages":[{"role":"user","content":"x"}],"max_tokens":40,"min_tokens":%d}`, bad))
		if status != http.StatusBadRequest {
			t.Errorf("min_tokens %d: status %d %v, want 400", bad, status, body)
		}
	}
}

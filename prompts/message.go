package prompts

import "context"

// Message is one chat message of a built prompt.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// TokenCounter counts the tokens a server would see for messages rendered as a chat
// prompt with the generation prompt appended. The harness implements it over the server's
// /tokenize endpoint; tests implement it with a known rule.
type TokenCounter interface {
	CountTokens(ctx context.Context, msgs []Message) (int, error)
}

package prompts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
)

// Chat builds one user's conversation turn by turn: a system prompt shared by every user of
// the seed, then for each turn a new question of about TurnTokens tokens (estimated), with
// the server's answers appended between turns, so each prompt extends the previous one.
// The bytes depend only on the seed, the user, the turn and the answers. Not safe for
// concurrent use: each user owns one.
type Chat struct {
	seed       uint64
	user       int
	turnTokens int
	msgs       []Message
}

// conversationStreams keeps conversation text apart from the run's document streams.
const conversationStreams = 1 << 40

// SystemPrompt is the system prompt of seed's conversations, about tokens long (estimated);
// "" for 0 tokens.
func SystemPrompt(seed uint64, tokens int) string {
	if tokens <= 0 {
		return ""
	}
	s := newTextStream(seed, conversationStreams, "sys")
	body := streamText(s, tokens*EstimateBytesPerToken-len(systemText))
	return systemText + body
}

// NewChat starts user's conversation with system as its first message (none when empty).
func NewChat(seed uint64, user int, system string, turnTokens int) *Chat {
	c := &Chat{seed: seed, user: user, turnTokens: turnTokens}
	if system != "" {
		c.msgs = append(c.msgs, Message{Role: "system", Content: system})
	}
	return c
}

// Ask appends turn's question and returns the prompt to send: the whole history.
func (c *Chat) Ask(turn int) []Message {
	s := newTextStream(c.seed, conversationStreams+1+uint64(c.user)<<20+uint64(turn), fmt.Sprintf("u%d-t%d", c.user, turn))
	q := fmt.Sprintf("Question %d. Read these notes and say what they record.\n\n", turn+1)
	c.msgs = append(c.msgs, Message{Role: "user", Content: q + streamText(s, c.turnTokens*EstimateBytesPerToken-len(q))})
	return append([]Message(nil), c.msgs...)
}

// ChatShape is the shape identity of user's turn in seed's conversations, with turnTokens
// per question behind a systemTokens-token system prompt: what the question's bytes depend
// on but the salt (the answers before it are the server's).
func ChatShape(seed uint64, user, turn, turnTokens, systemTokens int) string {
	h := sha256.New()
	fmt.Fprintf(h, "kvbench chat shape 1\nseed %d\nuser %d\nturn %d\nturn tokens %d\nsystem %d\n", seed, user, turn, turnTokens, systemTokens)
	return hex.EncodeToString(h.Sum(nil))
}

// Answer appends the server's answer to the last question, carried into the next prompt.
func (c *Chat) Answer(text string) {
	c.msgs = append(c.msgs, Message{Role: "assistant", Content: text})
}

// streamText is the first units of s that fit in n bytes (at least one unit), trimmed.
func streamText(s *textStream, n int) string {
	units := max(s.unitsWithin(max(n, 1)), 1)
	text, _, _ := s.text(units)
	return strings.TrimSpace(string(text))
}

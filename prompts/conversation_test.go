package prompts

import (
	"crypto/sha256"
	"encoding/hex"
	"fmt"
	"strings"
	"testing"
)

// chatHash builds every turn of users x turns with answers derived from the turn, as a run
// would carry the server's answers, and hashes every prompt sent.
func chatHash(seed uint64, users, turns int) string {
	h := sha256.New()
	sys := SystemPrompt(seed, 200)
	for u := range users {
		c := NewChat(seed, u, sys, 60)
		for t := range turns {
			fmt.Fprintln(h, Identity(c.Ask(t)))
			c.Answer(fmt.Sprintf("answer of user %d turn %d", u, t))
		}
	}
	return hex.EncodeToString(h.Sum(nil))
}

func TestChatIsDeterministic(t *testing.T) {
	a, b := chatHash(7, 4, 5), chatHash(7, 4, 5)
	if a != b {
		t.Fatalf("two builds of the same conversations differ: %s vs %s", a, b)
	}
	if c := chatHash(8, 4, 5); c == a {
		t.Fatal("another seed built the same bytes")
	}
}

func TestChatHistoryGrows(t *testing.T) {
	sys := SystemPrompt(3, 100)
	if got := EstimateTokens([]Message{{Content: sys}}); got < 90 || got > 110 {
		t.Errorf("system prompt estimates %d tokens, want about 100", got)
	}
	c := NewChat(3, 1, sys, 50)
	first := c.Ask(0)
	c.Answer("the first answer")
	second := c.Ask(1)
	if len(first) != 2 || len(second) != 4 {
		t.Fatalf("turn prompts have %d and %d messages, want 2 and 4", len(first), len(second))
	}
	for i, m := range first {
		if second[i] != m {
			t.Fatalf("turn 2 does not extend turn 1 at message %d", i)
		}
	}
	if second[2].Role != "assistant" || second[2].Content != "the first answer" {
		t.Fatalf("answer not carried: %+v", second[2])
	}
	if second[3].Content == first[1].Content || !strings.HasPrefix(second[3].Content, "Question 2.") {
		t.Fatalf("turn 2's question is not new: %q", second[3].Content[:40])
	}
	other := NewChat(3, 2, sys, 50).Ask(0)
	if other[0] != first[0] || other[1] == first[1] {
		t.Fatal("users must share the system prompt and differ in their questions")
	}
	if n := EstimateTokens(first[1:]); n < 40 || n > 60 {
		t.Errorf("a 50-token question estimates %d tokens", n)
	}
}

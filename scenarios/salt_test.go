package scenarios

import (
	"errors"
	"regexp"
	"strings"
	"testing"
)

// TestPromptSalt: prompt.salt takes a salt of safe characters or "random", checked with its
// line; --salt is checked the same way; a random salt is drawn once, fresh for each run.
func TestPromptSalt(t *testing.T) {
	for _, c := range []struct{ salt, want string }{
		{"night-2026.08.02_a", ""},
		{"random", ""},
		{"a b", `s.toml:3: prompt.salt: "a b" must be letters, digits`},
		{"x\\u001b[2J", `prompt.salt: "x\x1b[2J" must be letters`},
		{strings.Repeat("s", 65), "prompt.salt: is 65 bytes long; at most 64"},
	} {
		sc, err := Parse([]byte("name = \"s\"\n[prompt]\nsalt = \""+c.salt+"\"\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n"), "s.toml")
		switch {
		case c.want == "" && (err != nil || sc.Prompt.Salt != c.salt):
			t.Errorf("%q: %v", c.salt, err)
		case c.want != "" && (!errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) || strings.Contains(err.Error(), "\x1b")):
			t.Errorf("%q: %v, want %q", c.salt, err, c.want)
		}
	}
	var sc Scenario
	if err := CheckSalt("bad/salt"); err == nil {
		t.Errorf("bad/salt accepted")
	}
	sc.Prompt.Salt = RandomSalt
	other := sc
	if err := sc.ResolveSalt(); err != nil {
		t.Fatal(err)
	}
	first := sc.Prompt.Salt
	if !regexp.MustCompile(`^[0-9a-f]{16}$`).MatchString(first) {
		t.Fatalf("random salt %q", first)
	}
	if err := sc.ResolveSalt(); err != nil || sc.Prompt.Salt != first {
		t.Errorf("a drawn salt was drawn again: %q -> %q (%v)", first, sc.Prompt.Salt, err)
	}
	if err := other.ResolveSalt(); err != nil || other.Prompt.Salt == first {
		t.Errorf("two runs drew the same salt %q (%v)", first, err)
	}
	fixed := Scenario{Prompt: PromptConfig{Salt: "kept"}}
	if err := fixed.ResolveSalt(); err != nil || fixed.Prompt.Salt != "kept" {
		t.Errorf("a set salt changed: %q", fixed.Prompt.Salt)
	}
}

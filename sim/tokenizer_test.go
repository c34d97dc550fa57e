package sim

import (
	"fmt"
	"strings"
	"testing"
)

// englishProse is ordinary technical English, the kind kvbench's prompts are built from.
const englishProse = `Large language model servers keep the attention keys and values of every token
they have processed, so that later tokens can attend to them without recomputing the whole
prompt. This memory is called the KV cache. When many users send long prompts, the cache
fills up quickly, and the server must decide which blocks to keep. Modern servers split the
cache into fixed-size blocks, hash each block together with the blocks before it, and reuse
a block whenever a new request starts with exactly the same tokens. That is prefix caching.
Offloading adds a second tier: blocks are copied to host memory as soon as they are computed,
and when the GPU copy is evicted, the host copy can be loaded back over PCIe. Loading is much
faster than recomputing a 100,000-token prompt, but only if the host tier is larger than the
GPU pool; otherwise it merely mirrors what the GPU already holds. Measuring this honestly
requires the server's own counters, read before and after each request, because a fast
response alone cannot tell a GPU hit from a reload. The benchmark therefore records the
counters, the prompt's hash, and the timings, and it explains every verdict it gives.`

func TestTokenizeRule(t *testing.T) {
	cases := []struct {
		text string
		want int
	}{
		{"", 0},
		{"word", 1},
		{"cache", 1},
		{"offload", 1},           // 7 letters
		{"offloads", 2},          // 8 letters: 7 + 1
		{"prefixcachingtier", 3}, // 17 letters: 7 + 7 + 3
		{"a b c", 3},             // single spaces fold into the next token
		{"a  b", 3},              // a run of blanks: one token for all but the folded space
		{"hello, world.", 4},     // punctuation is one token each
		{"12345", 2},             // digits in groups of 3
		{"1,000,000", 5},         // 1 , 000 , 000
		{"line\nline", 3},        // newline is a token
		{"a \nb", 4},             // a blank before a newline is its own token
		{"\t\tx", 2},             // tabs are blanks; a tab is not folded
		{"<|user|>\nhi\n", 8},    // template marker: < | user | > newline hi newline
		{"naïve café", 2},        // bytes >= 0x80 count as letters: "naïve" is 6 bytes
		{"東京都", 2},               // 9 bytes of letters: 7 + 2
		{"trailing space ", 4},   // trail ing, space, and a final space with nothing to fold into
	}
	for _, c := range cases {
		got := Tokenize(c.text)
		if len(got) != c.want {
			t.Errorf("Tokenize(%q) = %d tokens, want %d", c.text, len(got), c.want)
		}
		if n := CountTokens(c.text); n != len(got) {
			t.Errorf("CountTokens(%q) = %d, Tokenize gives %d", c.text, n, len(got))
		}
	}
}

func TestTokenIDsAreStable(t *testing.T) {
	a, b := Tokenize("The cache, the Cache and the cache."), Tokenize("The cache, the Cache and the cache.")
	if fmt.Sprint(a) != fmt.Sprint(b) {
		t.Fatalf("two runs differ: %v vs %v", a, b)
	}
	// " cache" (after a space) appears at positions 1 and 7; "Cache" differs in case.
	if a[1] != a[7] {
		t.Errorf("same token text got ids %d and %d", a[1], a[7])
	}
	if a[1] == a[4] {
		t.Errorf("cache and Cache share id %d", a[1])
	}
	// A leading space is part of the token's identity.
	if Tokenize("cache")[0] == Tokenize(" cache")[0] {
		t.Error("leading space does not change the id")
	}
	// Pinned value: block hashes of every saved prompt depend on it.
	if got := Tokenize("cache")[0]; got != tokenID("cache", false) || got < 0 || got >= VocabSize {
		t.Errorf("id of cache = %d", got)
	}
}

func TestEnglishTokensPerWord(t *testing.T) {
	words := len(strings.Fields(englishProse))
	tokens := CountTokens(englishProse)
	ratio := float64(tokens) / float64(words)
	t.Logf("%d words, %d tokens: %.3f tokens/word", words, tokens, ratio)
	if ratio < 1.2 || ratio > 1.45 {
		t.Errorf("tokens per word = %.3f, want about 1.3", ratio)
	}
}

func TestRenderChat(t *testing.T) {
	msgs := []ChatMessage{{Role: "system", Content: "Be brief."}, {Role: "user", Content: "Why?"}}
	got := RenderChat(msgs, true)
	want := "<|system|>\nBe brief.\n<|user|>\nWhy?\n<|assistant|>\n"
	if got != want {
		t.Errorf("RenderChat = %q, want %q", got, want)
	}
	if got := RenderChat(msgs[:1], false); got != "<|system|>\nBe brief.\n" {
		t.Errorf("RenderChat without generation prompt = %q", got)
	}
}

func FuzzTokenize(f *testing.F) {
	for _, s := range []string{"", " ", "  ", "a ", " a", "\n \n", "x\t \ty", "ünïcödé", "1234567", "a\xffb", englishProse} {
		f.Add(s)
	}
	f.Fuzz(func(t *testing.T, s string) {
		ids := Tokenize(s)
		if CountTokens(s) != len(ids) {
			t.Fatalf("CountTokens and Tokenize disagree on %q", s)
		}
		if len(ids) > len(s) {
			t.Fatalf("%d tokens from %d bytes", len(ids), len(s))
		}
		if len(s) > 0 && strings.TrimLeft(s, " ") != "" && len(ids) == 0 {
			t.Fatalf("no tokens for %q", s)
		}
		for _, id := range ids {
			if id < 0 || id >= VocabSize {
				t.Fatalf("id %d out of range", id)
			}
		}
	})
}

// proseOfTokens returns deterministic English-like text of at least n tokens, different
// for each seed.
func proseOfTokens(n int, seed uint64) string {
	words := strings.Fields(englishProse)
	var b strings.Builder
	b.Grow(n * 5)
	for i, tokens := 0, 0; tokens < n; i++ {
		w := words[mix64(seed^uint64(i))%uint64(len(words))]
		b.WriteByte(' ')
		b.WriteString(w)
		tokens += CountTokens(" " + w)
	}
	return b.String()
}

func BenchmarkTokenize150k(b *testing.B) {
	text := proseOfTokens(150000, 1)
	b.SetBytes(int64(len(text)))
	b.ReportAllocs()
	for b.Loop() {
		if n := len(Tokenize(text)); n < 150000 {
			b.Fatalf("%d tokens", n)
		}
	}
}

package prompts

import (
	"context"
	"errors"
	"slices"
	"strings"
	"testing"
)

func newBlocks(t testing.TB, cfg BlockConfig) *BlockBuilder {
	t.Helper()
	b, err := NewBlockBuilder(cfg)
	if err != nil {
		t.Fatal(err)
	}
	return b
}

func TestBlockWords(t *testing.T) {
	seen := map[string]bool{}
	for _, w := range blockWordList {
		if len(w) < 1 || len(w) > 7 || strings.Trim(w, "abcdefghijklmnopqrstuvwxyz") != "" || seen[w] {
			t.Errorf("word %q: want 256 distinct words of 1 to 7 lowercase letters", w)
		}
		seen[w] = true
	}
}

// TestBlockTokenIDs: prompts that share hash ids share exact token prefixes, block for
// block; a partial last block is the start of the same block; unnamed blocks are private.
func TestBlockTokenIDs(t *testing.T) {
	b := newBlocks(t, BlockConfig{Seed: 9, BlockTokens: 16, CacheBlocks: 2})
	build := func(ids []uint64, n int, request uint64) []int32 {
		t.Helper()
		out, err := b.AppendTokenIDs(nil, ids, n, request)
		if err != nil {
			t.Fatal(err)
		}
		if len(out) != n {
			t.Fatalf("ids %v, %d tokens: built %d", ids, n, len(out))
		}
		for _, tok := range out {
			if tok < DefaultMinTokenID || tok >= DefaultMaxTokenID {
				t.Fatalf("token %d outside [%d, %d)", tok, DefaultMinTokenID, DefaultMaxTokenID)
			}
		}
		return out
	}
	a := build([]uint64{1, 2, 3}, 40, 1) // 16 + 16 + 8
	c := build([]uint64{1, 2, 4}, 48, 2) // shares blocks 1 and 2
	if !slices.Equal(a[:32], c[:32]) || slices.Equal(a[32:40], c[32:40]) {
		t.Error("shared ids do not share exactly their blocks")
	}
	full := build([]uint64{1, 2, 3}, 48, 3)
	if !slices.Equal(a, full[:40]) {
		t.Error("a partial last block is not the start of its block")
	}
	// Cache of 2 blocks: building many others and coming back regenerates the same tokens.
	for id := uint64(100); id < 200; id++ {
		build([]uint64{id}, 16, 4)
	}
	if again := build([]uint64{1, 2, 3}, 40, 1); !slices.Equal(again, a) {
		t.Error("a regenerated block differs from its first build")
	}
	// 40 tokens span 3 blocks; naming 1 leaves 2 private to the request.
	p1, p2 := build([]uint64{1}, 40, 7), build([]uint64{1}, 40, 8)
	if !slices.Equal(p1[:16], a[:16]) || slices.Equal(p1[16:32], p2[16:32]) || !slices.Equal(p1, build([]uint64{1}, 40, 7)) {
		t.Error("private blocks are not private to their request, or not reproducible")
	}
	other := newBlocks(t, BlockConfig{Seed: 10, BlockTokens: 16})
	if o, _ := other.AppendTokenIDs(nil, []uint64{1, 2, 3}, 40, 1); slices.Equal(o, a) {
		t.Error("two seeds build one prompt")
	}
	// Distinct ids make distinct blocks (first tokens compared: 16 draws in 31,000).
	firsts := map[string]bool{}
	for id := uint64(0); id < 500; id++ {
		firsts[string(slices.AppendSeq([]byte{}, func(yield func(byte) bool) {
			for _, tok := range build([]uint64{id}, 16, 0)[:4] {
				if !yield(byte(tok)) || !yield(byte(tok>>8)) {
					return
				}
			}
		}))] = true
	}
	if len(firsts) != 500 {
		t.Errorf("500 ids gave %d distinct block starts", len(firsts))
	}
}

func TestBlockBuilderRejects(t *testing.T) {
	b := newBlocks(t, BlockConfig{BlockTokens: 16})
	if _, err := b.AppendTokenIDs(nil, []uint64{1, 2, 3}, 32, 0); !errors.Is(err, ErrBlockCount) {
		t.Errorf("3 ids for 2 blocks: %v", err)
	}
	if _, err := b.AppendText(nil, nil, 0, 0); err == nil {
		t.Error("an empty prompt is accepted")
	}
	for _, cfg := range []BlockConfig{{BlockTokens: -1}, {CacheBlocks: -1}, {MinTokenID: 5, MaxTokenID: 5}, {MinTokenID: -1, MaxTokenID: 9}} {
		if _, err := NewBlockBuilder(cfg); err == nil {
			t.Errorf("config %+v accepted", cfg)
		}
	}
	if b.BlockTokens() != 16 || newBlocks(t, BlockConfig{}).BlockTokens() != 512 {
		t.Error("block size defaults")
	}
}

// TestBlockText: the text form has one word per token of the plan, shares prefixes like the
// token-id form, and cuts a partial block at a word.
func TestBlockText(t *testing.T) {
	b := newBlocks(t, BlockConfig{Seed: 3, BlockTokens: 16, CacheBlocks: 1})
	text := func(ids []uint64, n int, request uint64) string {
		out, err := b.AppendText(nil, ids, n, request)
		if err != nil {
			t.Fatal(err)
		}
		return string(out)
	}
	a, c := text([]uint64{1, 2, 3}, 40, 1), text([]uint64{1, 2, 4}, 40, 1)
	if words := strings.Fields(a); len(words) != 40 || !strings.HasPrefix(a, " ") {
		t.Fatalf("%d words, want 40 each after a space: %q", len(words), a)
	}
	first := string(b.BlockText(1)) // a copy: the next call reuses the cache's one slot
	shared := first + string(b.BlockText(2))
	if !strings.HasPrefix(a, shared) || !strings.HasPrefix(c, shared) || a == c {
		t.Error("shared ids do not share their text")
	}
	if full := text([]uint64{1, 2, 3}, 48, 1); !strings.HasPrefix(full, a) || !strings.HasPrefix(full[len(a):], " ") {
		t.Error("a partial block is not the start of its block, cut before a word")
	}
}

// wordCounter counts a text's words as its tokens, a word in heavy as two, plus added.
type wordCounter struct {
	added int
	heavy map[string]bool
	calls int
}

func (c *wordCounter) CountTextTokens(_ context.Context, text string) (int, error) {
	c.calls++
	n := c.added
	for _, w := range strings.Fields(text) {
		n++
		if c.heavy[w] {
			n++
		}
	}
	return n, nil
}

func TestMeasureBlockDeviation(t *testing.T) {
	ctx := context.Background()
	b := newBlocks(t, BlockConfig{Seed: 1, BlockTokens: 64})
	ids := []uint64{5, 6, 7, 8}
	exact := &wordCounter{added: 1}
	d, err := MeasureBlockDeviation(ctx, exact, b, ids)
	if err != nil || !d.Exact() || d.AddedTokens != 1 || d.MaxAbsDeviation != 0 || d.Blocks != 4 || exact.calls != 6 {
		t.Fatalf("an exact tokenizer: %+v, %v (%d calls)", d, err, exact.calls)
	}
	// A tokenizer that spends two tokens on "the": each block deviates by its count of "the".
	heavy := &wordCounter{heavy: map[string]bool{"the": true}}
	d, err = MeasureBlockDeviation(ctx, heavy, b, ids)
	if err != nil {
		t.Fatal(err)
	}
	want, worst := 0, 0
	for _, id := range ids {
		n := strings.Count(string(b.BlockText(id))+" ", " the ")
		want += n
		worst = max(worst, n)
	}
	if want == 0 || d.Exact() || d.MeanAbsDeviation != float64(want)/4 || d.MaxAbsDeviation != worst || d.JoinDeviation != 0 {
		t.Errorf("a tokenizer with a 2-token word: %+v, want mean %g max %d", d, float64(want)/4, worst)
	}
	if _, err := MeasureBlockDeviation(ctx, exact, b, nil); err == nil {
		t.Error("no blocks measured without an error")
	}
}

package prompts

import (
	"encoding/json"
	"io"
	"math/rand/v2"
	"sync"
	"testing"
)

// TestStreamedPromptBytes: a streamed prompt reads as the JSON of the prompt AppendTokenIDs or
// AppendText builds, byte for byte, whatever the size of the reads, with its length exact;
// for many generated requests (shared and private blocks, cut last blocks) under a cache so
// small that blocks are evicted and encoded again between building and reading.
func TestStreamedPromptBytes(t *testing.T) {
	rng := rand.New(rand.NewPCG(3, 4))
	for _, bt := range []int{1, 4, 16, 512} {
		b := newBlocks(t, BlockConfig{Seed: 11, BlockTokens: bt, CacheBlocks: 2})
		var prompts []*StreamedPrompt
		var wants [][]byte
		for req := range 60 {
			n := 1 + rng.IntN(6*bt)
			blocks := (n + bt - 1) / bt
			ids := make([]uint64, rng.IntN(blocks+1))
			for i := range ids {
				ids[i] = uint64(rng.IntN(8)) // few ids: requests share blocks
			}
			text := req%2 == 1
			var p *StreamedPrompt
			var want []byte
			var err error
			if text {
				p, err = b.TextPrompt(ids, n, uint64(req))
				words, _ := b.AppendText(nil, ids, n, uint64(req))
				want, _ = json.Marshal(string(words))
			} else {
				p, err = b.TokenIDPrompt(ids, n, uint64(req))
				toks, _ := b.AppendTokenIDs(nil, ids, n, uint64(req))
				want, _ = json.Marshal(toks)
			}
			if err != nil {
				t.Fatal(err)
			}
			prompts, wants = append(prompts, p), append(wants, want)
		}
		for i, p := range prompts {
			for _, chunk := range []int{1, 7, 4096} {
				got, err := readInChunks(p.NewReader(), chunk)
				if err != nil || string(got) != string(wants[i]) || p.Len() != len(wants[i]) {
					t.Fatalf("block tokens %d, prompt %d, reads of %d: len %d, got\n%s\nwant (%d bytes)\n%s", bt, i, chunk, p.Len(), got, len(wants[i]), wants[i])
				}
			}
		}
	}
}

// TestStreamedPromptConcurrentReads: readers of one builder's prompts, in goroutines of their
// own while the builder builds more, all read their prompts exactly (run with -race).
func TestStreamedPromptConcurrentReads(t *testing.T) {
	b := newBlocks(t, BlockConfig{Seed: 5, BlockTokens: 16, CacheBlocks: 1})
	var wg sync.WaitGroup
	for req := range 40 {
		ids := []uint64{uint64(req % 3), uint64(req % 5)}
		p, err := b.TokenIDPrompt(ids, 50, uint64(req))
		if err != nil {
			t.Fatal(err)
		}
		toks, _ := b.AppendTokenIDs(nil, ids, 50, uint64(req))
		want, _ := json.Marshal(toks)
		wg.Add(1)
		go func() {
			defer wg.Done()
			if got, err := io.ReadAll(p.NewReader()); err != nil || string(got) != string(want) {
				t.Errorf("request %d read %s, want %s", req, got, want)
			}
		}()
	}
	wg.Wait()
}

func TestStreamedPromptBadLength(t *testing.T) {
	b := newBlocks(t, BlockConfig{Seed: 5, BlockTokens: 4})
	if _, err := b.TokenIDPrompt([]uint64{1, 2, 3}, 8, 0); err == nil {
		t.Error("three hash ids for two blocks: no error")
	}
	if _, err := b.TextPrompt(nil, 0, 0); err == nil {
		t.Error("an empty prompt: no error")
	}
}

func readInChunks(r io.Reader, size int) ([]byte, error) {
	var out []byte
	buf := make([]byte, size)
	for range 1 << 24 {
		n, err := r.Read(buf)
		out = append(out, buf[:n]...)
		if err == io.EOF {
			return out, nil
		}
		if err != nil {
			return out, err
		}
	}
	return out, io.ErrNoProgress
}

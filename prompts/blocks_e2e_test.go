package prompts

import (
	"bytes"
	"context"
	"encoding/json"
	"fmt"
	"net/http"
	"slices"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/sim"
)

// These tests meet the embedded engine only through its URL, as kvbench does.

func startEngine(t *testing.T) string {
	t.Helper()
	s, err := sim.Start(sim.Options{Profile: "tiny", Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { s.Close() })
	return s.URL()
}

func postJSON(t *testing.T, url string, body, out any) {
	t.Helper()
	data, _ := json.Marshal(body)
	ctx, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodPost, url, bytes.NewReader(data))
	req.Header.Set("Content-Type", "application/json")
	resp, err := http.DefaultClient.Do(req)
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	if resp.StatusCode != http.StatusOK {
		t.Fatalf("%s: status %d", url, resp.StatusCode)
	}
	if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
		t.Fatal(err)
	}
}

// tokenizeCounter counts through the engine's POST /tokenize {"prompt"}.
type tokenizeCounter struct {
	t   *testing.T
	url string
}

func (c tokenizeCounter) tokens(text string) []int32 {
	var out struct {
		Count  int     `json:"count"`
		Tokens []int32 `json:"tokens"`
	}
	postJSON(c.t, c.url+"/tokenize", map[string]string{"model": "tiny-sim", "prompt": text}, &out)
	return out.Tokens
}

func (c tokenizeCounter) CountTextTokens(_ context.Context, text string) (int, error) {
	return len(c.tokens(text)), nil
}

// TestBlockTextIsExactOnTheEngine: under the embedded engine's tokenizer every text block is
// exactly BlockTokens tokens, a partial block its share, and prompts that share ids share
// exactly those tokens, as the engine counts them.
func TestBlockTextIsExactOnTheEngine(t *testing.T) {
	url := startEngine(t)
	counter := tokenizeCounter{t, url}
	b := newBlocks(t, BlockConfig{Seed: 11, BlockTokens: 64})
	d, err := MeasureBlockDeviation(context.Background(), counter, b, []uint64{0, 1, 2, 3, 4, 5, 6, 7, 1 << 40})
	if err != nil {
		t.Fatal(err)
	}
	if !d.Exact() || d.AddedTokens != 0 {
		t.Errorf("deviation on the engine's tokenizer: %+v, want exact", d)
	}
	one, _ := b.AppendText(nil, []uint64{1, 2, 3}, 150, 1) // 64 + 64 + 22
	two, _ := b.AppendText(nil, []uint64{1, 2, 9}, 170, 2) // shares 128 tokens
	a, c := counter.tokens(string(one)), counter.tokens(string(two))
	if len(a) != 150 || len(c) != 170 || !slices.Equal(a[:128], c[:128]) || slices.Equal(a[128:150], c[128:150]) {
		t.Errorf("token counts %d and %d, want 150 and 170 sharing exactly 128", len(a), len(c))
	}
}

// TestBlockTokenIDsHitOnTheEngine: token-id prompts sent to /v1/completions count exactly
// their input length, and a follow-up turn (its parent's whole blocks, then new ones) hits
// the parent's whole blocks (the engine's blocks of 16 divide the trace's 64).
func TestBlockTokenIDsHitOnTheEngine(t *testing.T) {
	url := startEngine(t)
	b := newBlocks(t, BlockConfig{Seed: 12, BlockTokens: 64, MaxTokenID: int32(sim.VocabSize)})
	send := func(ids []uint64, n int, request uint64) (prompt, cached int) {
		tokens, err := b.AppendTokenIDs(nil, ids, n, request)
		if err != nil {
			t.Fatal(err)
		}
		var out struct {
			Usage struct {
				PromptTokens        int `json:"prompt_tokens"`
				PromptTokensDetails *struct {
					CachedTokens int `json:"cached_tokens"`
				} `json:"prompt_tokens_details"`
			} `json:"usage"`
		}
		postJSON(t, url+"/v1/completions", map[string]any{"model": "tiny-sim", "prompt": tokens, "max_tokens": 1}, &out)
		if d := out.Usage.PromptTokensDetails; d != nil {
			cached = d.CachedTokens
		}
		return out.Usage.PromptTokens, cached
	}
	for _, c := range []struct {
		ids            []uint64
		n              int
		request        uint64
		prompt, cached int
	}{
		{[]uint64{1, 2, 3}, 150, 1, 150, 0},
		// Turn 2: blocks 1 and 2 are whole in turn 1; block 3 was partial there, so the
		// follow-up names a new block 4 in its place.
		{[]uint64{1, 2, 4, 5}, 230, 2, 230, 128},
		// Names only block 1: the rest is private, so only block 1 hits.
		{[]uint64{1}, 200, 3, 200, 64},
	} {
		prompt, cached := send(c.ids, c.n, c.request)
		if prompt != c.prompt || cached != c.cached {
			t.Errorf("%s: prompt %d cached %d, want %d and %d", fmt.Sprint(c.ids), prompt, cached, c.prompt, c.cached)
		}
	}
}

package main

import (
	"bytes"
	"testing"

	"github.com/anvil-serving/kvbench/internal/gguf"
)

func testVocab() *gguf.File {
	tokens := []string{"Ġthe", "cache", "<|im_end|>", "Ãĥ", "Ġ123", "a", "ĠHello"}
	types := []int32{1, 1, 3, 1, 1, 1, 1}
	return &gguf.File{KV: []gguf.KV{
		{Key: "general.architecture", Value: gguf.Value{Type: gguf.TypeString, Data: "qwen2"}},
		{Key: "tokenizer.ggml.model", Value: gguf.Value{Type: gguf.TypeString, Data: "gpt2"}},
		{Key: "tokenizer.ggml.tokens", Value: gguf.Value{Type: gguf.TypeArray, Elem: gguf.TypeString, Data: tokens}},
		{Key: "tokenizer.ggml.token_type", Value: gguf.Value{Type: gguf.TypeArray, Elem: gguf.TypeInt32, Data: types}},
	}}
}

func TestOutputBiasAllowsOnlyLowercaseWords(t *testing.T) {
	v := testVocab()
	tokens := tokensOf(v)
	tv, _ := v.Get("tokenizer.ggml.token_type")
	bias := outputBias(tokens, tv.Data.([]int32))
	allowed := map[string]bool{"Ġthe": true, "cache": true}
	for i, tok := range tokens {
		if got := bias[i] == 0; got != allowed[tok] {
			t.Errorf("token %q: bias %v, allowed %v", tok, bias[i], allowed[tok])
		}
	}
}

func TestBuildIsDeterministic(t *testing.T) {
	small := Shape{Layers: 1, Embd: 8, Heads: 2, HeadsKV: 1, FFN: 16, ContextLen: 64}
	encode := func(seed uint64) []byte {
		m, err := Build(testVocab(), small, seed)
		if err != nil {
			t.Fatal(err)
		}
		var buf bytes.Buffer
		if err := gguf.Write(&buf, m); err != nil {
			t.Fatal(err)
		}
		return buf.Bytes()
	}
	a, b := encode(6), encode(6)
	if !bytes.Equal(a, b) {
		t.Error("two builds with the same seed differ")
	}
	if bytes.Equal(a, encode(7)) {
		t.Error("builds with different seeds are identical")
	}
	m, err := gguf.Read(bytes.NewReader(a))
	if err != nil {
		t.Fatal(err)
	}
	if v, _ := m.Get("tokenizer.ggml.model"); v.Data != "gpt2" {
		t.Errorf("tokenizer.ggml.model = %v, want copied from the vocab", v.Data)
	}
	if v, _ := m.Get("qwen2.attention.head_count_kv"); v.Data != uint32(1) {
		t.Errorf("qwen2.attention.head_count_kv = %v, want 1", v.Data)
	}
}

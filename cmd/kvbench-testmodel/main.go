// Command kvbench-testmodel writes a small random-weight Qwen2-shaped GGUF model for
// testing kvbench against a real llama.cpp server, where no real weights can be
// downloaded. The tokenizer (tokens, merges, types, special ids, chat template) is copied
// from a vocab-only GGUF such as llama.cpp's models/ggml-vocab-qwen2.gguf, so token counts
// are real; the generated text is gibberish. The same inputs give the same bytes.
//
//	kvbench-testmodel -vocab ggml-vocab-qwen2.gguf -o model.gguf
package main

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math/rand/v2"
	"os"
	"regexp"
	"strings"

	"github.com/anvil-serving/kvbench/internal/gguf"
)

// Exit codes.
const (
	exitOK    = 0
	exitError = 1
	exitUsage = 2
)

func main() {
	err := run(context.Background(), os.Args[1:], os.Stdout, os.Stderr)
	switch {
	case err == nil:
		os.Exit(exitOK)
	case errors.Is(err, flag.ErrHelp):
		os.Exit(exitUsage)
	default:
		fmt.Fprintln(os.Stderr, "kvbench-testmodel:", err)
		os.Exit(exitError)
	}
}

// Shape is the model's size. The defaults keep the KV cache at 512 bytes per token
// (2 layers x K and V x 2 KV heads x 32 dims x 2 bytes of f16) and prompt processing
// fast on two CPU cores.
type Shape struct {
	Layers     int
	Embd       int
	Heads      int
	HeadsKV    int
	FFN        int
	ContextLen int
}

var defaultShape = Shape{Layers: 2, Embd: 128, Heads: 4, HeadsKV: 2, FFN: 384, ContextLen: 32768}

func run(_ context.Context, args []string, stdout, stderr io.Writer) error {
	fs := flag.NewFlagSet("kvbench-testmodel", flag.ContinueOnError)
	fs.SetOutput(stderr)
	vocab := fs.String("vocab", "", "vocab-only GGUF to copy the tokenizer from (llama.cpp's models/ggml-vocab-qwen2.gguf)")
	out := fs.String("o", "", "output GGUF path")
	seed := fs.Uint64("seed", 6, "PRNG seed for the weights")
	if err := fs.Parse(args); err != nil {
		return err
	}
	if *vocab == "" || *out == "" || fs.NArg() > 0 {
		fs.Usage()
		return flag.ErrHelp
	}

	vf, err := os.Open(*vocab)
	if err != nil {
		return fmt.Errorf("opening vocab: %w", err)
	}
	defer vf.Close()
	voc, err := gguf.Read(vf)
	if err != nil {
		return fmt.Errorf("reading vocab %s: %w", *vocab, err)
	}
	model, err := Build(voc, defaultShape, *seed)
	if err != nil {
		return fmt.Errorf("building model from %s: %w", *vocab, err)
	}

	f, err := os.Create(*out)
	if err != nil {
		return fmt.Errorf("creating model: %w", err)
	}
	if err := gguf.Write(f, model); err != nil {
		f.Close()
		return fmt.Errorf("writing %s: %w", *out, err)
	}
	if err := f.Close(); err != nil {
		return fmt.Errorf("closing %s: %w", *out, err)
	}
	fmt.Fprintf(stdout, "wrote %s: %d tensors, vocab %d\n", *out, len(model.Tensors), len(tokensOf(voc)))
	return nil
}

func tokensOf(voc *gguf.File) []string {
	v, _ := voc.Get("tokenizer.ggml.tokens")
	s, _ := v.Data.([]string)
	return s
}

// Build returns a Qwen2 model of the given shape with the tokenizer metadata of voc and
// weights drawn from a PRNG seeded with seed.
func Build(voc *gguf.File, s Shape, seed uint64) (*gguf.File, error) {
	tokens := tokensOf(voc)
	if len(tokens) == 0 {
		return nil, errors.New("no tokenizer.ggml.tokens array")
	}
	tv, _ := voc.Get("tokenizer.ggml.token_type")
	types, ok := tv.Data.([]int32)
	if !ok || len(types) != len(tokens) {
		return nil, errors.New("tokenizer.ggml.token_type missing or not one int32 per token")
	}
	if s.Embd%s.Heads != 0 || s.Heads%s.HeadsKV != 0 {
		return nil, fmt.Errorf("shape %+v: heads must divide width and KV heads divide heads", s)
	}

	u32 := func(v int) gguf.Value { return gguf.Value{Type: gguf.TypeUint32, Data: uint32(v)} }
	f32 := func(v float32) gguf.Value { return gguf.Value{Type: gguf.TypeFloat32, Data: v} }
	str := func(v string) gguf.Value { return gguf.Value{Type: gguf.TypeString, Data: v} }
	m := &gguf.File{KV: []gguf.KV{
		{Key: "general.architecture", Value: str("qwen2")},
		{Key: "general.name", Value: str("kvbench-testmodel")},
		{Key: "general.alignment", Value: u32(gguf.DefaultAlignment)},
		{Key: "general.file_type", Value: u32(1)}, // mostly f16
		{Key: "qwen2.context_length", Value: u32(s.ContextLen)},
		{Key: "qwen2.embedding_length", Value: u32(s.Embd)},
		{Key: "qwen2.block_count", Value: u32(s.Layers)},
		{Key: "qwen2.feed_forward_length", Value: u32(s.FFN)},
		{Key: "qwen2.attention.head_count", Value: u32(s.Heads)},
		{Key: "qwen2.attention.head_count_kv", Value: u32(s.HeadsKV)},
		{Key: "qwen2.rope.freq_base", Value: f32(1e6)},
		{Key: "qwen2.attention.layer_norm_rms_epsilon", Value: f32(1e-6)},
	}}
	for _, kv := range voc.KV {
		if strings.HasPrefix(kv.Key, "tokenizer.") {
			m.KV = append(m.KV, kv)
		}
	}

	rng := rand.New(rand.NewPCG(seed, 0x6b7662656e6368)) // "kvbench"
	kvWidth := s.Embd / s.Heads * s.HeadsKV
	nVocab := len(tokens)
	add := func(name string, typ gguf.TensorType, vals []float32, dims ...int) {
		t := gguf.Tensor{TensorInfo: gguf.TensorInfo{Name: name, Type: typ}}
		for _, d := range dims {
			t.Dims = append(t.Dims, uint64(d))
		}
		if typ == gguf.TensorF16 {
			t.Data = gguf.F16Bytes(vals)
		} else {
			t.Data = gguf.F32Bytes(vals)
		}
		m.Tensors = append(m.Tensors, t)
	}
	normal := func(n int, std float64) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = float32(rng.NormFloat64() * std)
		}
		return v
	}
	fill := func(n int, x float32) []float32 {
		v := make([]float32, n)
		for i := range v {
			v[i] = x
		}
		return v
	}

	// No output.weight: llama.cpp ties the output layer to token_embd.
	add("token_embd.weight", gguf.TensorF16, normal(s.Embd*nVocab, 0.02), s.Embd, nVocab)
	add("output_norm.weight", gguf.TensorF32, fill(s.Embd, 1), s.Embd)
	add("output.bias", gguf.TensorF32, outputBias(tokens, types), nVocab)
	for i := range s.Layers {
		p := fmt.Sprintf("blk.%d.", i)
		add(p+"attn_norm.weight", gguf.TensorF32, fill(s.Embd, 1), s.Embd)
		add(p+"attn_q.weight", gguf.TensorF16, normal(s.Embd*s.Embd, 0.02), s.Embd, s.Embd)
		add(p+"attn_q.bias", gguf.TensorF32, normal(s.Embd, 0.02), s.Embd)
		add(p+"attn_k.weight", gguf.TensorF16, normal(s.Embd*kvWidth, 0.02), s.Embd, kvWidth)
		add(p+"attn_k.bias", gguf.TensorF32, normal(kvWidth, 0.02), kvWidth)
		add(p+"attn_v.weight", gguf.TensorF16, normal(s.Embd*kvWidth, 0.02), s.Embd, kvWidth)
		add(p+"attn_v.bias", gguf.TensorF32, normal(kvWidth, 0.02), kvWidth)
		add(p+"attn_output.weight", gguf.TensorF16, normal(s.Embd*s.Embd, 0.02), s.Embd, s.Embd)
		add(p+"ffn_norm.weight", gguf.TensorF32, fill(s.Embd, 1), s.Embd)
		add(p+"ffn_gate.weight", gguf.TensorF16, normal(s.Embd*s.FFN, 0.02), s.Embd, s.FFN)
		add(p+"ffn_up.weight", gguf.TensorF16, normal(s.Embd*s.FFN, 0.02), s.Embd, s.FFN)
		add(p+"ffn_down.weight", gguf.TensorF16, normal(s.FFN*s.Embd, 0.02), s.FFN, s.Embd)
	}
	return m, nil
}

// asciiWord matches byte-level BPE tokens that decode to a lowercase ASCII word, with an
// optional leading space (Ġ in GPT-2's byte-to-unicode mapping).
var asciiWord = regexp.MustCompile(`^Ġ?[a-z]{2,12}$`)

// tokenTypeNormal is llama.cpp's LLAMA_TOKEN_TYPE_NORMAL.
const tokenTypeNormal = 1

// outputBias makes the model emit only plain ASCII word tokens: random logits otherwise
// pick byte tokens that form invalid UTF-8 (the server answers 500) or end-of-sequence
// tokens (requests stop before max_tokens). The random logits are ~0.2 wide, so -100
// rules a token out.
func outputBias(tokens []string, types []int32) []float32 {
	bias := make([]float32, len(tokens))
	for i, tok := range tokens {
		if types[i] != tokenTypeNormal || !asciiWord.MatchString(tok) {
			bias[i] = -100
		}
	}
	return bias
}

package prompts

import (
	"context"
	"errors"
	"fmt"
	"math/rand/v2"

	"github.com/anvil-serving/kvbench/harness/record"
)

// Block-exact prompts replay a KV-cache trace block for block: each hash id of the trace
// maps to a seeded block of exactly BlockTokens tokens (the last block of a request cut to
// the request's length), so requests that share ids share exact token prefixes on the
// server. A block is regenerated from the seed and its id whenever it is needed, through a
// small bounded cache, so memory does not grow with the trace. Two forms:
//
//   - token ids, for completions endpoints that take a prompt as a list of token ids: exact
//     on any server that accepts them (ids are drawn from [MinTokenID, MaxTokenID));
//   - text, for endpoints that take a string: each block is BlockTokens words, each a space
//     and 1 to 7 lowercase letters. Under the embedded engine's tokenizer (sim/doc.go) such
//     a word is exactly one token and no token spans two words, so blocks are exact there.
//     BPE tokenizers split text into pre-tokens at word boundaries before merging, so a
//     block never merges with its neighbour there either, but a word can take more than one
//     token: MeasureBlockDeviation measures how far a server's tokenizer lands.
//
// See docs/traces.md, "Block-exact prompts".

// Default block-prompt settings.
const (
	DefaultCacheBlocks = 1024
	DefaultMinTokenID  = 1000
	DefaultMaxTokenID  = 32000
)

// BlockConfig sets up a BlockBuilder.
type BlockConfig struct {
	Seed uint64
	// BlockTokens is the trace's block size (512 when 0).
	BlockTokens int
	// CacheBlocks bounds the blocks kept built (DefaultCacheBlocks when 0): about 2 KiB of
	// token ids and 3 KiB of text per 512-token block.
	CacheBlocks int
	// MinTokenID and MaxTokenID bound the token ids drawn: [Min, Max). Both 0: [1000, 32000),
	// clear of the special and byte tokens at the start of common vocabularies and inside
	// the smallest of them.
	MinTokenID, MaxTokenID int32
}

// ErrBlockCount is a request that names more blocks than its length spans.
var ErrBlockCount = errors.New("more hash ids than the input length spans")

// BlockBuilder builds block-exact prompts. It is not safe for concurrent use.
type BlockBuilder struct {
	cfg   BlockConfig
	ids   []idBlock
	texts []textBlock
	mask  uint64
	// encoded is shared with the readers of the builder's streamed prompts.
	encoded *encodedBlocks
}

// blockKey names a block: a trace's hash id, or block Index of request Request when the
// trace leaves it unnamed (such blocks are private to their request).
type blockKey struct {
	private bool
	id      uint64 // the hash id, or the request's key
	index   int
}

type idBlock struct {
	valid  bool
	key    blockKey
	tokens []int32
}

type textBlock struct {
	valid bool
	key   blockKey
	text  []byte
}

// NewBlockBuilder returns a builder for cfg.
func NewBlockBuilder(cfg BlockConfig) (*BlockBuilder, error) {
	if cfg.BlockTokens == 0 {
		cfg.BlockTokens = 512
	}
	if cfg.CacheBlocks == 0 {
		cfg.CacheBlocks = DefaultCacheBlocks
	}
	if cfg.MinTokenID == 0 && cfg.MaxTokenID == 0 {
		cfg.MinTokenID, cfg.MaxTokenID = DefaultMinTokenID, DefaultMaxTokenID
	}
	switch {
	case cfg.BlockTokens < 1:
		return nil, fmt.Errorf("block tokens %d must be at least 1", cfg.BlockTokens)
	case cfg.CacheBlocks < 1:
		return nil, fmt.Errorf("cache blocks %d must be at least 1", cfg.CacheBlocks)
	case cfg.MinTokenID < 0 || cfg.MaxTokenID <= cfg.MinTokenID:
		return nil, fmt.Errorf("token ids [%d, %d) must be a non-empty range of non-negative ids", cfg.MinTokenID, cfg.MaxTokenID)
	}
	n := 1
	for n < cfg.CacheBlocks {
		n *= 2
	}
	return &BlockBuilder{cfg: cfg, ids: make([]idBlock, n), texts: make([]textBlock, n), mask: uint64(n - 1), encoded: newEncodedBlocks(cfg)}, nil
}

// BlockTokens is the builder's block size.
func (b *BlockBuilder) BlockTokens() int { return b.cfg.BlockTokens }

// AppendTokenIDs appends the token ids of a prompt of inputTokens tokens whose blocks are
// named by hashIDs; blocks past the named ones are private to the request whose key is
// request (a trace's line number will do). Block i covers tokens [i*BlockTokens,
// (i+1)*BlockTokens) and the last block is cut to inputTokens.
func (b *BlockBuilder) AppendTokenIDs(dst []int32, hashIDs []uint64, inputTokens int, request uint64) ([]int32, error) {
	blocks, err := b.blocks(hashIDs, inputTokens)
	if err != nil {
		return dst, err
	}
	bt := b.cfg.BlockTokens
	for i := range blocks {
		tokens := b.tokenBlock(b.key(hashIDs, request, i))
		dst = append(dst, tokens[:min(bt, inputTokens-i*bt)]...)
	}
	return dst, nil
}

// AppendText appends the text of the same prompt as AppendTokenIDs, in the text form.
func (b *BlockBuilder) AppendText(dst []byte, hashIDs []uint64, inputTokens int, request uint64) ([]byte, error) {
	blocks, err := b.blocks(hashIDs, inputTokens)
	if err != nil {
		return dst, err
	}
	bt := b.cfg.BlockTokens
	for i := range blocks {
		text := b.textBlock(b.key(hashIDs, request, i))
		dst = append(dst, leadingWords(text, min(bt, inputTokens-i*bt))...)
	}
	return dst, nil
}

// BlockText returns the text of the block a hash id names, valid until the builder's next
// call.
func (b *BlockBuilder) BlockText(hashID uint64) []byte {
	return b.textBlock(blockKey{id: hashID})
}

func (b *BlockBuilder) blocks(hashIDs []uint64, inputTokens int) (int, error) {
	if inputTokens < 1 {
		return 0, fmt.Errorf("input length %d: a prompt has at least 1 token", inputTokens)
	}
	blocks := (inputTokens + b.cfg.BlockTokens - 1) / b.cfg.BlockTokens
	if len(hashIDs) > blocks {
		return 0, fmt.Errorf("%w: %d hash ids for %d tokens in blocks of %d", ErrBlockCount, len(hashIDs), inputTokens, b.cfg.BlockTokens)
	}
	return blocks, nil
}

func (b *BlockBuilder) key(hashIDs []uint64, request uint64, i int) blockKey {
	if i < len(hashIDs) {
		return blockKey{id: hashIDs[i]}
	}
	return blockKey{private: true, id: request, index: i}
}

// seedBlock sets src to block k's random stream: a function of the seed and the key alone.
func seedBlock(src *rand.PCG, seed uint64, k blockKey) {
	stream := mix64(k.id)
	if k.private {
		stream = mix64(stream ^ 0x70726976617465 ^ uint64(k.index)) // "private"
	}
	src.Seed(seed, stream)
}

// blockSlot is k's slot in a direct-mapped cache, before masking to the cache's size.
func blockSlot(k blockKey) uint64 {
	h := mix64(k.id ^ uint64(k.index)<<32)
	if k.private {
		h = ^h
	}
	return h
}

// tokenBlock returns the block's BlockTokens token ids, from the cache or built now.
func (b *BlockBuilder) tokenBlock(k blockKey) []int32 {
	e := &b.ids[blockSlot(k)&b.mask]
	if e.valid && e.key == k {
		return e.tokens
	}
	bt := b.cfg.BlockTokens
	if cap(e.tokens) < bt {
		e.tokens = make([]int32, bt)
	}
	tokens := fillTokenBlock(e.tokens[:bt], b.cfg, k)
	e.valid, e.key, e.tokens = true, k, tokens
	return tokens
}

// textBlock returns the block's BlockTokens words, from the cache or built now.
func (b *BlockBuilder) textBlock(k blockKey) []byte {
	e := &b.texts[blockSlot(k)&b.mask]
	if e.valid && e.key == k {
		return e.text
	}
	text := appendTextBlock(e.text[:0], b.cfg, k)
	e.valid, e.key, e.text = true, k, text
	return text
}

// leadingWords returns the first n words of a block's text (each word starts with a space).
func leadingWords(text []byte, n int) []byte {
	for i, c := range text {
		if c == ' ' {
			if n == 0 {
				return text[:i]
			}
			n--
		}
	}
	return text
}

// mix64 is splitmix64's finalizer: a cheap, well-spread 64-bit hash step.
func mix64(x uint64) uint64 {
	x += 0x9e3779b97f4a7c15
	x = (x ^ (x >> 30)) * 0xbf58476d1ce4e5b9
	x = (x ^ (x >> 27)) * 0x94d049bb133111eb
	return x ^ (x >> 31)
}

// TextTokenCounter counts the tokens a server's tokenizer makes of a plain prompt (vLLM:
// POST /tokenize {"model", "prompt"}), special tokens it adds included.
type TextTokenCounter interface {
	CountTextTokens(ctx context.Context, text string) (int, error)
}

// BlockDeviation is how a server's tokenizer counts text-form blocks against their size:
// the record's type.
type BlockDeviation = record.BlockDeviation

// MeasureBlockDeviation counts the text form of the blocks that hashIDs name (a sample of a
// trace's ids), each alone and all joined, with counter.
func MeasureBlockDeviation(ctx context.Context, counter TextTokenCounter, b *BlockBuilder, hashIDs []uint64) (BlockDeviation, error) {
	d := BlockDeviation{Blocks: len(hashIDs), BlockTokens: b.cfg.BlockTokens}
	if len(hashIDs) == 0 {
		return d, errors.New("no blocks to measure")
	}
	added, err := counter.CountTextTokens(ctx, "")
	if err != nil {
		return d, fmt.Errorf("counting the empty prompt: %w", err)
	}
	d.AddedTokens = added
	var joined []byte
	sum, total := 0, 0
	for _, id := range hashIDs {
		text := b.BlockText(id)
		joined = append(joined, text...)
		n, err := counter.CountTextTokens(ctx, string(text))
		if err != nil {
			return d, fmt.Errorf("counting block %d: %w", id, err)
		}
		n -= added
		sum += n
		dev := n - d.BlockTokens
		if dev == 0 {
			d.ExactBlocks++
		}
		total += max(dev, -dev)
		d.MaxAbsDeviation = max(d.MaxAbsDeviation, max(dev, -dev))
	}
	d.MeanAbsDeviation = float64(total) / float64(len(hashIDs))
	n, err := counter.CountTextTokens(ctx, string(joined))
	if err != nil {
		return d, fmt.Errorf("counting the joined blocks: %w", err)
	}
	d.JoinDeviation = n - added - sum
	return d, nil
}

// blockWords are the text form's words, 256 of them (one byte of randomness each): common
// English words of 1 to 7 lowercase letters, each with its leading space. Under the
// embedded engine's tokenizer each is one token; BPE vocabularies hold most of them as one.
var blockWords = func() (out [256]string) {
	for i, w := range blockWordList {
		out[i] = " " + w
	}
	return out
}()

var blockWordList = [256]string{
	"the", "of", "and", "to", "in", "is", "it", "that", "for", "was", "on", "are", "as",
	"with", "his", "they", "be", "at", "one", "have", "this", "from", "or", "had", "by",
	"not", "word", "but", "what", "some", "we", "can", "out", "other", "were", "all", "there",
	"when", "up", "use", "your", "how", "said", "an", "each", "she", "which", "do", "their",
	"time", "if", "will", "way", "about", "many", "then", "them", "write", "would", "like",
	"so", "these", "her", "long", "make", "thing", "see", "him", "two", "has", "look", "more",
	"day", "could", "go", "come", "did", "number", "sound", "no", "most", "people", "my",
	"over", "know", "water", "than", "call", "first", "who", "may", "down", "side", "been",
	"now", "find", "any", "new", "work", "part", "take", "get", "place", "made", "live",
	"where", "after", "back", "little", "only", "round", "man", "year", "came", "show",
	"every", "good", "me", "give", "our", "under", "name", "very", "through", "just", "form",
	"great", "think", "say", "help", "low", "line", "turn", "cause", "much", "mean", "before",
	"move", "right", "boy", "old", "too", "same", "tell", "does", "set", "three", "want",
	"air", "well", "also", "play", "small", "end", "put", "home", "read", "hand", "port",
	"large", "add", "even", "land", "here", "must", "big", "high", "such", "follow", "act",
	"why", "ask", "men", "change", "went", "light", "kind", "off", "need", "house", "try",
	"us", "again", "animal", "point", "mother", "world", "near", "build", "self", "earth",
	"father", "head", "stand", "own", "page", "should", "country", "found", "answer",
	"school", "grow", "study", "still", "learn", "plant", "cover", "food", "sun", "four",
	"between", "state", "keep", "eye", "never", "last", "let", "thought", "city", "tree",
	"cross", "farm", "hard", "start", "might", "story", "saw", "far", "sea", "draw", "left",
	"late", "run", "while", "press", "close", "night", "real", "life", "few", "north", "open",
	"seem", "next", "white", "begin", "got", "walk", "example", "paper", "group", "always",
	"music", "those", "both", "mark",
}

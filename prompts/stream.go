package prompts

import (
	"bytes"
	"io"
	"math/rand/v2"
	"strconv"
	"sync/atomic"
)

// A streamed prompt is a block-exact prompt held by reference: the keys of its blocks and
// how much of each it takes, not its bytes. Its JSON value (a list of token ids, or the text
// as a JSON string) is written from a cache of encoded blocks shared by every request of a
// builder, as the request body goes out, so that a request in flight costs a few bytes a
// block rather than its encoded prompt (about 80 KB for 12k token ids). Building one encodes
// its blocks ahead of the send time and pins them until the prompt is first read through,
// so that writing it encodes nothing whatever the cache evicted meanwhile; a second read (a
// retry) takes them from the cache, where a block evicted since is encoded again to the same
// bytes (a block is a function of the seed and its key).

// Prompt forms of a StreamedPrompt.
const (
	formTokenIDs = iota
	formText
)

// StreamedPrompt is a block-exact prompt that writes its JSON value as it is read (see
// above). It is safe for concurrent use, as are its readers, each its own.
type StreamedPrompt struct {
	cache  *encodedBlocks
	form   int
	blocks []streamedBlock
	size   int
	// pins holds the blocks as built until the prompt is first read through (nil since).
	pins atomic.Pointer[[]*encodedBlock]
}

// streamedBlock is a block of a streamed prompt: its key and the bytes of its encoded form
// the prompt takes (all of them but for a cut last block).
type streamedBlock struct {
	key   blockKey
	bytes int
}

// TokenIDPrompt is the prompt AppendTokenIDs builds, streamed: its JSON value is the list of
// its token ids, as strconv writes them.
func (b *BlockBuilder) TokenIDPrompt(hashIDs []uint64, inputTokens int, request uint64) (*StreamedPrompt, error) {
	return b.streamedPrompt(formTokenIDs, hashIDs, inputTokens, request)
}

// TextPrompt is the prompt AppendText builds, streamed: its JSON value is the text as a JSON
// string (its words, lowercase letters after a space, need no escaping).
func (b *BlockBuilder) TextPrompt(hashIDs []uint64, inputTokens int, request uint64) (*StreamedPrompt, error) {
	return b.streamedPrompt(formText, hashIDs, inputTokens, request)
}

func (b *BlockBuilder) streamedPrompt(form int, hashIDs []uint64, inputTokens int, request uint64) (*StreamedPrompt, error) {
	n, err := b.blocks(hashIDs, inputTokens)
	if err != nil {
		return nil, err
	}
	p := &StreamedPrompt{cache: b.encoded, form: form, blocks: make([]streamedBlock, n), size: 2 + n - 1}
	if form == formText {
		p.size = 2 // the quotes: text blocks are joined as they are
	}
	bt := b.cfg.BlockTokens
	pins := make([]*encodedBlock, n)
	for i := range n {
		k := b.key(hashIDs, request, i)
		enc := b.encoded.get(k, form)
		pins[i] = enc
		taken := len(enc.data)
		if tokens := inputTokens - i*bt; tokens < bt {
			taken = enc.cut(tokens)
		}
		p.blocks[i] = streamedBlock{key: k, bytes: taken}
		p.size += taken
	}
	p.pins.Store(&pins)
	return p, nil
}

// Len is the length of the prompt's JSON value in bytes.
func (p *StreamedPrompt) Len() int { return p.size }

// NewReader returns a reader of the prompt's JSON value from its start.
func (p *StreamedPrompt) NewReader() io.Reader { return &promptReader{p: p, pins: p.pins.Load()} }

// promptReader reads a streamed prompt's JSON value: the opening bracket or quote, each
// block's bytes (token-id blocks after a comma), the closing one.
type promptReader struct {
	p       *StreamedPrompt
	pins    *[]*encodedBlock // the prompt's pinned blocks; nil: take them from the cache
	next    int              // the block after the one being read
	pending []byte           // bytes of the current piece not yet read
	comma   bool             // the comma before block next was read
	opened  bool
	closed  bool
}

var (
	idsOpen, idsClose   = []byte("["), []byte("]")
	textQuote, idsComma = []byte(`"`), []byte(",")
)

func (r *promptReader) Read(dst []byte) (int, error) {
	n := 0
	for n < len(dst) {
		if len(r.pending) == 0 && !r.advance() {
			if n == 0 {
				return 0, io.EOF
			}
			break
		}
		c := copy(dst[n:], r.pending)
		r.pending = r.pending[c:]
		n += c
	}
	return n, nil
}

// advance sets pending to the next piece of the value; false at its end.
func (r *promptReader) advance() bool {
	p := r.p
	switch {
	case !r.opened:
		r.opened = true
		r.pending = idsOpen
		if p.form == formText {
			r.pending = textQuote
		}
	case r.next < len(p.blocks):
		if p.form == formTokenIDs && r.next > 0 && !r.comma {
			r.comma = true
			r.pending = idsComma
			return true
		}
		r.comma = false
		b := p.blocks[r.next]
		var enc *encodedBlock
		if r.pins != nil {
			enc = (*r.pins)[r.next]
		} else {
			enc = p.cache.get(b.key, p.form)
		}
		r.next++
		r.pending = enc.data[:b.bytes]
	case !r.closed:
		r.closed = true
		// Read through: the bytes are on their way, and a request in flight keeps no block.
		r.pins = nil
		p.pins.Store(nil)
		r.pending = idsClose
		if p.form == formText {
			r.pending = textQuote
		}
	default:
		return false
	}
	return true
}

// encodedBlocks is a direct-mapped cache of blocks in their JSON forms, shared by a builder
// and the readers of its prompts (goroutines of their own): each slot holds an immutable
// entry, replaced whole, so a reader keeps what it loaded however the slot changes.
type encodedBlocks struct {
	cfg   BlockConfig
	slots []atomic.Pointer[encodedBlock]
	mask  uint64
}

// encodedBlock is a whole block in one form: token ids joined by commas, or its words.
type encodedBlock struct {
	key  blockKey
	form int
	data []byte
}

func newEncodedBlocks(cfg BlockConfig) *encodedBlocks {
	n := 1
	for n < cfg.CacheBlocks {
		n *= 2
	}
	return &encodedBlocks{cfg: cfg, slots: make([]atomic.Pointer[encodedBlock], n), mask: uint64(n - 1)}
}

// get returns block k in form, from the cache or encoded now (and cached).
func (c *encodedBlocks) get(k blockKey, form int) *encodedBlock {
	slot := &c.slots[blockSlot(k)&c.mask]
	if e := slot.Load(); e != nil && e.key == k && e.form == form {
		return e
	}
	e := &encodedBlock{key: k, form: form}
	if form == formText {
		e.data = appendTextBlock(make([]byte, 0, 6*c.cfg.BlockTokens), c.cfg, k)
	} else {
		e.data = appendTokenIDsJSON(make([]byte, 0, 6*c.cfg.BlockTokens), c.cfg, k)
	}
	slot.Store(e)
	return e
}

// cut is the length of the block's first tokens tokens in its form: up to the comma after
// the last token id, or the space before the next word.
func (e *encodedBlock) cut(tokens int) int {
	sep := byte(',')
	if e.form == formText {
		sep = ' '
		tokens++ // each word starts with its space
	}
	at := 0
	for range tokens {
		i := bytes.IndexByte(e.data[at:], sep)
		if i < 0 {
			return len(e.data)
		}
		at += i + 1
	}
	return at - 1
}

// fillTokenBlock fills dst (BlockTokens long) with block k's token ids.
func fillTokenBlock(dst []int32, cfg BlockConfig, k blockKey) []int32 {
	var src rand.PCG
	seedBlock(&src, cfg.Seed, k)
	span := uint64(cfg.MaxTokenID - cfg.MinTokenID)
	for i := 0; i < len(dst); i += 2 {
		r := src.Uint64()
		dst[i] = cfg.MinTokenID + int32((r&0xffffffff)*span>>32)
		if i+1 < len(dst) {
			dst[i+1] = cfg.MinTokenID + int32((r>>32)*span>>32)
		}
	}
	return dst
}

// appendTokenIDsJSON appends block k's token ids, joined by commas, to dst: the ids
// fillTokenBlock draws, drawn the same way.
func appendTokenIDsJSON(dst []byte, cfg BlockConfig, k blockKey) []byte {
	var src rand.PCG
	seedBlock(&src, cfg.Seed, k)
	span := uint64(cfg.MaxTokenID - cfg.MinTokenID)
	for i := 0; i < cfg.BlockTokens; i += 2 {
		r := src.Uint64()
		if i > 0 {
			dst = append(dst, ',')
		}
		dst = strconv.AppendInt(dst, int64(cfg.MinTokenID+int32((r&0xffffffff)*span>>32)), 10)
		if i+1 < cfg.BlockTokens {
			dst = strconv.AppendInt(append(dst, ','), int64(cfg.MinTokenID+int32((r>>32)*span>>32)), 10)
		}
	}
	return dst
}

// appendTextBlock appends block k's BlockTokens words to dst.
func appendTextBlock(dst []byte, cfg BlockConfig, k blockKey) []byte {
	var src rand.PCG
	seedBlock(&src, cfg.Seed, k)
	var r uint64
	for i := range cfg.BlockTokens {
		if i%8 == 0 {
			r = src.Uint64()
		}
		dst = append(dst, blockWords[r&0xff]...)
		r >>= 8
	}
	return dst
}

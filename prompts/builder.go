// Package prompts builds the deterministic, seeded prompts kvbench sends. A prompt is a shared
// prefix (identical bytes across a run's requests, ending on a newline) plus a per-request
// document body, closed by a question whose answer is a fact planted in the text. The bytes of
// request i depend only on the seed, i, the shared prefix size, the planned token count, the
// mode and the token-count calibration: never on a clock, map order or a global random source.
// See docs/domain.md, "Building prompts".
package prompts

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"math"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
)

// Mode says how the prompts of one run relate to each other.
type Mode string

const (
	// SharedPrefix prompts share the prefix; each body is its own text.
	SharedPrefix Mode = "shared-prefix"
	// Nested prompts draw their bodies from one document, so each prompt extends the shorter ones.
	Nested Mode = "nested"
)

// Counting names how a prompt's token count was obtained.
const (
	CountedByServer = "server"
	Estimated       = "estimate"
)

// EstimateBytesPerToken is the estimate's rule: the common four bytes per token of English.
// Real tokenizers differ (seed 001 planned 150,000 tokens and the server counted 113,674).
const EstimateBytesPerToken = 4

const systemText = "You are a careful reader. Answer the question at the end from the document alone.\n"

// Config sets up a Builder.
type Config struct {
	Seed               uint64
	SharedPrefixTokens int
	Mode               Mode
	// Counter counts tokens on the server; nil means estimate.
	Counter TokenCounter
	// MaxCountCalls bounds the server calls spent on one prompt; 0 means 8.
	MaxCountCalls int
	// Salt, when set, gives the prompts fresh bytes of the same shapes: every document is
	// drawn from the seed mixed with the salt, so a server's caches hold nothing of an
	// unsalted (or differently salted) run's prompts beyond the shared prefix, which stays
	// the seed's. "" draws from the seed alone.
	Salt string
}

// Prompt is one built request: its messages, and its identity and how its size was reached
// as the record keeps them (record.Prompt).
type Prompt struct {
	Index         int `json:"index"`
	PlannedTokens int `json:"planned_tokens"`
	record.Prompt
	Messages []Message `json:"-"`
}

// ErrTooSmall means the planned tokens cannot hold the shared prefix and a question.
var ErrTooSmall = errors.New("planned tokens too small")

// Builder builds the prompts of one run. It caches the shared prefix and the documents, so
// one Builder serves a whole run; it is not safe for concurrent use.
type Builder struct {
	cfg          Config
	prefix       []byte
	prefixSum    string
	prefixTokens int
	prefixCalls  int
	streams      map[int]*textStream
	bytesPerTok  float64 // calibration learned from the counter
}

// NewBuilder returns a Builder for cfg.
func NewBuilder(cfg Config) *Builder {
	if cfg.Mode == "" {
		cfg.Mode = SharedPrefix
	}
	if cfg.MaxCountCalls <= 0 {
		cfg.MaxCountCalls = 8
	}
	return &Builder{cfg: cfg, streams: map[int]*textStream{}, bytesPerTok: EstimateBytesPerToken}
}

// Tolerance is how far a server-counted prompt may land from its plan: max(16, 0.1%).
func Tolerance(planned int) int {
	return max(16, planned/1000)
}

// Build returns request index's prompt sized to planned tokens. A replay calls Build with the
// original index and plan and gets byte-identical messages.
func (b *Builder) Build(ctx context.Context, index, planned int) (Prompt, error) {
	if err := b.ensurePrefix(ctx); err != nil {
		return Prompt{}, err
	}
	if planned <= b.cfg.SharedPrefixTokens {
		return Prompt{}, fmt.Errorf("%w: request %d plans %d tokens, not more than the %d-token shared prefix", ErrTooSmall, index, planned, b.cfg.SharedPrefixTokens)
	}
	s := b.stream(index)
	render := func(units int) []Message { return b.render(s, units) }
	size := func(units int) int { return b.renderedBytes(s, units) }
	units, tokens, calls, err := b.fit(ctx, planned, s, render, size)
	if err != nil {
		return Prompt{}, fmt.Errorf("request %d: %w", index, err)
	}
	msgs := render(units)
	p := Prompt{Index: index, PlannedTokens: planned, Messages: msgs, Prompt: record.Prompt{
		Tokens:             tokens,
		TokenCounting:      b.counting(),
		CountCalls:         calls,
		ToleranceTokens:    Tolerance(planned),
		SharedPrefixTokens: b.prefixTokens,
		SharedPrefixSHA256: b.prefixSum,
		Identity:           Identity(msgs),
		Shape:              b.shape(index, planned),
		ExpectedAnswer:     b.answer(s, units),
	}}
	p.WithinTolerance = abs(tokens-planned) <= p.ToleranceTokens
	return p, nil
}

// seed is the seed the document texts are drawn from: the configured one, mixed with the
// salt. The shared prefix keeps the configured seed: it is the part every request shares and
// the verdicts expect hot, and an equal prefix keeps the salted prompts' sizes equal too (a
// prefix of other bytes counts a few tokens more or less, a KV block's difference in every
// request's cached share).
func (b *Builder) seed() uint64 { return SaltedSeed(b.cfg.Seed, b.cfg.Salt) }

// shape is the identity of request index's shape: what its bytes depend on, but the salt.
func (b *Builder) shape(index, planned int) string {
	return ShapeOf(b.cfg.Seed, index, planned, b.cfg.SharedPrefixTokens, b.cfg.Mode, b.counting())
}

// SaltedSeed is the seed texts are drawn from under salt: seed itself when salt is "".
func SaltedSeed(seed uint64, salt string) uint64 {
	if salt == "" {
		return seed
	}
	sum := sha256.Sum256([]byte("kvbench prompt salt\x00" + salt))
	return seed ^ binary.BigEndian.Uint64(sum[:8])
}

// ShapeOf is the shape identity of the document prompt of request index built with seed:
// planned tokens behind a sharedPrefix-token prefix, in mode, counted by counting. It is
// what the prompt's bytes depend on but the salt, so it can be computed again from any
// record that keeps those figures.
func ShapeOf(seed uint64, index, planned, sharedPrefix int, mode Mode, counting string) string {
	if mode == "" {
		mode = SharedPrefix
	}
	h := sha256.New()
	fmt.Fprintf(h, "kvbench prompt shape 1\nseed %d\nindex %d\nplanned %d\nshared prefix %d\nmode %s\ncounting %s\n",
		seed, index, planned, sharedPrefix, mode, counting)
	return hex.EncodeToString(h.Sum(nil))
}

// PrefixCountCalls reports the counter calls spent sizing the shared prefix.
func (b *Builder) PrefixCountCalls() int { return b.prefixCalls }

func (b *Builder) counting() string {
	if b.cfg.Counter == nil {
		return Estimated
	}
	return CountedByServer
}

// stream returns the document a request's body is cut from: its own in shared-prefix mode,
// the run's single document in nested mode.
func (b *Builder) stream(index int) *textStream {
	key := index
	if b.cfg.Mode == Nested {
		key = -1
	}
	s, ok := b.streams[key]
	if !ok {
		tag := fmt.Sprintf("R%d", index)
		if key < 0 {
			tag = "D"
		}
		// Stream 0 is the prefix; bodies use 1+index (nested: a fixed 1<<32).
		id := uint64(1) << 32
		if key >= 0 {
			id = uint64(key) + 1
		}
		s = newTextStream(b.seed(), id, tag)
		b.streams[key] = s
	}
	return s
}

func (b *Builder) ensurePrefix(ctx context.Context) error {
	if b.prefix != nil || b.cfg.SharedPrefixTokens <= 0 {
		if b.prefixSum == "" {
			b.prefixSum = hexSum(nil)
		}
		return nil
	}
	s := newTextStream(b.cfg.Seed, 0, "P") // the prefix is shared across salts too
	render := func(units int) []Message {
		text, _, _ := s.text(units)
		return []Message{{Role: "system", Content: systemText}, {Role: "user", Content: prefixText(text)}}
	}
	size := func(units int) int { return contentBytes(render(units)) }
	units, tokens, calls, err := b.fit(ctx, b.cfg.SharedPrefixTokens, s, render, size)
	if err != nil {
		return fmt.Errorf("shared prefix: %w", err)
	}
	text, _, _ := s.text(units)
	b.prefix = []byte(prefixText(text))
	b.prefixSum = hexSum(b.prefix)
	b.prefixTokens = tokens
	b.prefixCalls = calls
	return nil
}

// prefixText ends the prefix on a newline: a stable token boundary, so the prefix's blocks are
// shared whatever body follows.
func prefixText(text []byte) string {
	return "Reference notes shared by every request of this run.\n\n" + string(text) + "\n"
}

func (b *Builder) render(s *textStream, units int) []Message {
	text, _, _ := s.text(units)
	question := b.question(s, units)
	// A Builder hands its bytes to the string without the copy string([]byte) makes.
	var user strings.Builder
	user.Grow(len(b.prefix) + len(documentHeading) + len(text) + 2 + len(question))
	user.Write(b.prefix)
	user.WriteString(documentHeading)
	user.Write(text)
	user.WriteString("\n\n")
	user.WriteString(question)
	return []Message{{Role: "system", Content: systemText}, {Role: "user", Content: user.String()}}
}

const documentHeading = "\nDocument:\n\n"

// renderedBytes is contentBytes(b.render(s, units)) without building the text.
func (b *Builder) renderedBytes(s *textStream, units int) int {
	text, _, _ := s.text(units)
	return len(systemText) + len(b.prefix) + len(documentHeading) + len(text) + 2 + len(b.question(s, units))
}

func (b *Builder) question(s *textStream, units int) string {
	if _, f, ok := s.text(units); ok {
		return "Question: Which code does ledger entry " + f.label + " record? Reply with the code only."
	}
	return "Question: What is the shared reference notes' first word? Reply with one word only."
}

func (b *Builder) answer(s *textStream, units int) string {
	if _, f, ok := s.text(units); ok {
		return f.code
	}
	return "Reference"
}

// fit finds the number of units whose rendering counts closest to target tokens: exact
// arithmetic for the estimate, a secant search on bytes with the server's counter.
// size(units) must equal contentBytes(render(units)); the estimate uses it to avoid rendering.
func (b *Builder) fit(ctx context.Context, target int, s *textStream, render func(int) []Message, size func(int) int) (units, tokens, calls int, err error) {
	estimate := func(units int) int { return (size(units) + EstimateBytesPerToken - 1) / EstimateBytesPerToken }
	fixed := estimate(0)
	if target <= fixed {
		return 0, 0, 0, fmt.Errorf("%w: %d tokens planned, the fixed text alone takes about %d", ErrTooSmall, target, fixed)
	}
	if b.cfg.Counter == nil {
		// The estimate is monotone in units: binary search the largest unit count within target.
		bodyBytes := (target - fixed) * EstimateBytesPerToken
		units = s.unitsWithin(bodyBytes + EstimateBytesPerToken)
		for units > 0 && estimate(units) > target {
			units--
		}
		return units, estimate(units), 0, nil
	}

	tol := Tolerance(target)
	type point struct{ bytes, tokens int }
	var pts []point
	best := point{-1, 0}
	bestUnits := 0
	fixedBytes := float64(size(0))
	x := float64(target)*b.bytesPerTok - fixedBytes
	for calls < b.cfg.MaxCountCalls {
		units = s.unitsWithin(int(math.Max(0, x)))
		msgs := render(units)
		n, err := b.cfg.Counter.CountTokens(ctx, msgs)
		calls++
		if err != nil {
			return 0, 0, calls, fmt.Errorf("counting tokens: %w", err)
		}
		size := contentBytes(msgs)
		if n > 0 {
			b.bytesPerTok = float64(size) / float64(n)
		}
		if best.bytes < 0 || abs(n-target) < abs(best.tokens-target) {
			best, bestUnits = point{size, n}, units
		}
		if abs(n-target) <= tol {
			break
		}
		pts = append(pts, point{size, n})
		slope := b.bytesPerTok // bytes per token, from the whole prompt
		if k := len(pts); k >= 2 && pts[k-1].tokens != pts[k-2].tokens {
			if sl := float64(pts[k-1].bytes-pts[k-2].bytes) / float64(pts[k-1].tokens-pts[k-2].tokens); sl > 0 {
				slope = sl
			}
		}
		x = float64(size) - fixedBytes + float64(target-n)*slope
	}
	return bestUnits, best.tokens, calls, nil
}

// EstimateTokens is the estimate rule applied to messages: content bytes / 4, rounded up.
func EstimateTokens(msgs []Message) int {
	return (contentBytes(msgs) + EstimateBytesPerToken - 1) / EstimateBytesPerToken
}

func contentBytes(msgs []Message) int {
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	return n
}

// Identity is the sha256 of the exact request messages, so a replay can prove it sent the
// identical bytes. Each message is framed as "role\nlen(content)\n" followed by the content.
func Identity(msgs []Message) string {
	h := sha256.New()
	for _, m := range msgs {
		fmt.Fprintf(h, "%s\n%d\n", m.Role, len(m.Content))
		io.WriteString(h, m.Content)
	}
	return hex.EncodeToString(h.Sum(nil))
}

func hexSum(data []byte) string {
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:])
}

func abs(x int) int {
	if x < 0 {
		return -x
	}
	return x
}

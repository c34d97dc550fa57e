package client

import (
	"strings"
	"unicode/utf8"
)

// fastDecodeChunk decodes the common shape of a streamed token chunk several times faster
// than encoding/json, which would cost most of the client's per-token budget. It returns
// ok=false for anything it is not sure to decode exactly as encoding/json would (a usage
// object, \u escapes, keys matching only case-insensitively, repeated keys, invalid
// JSON), and the caller falls back to encoding/json. FuzzDecodeChunk holds it to that.
func fastDecodeChunk(data []byte) (chunk streamChunk, ok bool) {
	return fastDecodeChunkReusing(data, nil, "")
}

// fastDecodeChunkReusing is fastDecodeChunk with spare's array reused for the choices, and
// model for a model field equal to it, which saves allocations per token.
func fastDecodeChunkReusing(data []byte, spare []chunkChoice, model string) (chunk streamChunk, ok bool) {
	s := chunkScanner{data: data, spare: spare, model: model}
	return s.decode()
}

// decode decodes the whole of s.data, noting where the generated string lay (s.varied).
func (s *chunkScanner) decode() (chunk streamChunk, ok bool) {
	s.skipSpace()
	if !s.topLevel(&chunk) {
		return streamChunk{}, false
	}
	s.skipSpace()
	return chunk, s.pos == len(s.data)
}

// maxFastDepth bounds nesting in skipped values; deeper input takes the slow path.
const maxFastDepth = 32

type chunkScanner struct {
	data  []byte
	pos   int
	depth int
	spare []chunkChoice // reused for the choices when not nil
	model string        // reused for a model field equal to it

	// The generated strings met (a choice's text, a delta's content or reasoning): the
	// last one's field and where its JSON string lay, quotes included (chunkTemplate).
	varied           int
	variedField      variedField
	variedAt, endsAt int
}

// keyMatch classifies a key against the wanted names (lowercase ASCII): the index of an
// exact match, -1 for an unrelated key, or ok=false for a key encoding/json might match by
// case folding.
func keyMatch(key []byte, names []string) (index int, ok bool) {
	for i, name := range names {
		if string(key) == name {
			return i, true
		}
	}
	upper := false
	for _, c := range key {
		if c >= utf8.RuneSelf {
			return -1, false // encoding/json folds some non-ASCII runes to ASCII letters
		}
		upper = upper || 'A' <= c && c <= 'Z'
	}
	if !upper {
		// Most keys of a chunk ("id", "index", "logprobs"...): folding an ASCII key with no
		// capital onto a lowercase name is equality, which failed above.
		return -1, true
	}
	for _, name := range names {
		if len(key) == len(name) && strings.EqualFold(string(key), name) {
			return -1, false
		}
	}
	return -1, true
}

var (
	topLevelKeys = []string{"choices", "usage", "object", "message", "sglext", "model"}
	choiceKeys   = []string{"delta", "finish_reason", "token_ids", "text"}
	deltaKeys    = []string{"content", "reasoning", "reasoning_content"}
)

// member scans to the next member of an object whose '{' is consumed, matches its key
// against names and leaves the scanner on its value. It returns done at the closing
// brace, and ok=false to give up: bad syntax, a doubtful key, or a wanted key seen twice
// (encoding/json merges repeats in ways not worth copying); seen tracks the wanted keys.
func (s *chunkScanner) member(first bool, names []string, seen *uint32) (index int, done, ok bool) {
	s.skipSpace()
	if s.consume('}') {
		return 0, true, true
	}
	if !first {
		if !s.consume(',') {
			return 0, false, false
		}
		s.skipSpace()
	}
	key, ok := s.rawString()
	if !ok {
		return 0, false, false
	}
	s.skipSpace()
	if !s.consume(':') {
		return 0, false, false
	}
	s.skipSpace()
	index, ok = keyMatch(key, names)
	if !ok || (index >= 0 && *seen&(1<<index) != 0) {
		return 0, false, false
	}
	if index >= 0 {
		*seen |= 1 << index
	}
	return index, false, true
}

// topLevel decodes the chunk object.
func (s *chunkScanner) topLevel(chunk *streamChunk) bool {
	if !s.consume('{') {
		return false
	}
	var seen uint32
	for first := true; ; first = false {
		index, done, ok := s.member(first, topLevelKeys, &seen)
		switch {
		case !ok:
			return false
		case done:
			return true
		case index == 0:
			ok = s.choices(chunk)
		case index == 1:
			ok = s.consumeLiteral("null") // a usage object takes the slow path
		case index == 2:
			ok = s.objectName(&chunk.Object)
		case index == 3:
			ok = s.optionalString(&chunk.Message)
		case index == 4:
			ok = s.consumeLiteral("null") // SGLang's details take the slow path
		case index == 5:
			ok = s.modelName(&chunk.Model)
		default:
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
}

func (s *chunkScanner) choices(chunk *streamChunk) bool {
	if s.consumeLiteral("null") {
		chunk.Choices = nil
		return true
	}
	if !s.consume('[') {
		return false
	}
	if s.spare != nil {
		chunk.Choices = s.spare[:0]
	} else {
		chunk.Choices = make([]chunkChoice, 0, 1)
	}
	s.skipSpace()
	if s.consume(']') {
		return true
	}
	for {
		chunk.Choices = append(chunk.Choices, chunkChoice{})
		if !s.consumeLiteral("null") && !s.choice(&chunk.Choices[len(chunk.Choices)-1]) {
			return false
		}
		s.skipSpace()
		if s.consume(']') {
			return true
		}
		if !s.consume(',') {
			return false
		}
		s.skipSpace()
	}
}

func (s *chunkScanner) choice(choice *chunkChoice) bool {
	if !s.consume('{') {
		return false
	}
	var seen uint32
	for first := true; ; first = false {
		index, done, ok := s.member(first, choiceKeys, &seen)
		switch {
		case !ok:
			return false
		case done:
			return true
		case index == 0:
			ok = s.consumeLiteral("null") || s.delta(&choice.Delta)
		case index == 1:
			ok = s.finishReason(choice)
		case index == 2:
			ok = s.tokenIDs(&choice.TokenIDs)
		case index == 3:
			ok = s.generatedString(&choice.Text, variedText)
		default:
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
}

// maxFastTokenIDDigits bounds a token id the fast path decodes: anything longer (or signed,
// fractional, with an exponent) takes the slow path, which knows int's range.
const maxFastTokenIDDigits = 9

// tokenIDs decodes null (leaving dst alone, as encoding/json does) or an array of plain
// non-negative integers.
func (s *chunkScanner) tokenIDs(dst *[]int) bool {
	if s.consumeLiteral("null") {
		return true
	}
	if !s.consume('[') {
		return false
	}
	ids := []int{}
	s.skipSpace()
	if s.consume(']') {
		*dst = ids
		return true
	}
	for {
		start := s.pos
		if !s.digits() || s.pos-start > maxFastTokenIDDigits || (s.data[start] == '0' && s.pos-start > 1) {
			return false
		}
		id := 0
		for _, c := range s.data[start:s.pos] {
			id = id*10 + int(c-'0')
		}
		ids = append(ids, id)
		s.skipSpace()
		if s.consume(']') {
			*dst = ids
			return true
		}
		if !s.consume(',') {
			return false
		}
		s.skipSpace()
	}
}

func (s *chunkScanner) finishReason(choice *chunkChoice) bool {
	if s.consumeLiteral("null") {
		choice.FinishReason = nil
		return true
	}
	reason, ok := s.plainString()
	choice.FinishReason = &reason
	return ok
}

func (s *chunkScanner) delta(delta *chunkDelta) bool {
	if !s.consume('{') {
		return false
	}
	var seen uint32
	for first := true; ; first = false {
		index, done, ok := s.member(first, deltaKeys, &seen)
		switch {
		case !ok:
			return false
		case done:
			return true
		case index == 0:
			ok = s.generatedString(&delta.Content, variedContent)
		case index == 1:
			ok = s.generatedString(&delta.Reasoning, variedReasoning)
		case index == 2:
			ok = s.generatedString(&delta.ReasoningContent, variedReasoningContent)
		default:
			ok = s.skipValue()
		}
		if !ok {
			return false
		}
	}
}

// chunkObject and textObject are the object names of every chat and completion token chunk,
// kept without a copy.
const (
	chunkObject = "chat.completion.chunk"
	textObject  = "text_completion"
)

// objectNames are the usual object names, each with its JSON literal: built per chunk, the
// literals cost two string concatenations a token, 4% of the client's CPU at 64 streams.
var objectNames = [...]struct{ name, literal string }{
	{chunkObject, `"` + chunkObject + `"`},
	{textObject, `"` + textObject + `"`},
}

// objectName decodes the object field like optionalString, without copying the usual names.
func (s *chunkScanner) objectName(dst *string) bool {
	for _, o := range objectNames {
		if s.consumeLiteral(o.literal) {
			*dst = o.name
			return true
		}
	}
	return s.optionalString(dst)
}

// modelName decodes the model field like optionalString, without copying the scanner's
// model when the field names it (every chunk of a stream names the same model).
func (s *chunkScanner) modelName(dst *string) bool {
	if s.consumeLiteral("null") {
		return true
	}
	raw, ok := s.rawString()
	if string(raw) == s.model {
		*dst = s.model
	} else {
		*dst = string(raw)
	}
	return ok
}

// optionalString decodes a string or null (which, as in encoding/json, leaves dst alone).
func (s *chunkScanner) optionalString(dst *string) bool {
	if s.consumeLiteral("null") {
		return true
	}
	str, ok := s.plainString()
	*dst = str
	return ok
}

// generatedString decodes a generated string like optionalString and notes where it lay.
func (s *chunkScanner) generatedString(dst *string, field variedField) bool {
	at := s.pos
	if !s.optionalString(dst) {
		return false
	}
	if s.data[at] == '"' {
		s.varied++
		s.variedField, s.variedAt, s.endsAt = field, at, s.pos
	}
	return true
}

// plainString decodes a string whose escapes are all single-character ones and whose
// bytes are valid UTF-8; anything else gives up.
func (s *chunkScanner) plainString() (string, bool) {
	raw, ok := s.rawString()
	return string(raw), ok
}

// rawString decodes a string like plainString, without copying it when it has no
// escapes: the result may alias the input.
func (s *chunkScanner) rawString() ([]byte, bool) {
	if !s.consume('"') {
		return nil, false
	}
	start := s.pos
	ascii, escaped := true, false
	for s.pos < len(s.data) {
		for s.pos < len(s.data) && plainByte[s.data[s.pos]] {
			s.pos++
		}
		if s.pos == len(s.data) {
			break
		}
		c := s.data[s.pos]
		switch {
		case c == '"':
			raw := s.data[start:s.pos]
			s.pos++
			if !ascii && !utf8.Valid(raw) {
				return nil, false // encoding/json replaces invalid bytes with U+FFFD
			}
			if escaped {
				return unescapeSimple(raw)
			}
			return raw, true
		case c == '\\':
			escaped = true
			s.pos += 2
			continue
		case c < 0x20:
			return nil, false
		case c >= utf8.RuneSelf:
			ascii = false
		}
		s.pos++
	}
	return nil, false
}

// plainByte marks the bytes a string scan passes over without a second look: printable
// ASCII other than the quote and the backslash.
var plainByte = func() (t [256]bool) {
	for c := 0x20; c < 0x80; c++ {
		t[c] = c != '"' && c != '\\'
	}
	return t
}()

func unescapeSimple(raw []byte) ([]byte, bool) {
	out := make([]byte, 0, len(raw))
	for i := 0; i < len(raw); i++ {
		c := raw[i]
		if c != '\\' {
			out = append(out, c)
			continue
		}
		i++
		if i == len(raw) {
			return nil, false
		}
		switch raw[i] {
		case '"', '\\', '/':
			out = append(out, raw[i])
		case 'n':
			out = append(out, '\n')
		case 't':
			out = append(out, '\t')
		case 'r':
			out = append(out, '\r')
		case 'b':
			out = append(out, '\b')
		case 'f':
			out = append(out, '\f')
		default:
			return nil, false // \u escapes and invalid ones take the slow path
		}
	}
	return out, true
}

// skipValue consumes any JSON value, checking its syntax.
func (s *chunkScanner) skipValue() bool {
	if s.pos >= len(s.data) {
		return false
	}
	switch c := s.data[s.pos]; {
	case c == '{':
		return s.nested(s.skipObject)
	case c == '[':
		return s.nested(s.skipArray)
	case c == '"':
		_, ok := s.rawString()
		return ok
	case c == 't':
		return s.consumeLiteral("true")
	case c == 'f':
		return s.consumeLiteral("false")
	case c == 'n':
		return s.consumeLiteral("null")
	default:
		return s.number()
	}
}

func (s *chunkScanner) nested(scan func() bool) bool {
	if s.depth >= maxFastDepth {
		return false
	}
	s.depth++
	ok := scan()
	s.depth--
	return ok
}

func (s *chunkScanner) skipObject() bool {
	s.pos++ // '{'
	var seen uint32
	for first := true; ; first = false {
		_, done, ok := s.member(first, nil, &seen)
		if !ok || done {
			return ok
		}
		if !s.skipValue() {
			return false
		}
	}
}

func (s *chunkScanner) skipArray() bool {
	s.pos++ // '['
	s.skipSpace()
	if s.consume(']') {
		return true
	}
	for {
		if !s.skipValue() {
			return false
		}
		s.skipSpace()
		if s.consume(']') {
			return true
		}
		if !s.consume(',') {
			return false
		}
		s.skipSpace()
	}
}

// number consumes a JSON number: -?(0|[1-9][0-9]*)(\.[0-9]+)?([eE][+-]?[0-9]+)?
func (s *chunkScanner) number() bool {
	s.consume('-')
	if s.consume('0') {
		// no further integer digits allowed
	} else if !s.digits() {
		return false
	}
	if s.consume('.') && !s.digits() {
		return false
	}
	if s.consume('e') || s.consume('E') {
		if !s.consume('+') {
			s.consume('-')
		}
		return s.digits()
	}
	return true
}

func (s *chunkScanner) digits() bool {
	start := s.pos
	for s.pos < len(s.data) && s.data[s.pos] >= '0' && s.data[s.pos] <= '9' {
		s.pos++
	}
	return s.pos > start
}

func (s *chunkScanner) consume(c byte) bool {
	if s.pos < len(s.data) && s.data[s.pos] == c {
		s.pos++
		return true
	}
	return false
}

func (s *chunkScanner) consumeLiteral(lit string) bool {
	if len(s.data)-s.pos >= len(lit) && string(s.data[s.pos:s.pos+len(lit)]) == lit {
		s.pos += len(lit)
		return true
	}
	return false
}

func (s *chunkScanner) skipSpace() {
	for s.pos < len(s.data) {
		switch s.data[s.pos] {
		case ' ', '\t', '\n', '\r':
			s.pos++
		default:
			return
		}
	}
}

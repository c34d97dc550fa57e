package client

import "bytes"

// A stream's token chunks differ from one another in one place, the generated string: vLLM
// and kvbench sim repeat the id, object, created time, model and the choice's other fields
// byte for byte. A chunkTemplate keeps the last fast-decoded token chunk with its decoding,
// and a chunk whose bytes before and after its generated string equal the template's
// decodes as the template did with the new string in place: a comparison of the bytes and
// one string scan instead of scanning every member (BenchmarkDecodeChunk). The bytes are
// compared, never assumed, so any other change is decoded in full; FuzzChunkTemplate holds
// the result to encoding/json's.

// variedField names the field a template's generated string sits in.
type variedField uint8

const (
	variedText variedField = iota
	variedContent
	variedReasoning
	variedReasoningContent
)

// maxTemplateBytes bounds a template's copy of its chunk: a longer one (token ids, long
// text) takes the full decoder each time.
const maxTemplateBytes = 1 << 10

type chunkTemplate struct {
	raw        []byte // the chunk it was taken from, a copy
	start, end int    // raw[start:end] is the generated JSON string, quotes included
	field      variedField
	chunk      streamChunk // raw's decoding, its Choices nil
	choice     chunkChoice // raw's one choice
}

// note makes the chunk s just decoded the template, where it had one choice with one
// generated string; otherwise the template is dropped.
func (t *chunkTemplate) note(s *chunkScanner, chunk streamChunk) {
	if s.varied != 1 || len(chunk.Choices) != 1 || len(s.data) > maxTemplateBytes {
		t.raw = t.raw[:0]
		return
	}
	t.raw = append(t.raw[:0], s.data...)
	t.start, t.end, t.field = s.variedAt, s.endsAt, s.variedField
	t.choice = chunk.Choices[0]
	t.chunk = chunk
	t.chunk.Choices = nil
}

// decode decodes data from the template, with spare's array reused for the choices;
// ok=false when data differs from it outside the generated string.
func (t *chunkTemplate) decode(data []byte, spare []chunkChoice) (streamChunk, bool) {
	if len(t.raw) == 0 {
		return streamChunk{}, false
	}
	tail := len(t.raw) - t.end
	if len(data) < t.start+2+tail || !bytes.Equal(data[:t.start], t.raw[:t.start]) ||
		!bytes.Equal(data[len(data)-tail:], t.raw[t.end:]) {
		return streamChunk{}, false
	}
	// The bytes between must be exactly one string: its closing quote the last of them.
	s := chunkScanner{data: data[:len(data)-tail], pos: t.start}
	str, ok := s.plainString()
	if !ok || s.pos != len(s.data) {
		return streamChunk{}, false
	}
	choice := t.choice
	switch t.field {
	case variedText:
		choice.Text = str
	case variedContent:
		choice.Delta.Content = str
	case variedReasoning:
		choice.Delta.Reasoning = str
	case variedReasoningContent:
		choice.Delta.ReasoningContent = str
	}
	chunk := t.chunk
	chunk.Choices = append(spare[:0], choice)
	return chunk, true
}

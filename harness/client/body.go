package client

import (
	"bytes"
	"io"
)

// JSONPrompt is a prompt that writes its own JSON value as the request body goes out (a
// prompts.StreamedPrompt, whose bytes come from a cache of encoded blocks): Len is the
// value's exact length in bytes, and NewReader a reader of it from the start, asked for once
// each time the body is written (a retry writes it again).
type JSONPrompt interface {
	Len() int
	NewReader() io.Reader
}

// Body is a request's JSON body as it is sent: bytes before and after a prompt written as
// the body goes out, so that a request in flight holds its prompt's block list rather than
// its encoded bytes; or, without such a prompt, all of its bytes (before alone).
type Body struct {
	before []byte
	prompt JSONPrompt // nil: none
	after  []byte
}

// RawBody is a body of encoded bytes, sent as they are.
func RawBody(data []byte) *Body { return &Body{before: data} }

// Len is the body's length in bytes: its Content-Length.
func (b *Body) Len() int64 {
	n := len(b.before) + len(b.after)
	if b.prompt != nil {
		n += b.prompt.Len()
	}
	return int64(n)
}

// NewReader returns a reader of the body from its start.
func (b *Body) NewReader() io.Reader {
	if b.prompt == nil && len(b.after) == 0 {
		return bytes.NewReader(b.before)
	}
	r := &bodyReader{rest: b.before, after: b.after}
	if b.prompt != nil {
		r.prompt = b.prompt.NewReader()
	}
	return r
}

// bodyReader reads a body's bytes, its prompt's, then the bytes after. It has no WriteTo:
// net/http copies a body through a pooled buffer, where io.MultiReader's WriteTo would
// allocate one of 32 KB a request.
type bodyReader struct {
	rest   []byte    // of before, then of after once the prompt is read
	prompt io.Reader // nil once read
	after  []byte
}

func (r *bodyReader) Read(p []byte) (int, error) {
	for {
		if len(r.rest) > 0 {
			n := copy(p, r.rest)
			r.rest = r.rest[n:]
			return n, nil
		}
		if r.prompt != nil {
			n, err := r.prompt.Read(p)
			if err == io.EOF {
				r.prompt, r.rest, r.after, err = nil, r.after, nil, nil
			}
			if n > 0 || err != nil {
				return n, err
			}
			continue
		}
		if len(r.after) > 0 {
			r.rest, r.after = r.after, nil
			continue
		}
		return 0, io.EOF
	}
}

// Bytes returns the whole body, read into memory.
func (b *Body) Bytes() []byte {
	data, _ := io.ReadAll(b.NewReader()) // a body's readers do not fail
	return data
}

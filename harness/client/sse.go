package client

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"slices"
	"strconv"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/prompts"
)

// ReservedBodyKeys are the JSON body fields kvbench sets itself; ChatRequest.ExtraBody may
// not name them (a scenario's extra_body is checked against the same list).
var ReservedBodyKeys = []string{"model", "messages", "prompt", "stream", "stream_options", "max_tokens",
	"max_completion_tokens", "temperature", "ignore_eos", "min_tokens", "return_cached_tokens_details"}

type chatBody struct {
	Model         string            `json:"model"`
	Messages      []prompts.Message `json:"messages,omitempty"`
	MaxTokens     int               `json:"max_tokens,omitempty"`
	Temperature   float32           `json:"temperature"`
	Stream        bool              `json:"stream"`
	StreamOptions streamOptions     `json:"stream_options"`
	IgnoreEOS     bool              `json:"ignore_eos,omitempty"`
	MinTokens     int               `json:"min_tokens,omitempty"`
	// ReturnCachedTokensDetails asks SGLang for the request's cached tokens per tier.
	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details,omitempty"`
}

type streamOptions struct {
	IncludeUsage bool `json:"include_usage"`
}

// completionHead and completionTail are a completion's JSON body before and after its
// prompt, which is spliced in between already encoded: marshalling it as a json.RawMessage
// would scan all of it again (a 12k-token prompt is about 80 KB), on the request path.
type completionHead struct {
	Model string `json:"model"`
}

type completionTail struct {
	MaxTokens     int           `json:"max_tokens,omitempty"`
	Temperature   float32       `json:"temperature"`
	Stream        bool          `json:"stream"`
	StreamOptions streamOptions `json:"stream_options"`
	IgnoreEOS     bool          `json:"ignore_eos,omitempty"`
	MinTokens     int           `json:"min_tokens,omitempty"`

	ReturnCachedTokensDetails bool `json:"return_cached_tokens_details,omitempty"`
}

// EncodeCompletion renders req's JSON body as StreamCompletion sends it: a caller that
// encodes ahead of the send time puts it in req.Body. A prompt of token ids is written as a
// JSON list of integers, a text prompt as a JSON string, a JSONPrompt as it writes itself
// when the body is sent; then ExtraBody's members.
func EncodeCompletion(req CompletionRequest) (*Body, error) {
	return encodeCompletionRequest(req)
}

// encodeCompletionRequest renders req's JSON body (EncodeCompletion).
func encodeCompletionRequest(req CompletionRequest) (*Body, error) {
	head, err := json.Marshal(completionHead{Model: req.Model})
	if err != nil {
		return nil, err
	}
	tail, err := json.Marshal(completionTail{
		MaxTokens:     req.MaxTokens,
		Temperature:   req.Temperature,
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
		IgnoreEOS:     req.IgnoreEOS,
		MinTokens:     req.MinTokens,

		ReturnCachedTokensDetails: req.CachedTokensDetails,
	})
	if err != nil {
		return nil, err
	}
	forms := 0
	for _, set := range []bool{len(req.PromptTokenIDs) > 0, req.PromptText != "", req.PromptJSON != nil} {
		if set {
			forms++
		}
	}
	if forms > 1 {
		return nil, errors.New("a completion prompt is token ids, text or a JSON prompt, not more than one")
	}
	body := &Body{}
	before := make([]byte, 0, len(head)+len(`,"prompt":`)+7*len(req.PromptTokenIDs)+len(req.PromptText)+16)
	before = append(before, head[:len(head)-1]...)
	switch {
	case len(req.PromptTokenIDs) > 0:
		before = append(before, `,"prompt":[`...)
		for i, id := range req.PromptTokenIDs {
			if id < 0 {
				return nil, fmt.Errorf("token id %d at %d is negative", id, i)
			}
			if i > 0 {
				before = append(before, ',')
			}
			before = strconv.AppendInt(before, int64(id), 10)
		}
		before = append(before, ']')
	case req.PromptText != "":
		prompt, err := json.Marshal(req.PromptText)
		if err != nil {
			return nil, err
		}
		before = append(append(before, `,"prompt":`...), prompt...)
	case req.PromptJSON != nil:
		before = append(before, `,"prompt":`...)
		body.prompt = req.PromptJSON
	}
	after := append([]byte{','}, tail[1:]...)
	if after, err = mergeExtraBody(after, req.ExtraBody); err != nil {
		return nil, err
	}
	if body.prompt == nil { // one buffer
		before, after = append(before, after...), nil
	}
	body.before, body.after = before, after
	return body, nil
}

// SentCompletionFields returns the JSON body req sends, without its prompt.
func SentCompletionFields(req CompletionRequest) (json.RawMessage, error) {
	req.PromptTokenIDs, req.PromptText, req.PromptJSON = nil, "", nil
	body, err := encodeCompletionRequest(req)
	if err != nil {
		return nil, err
	}
	return body.before, nil
}

// EncodeChat renders req's JSON body as StreamChat sends it: a caller that encodes ahead of
// the send time puts it in req.Body.
func EncodeChat(req ChatRequest) (*Body, error) {
	body, err := encodeChatRequest(req)
	if err != nil {
		return nil, err
	}
	return RawBody(body), nil
}

// encodeChatRequest renders req's JSON body: kvbench's fields, then ExtraBody's members.
func encodeChatRequest(req ChatRequest) ([]byte, error) {
	body, err := json.Marshal(chatBody{
		Model:         req.Model,
		Messages:      req.Messages,
		MaxTokens:     req.MaxTokens,
		Temperature:   req.Temperature,
		Stream:        true,
		StreamOptions: streamOptions{IncludeUsage: true},
		IgnoreEOS:     req.IgnoreEOS,
		MinTokens:     req.MinTokens,

		ReturnCachedTokensDetails: req.CachedTokensDetails,
	})
	if err != nil {
		return nil, err
	}
	return mergeExtraBody(body, req.ExtraBody)
}

// mergeExtraBody appends extra's members to the JSON object body; a key kvbench sets itself
// is an error.
func mergeExtraBody(body []byte, extra map[string]any) ([]byte, error) {
	if len(extra) == 0 {
		return body, nil
	}
	for k := range extra {
		if slices.Contains(ReservedBodyKeys, k) {
			return nil, fmt.Errorf("extra_body may not set %q: kvbench sets it", k)
		}
	}
	members, err := json.Marshal(extra)
	if err != nil {
		return nil, fmt.Errorf("extra_body: %w", err)
	}
	body = append(body[:len(body)-1], ',')
	return append(body, members[1:]...), nil
}

// SentFields returns the JSON body req sends, without its messages: what a record keeps
// to say what each request asked of the server.
func SentFields(req ChatRequest) (json.RawMessage, error) {
	req.Messages = nil
	return encodeChatRequest(req)
}

// Event reading: a stream is read into one buffer and split into data lines by hand, so a
// token costs a read and a scan, no allocation, and the reader knows which socket read
// brought each event (events that share one have no measurable gap between them).

const (
	// eventBufferBytes holds a burst of chunks (vLLM's are about 300 bytes), and a stream
	// holds it as long as it is open, so that 2,000 slow streams cost 8 MB: a longer line
	// grows it, and a longer burst takes more reads of the body, which the socket's own
	// buffer hands up as one arrival (arrival.go).
	eventBufferBytes = 4 << 10
	maxEventBytes    = 64 << 20 // a longer line is not a chunk kvbench can use
)

var eventBuffers = sync.Pool{New: func() any { b := make([]byte, eventBufferBytes); return &b }}

var (
	dataPrefix       = []byte("data:")
	errEventTooLarge = errors.New("stream line longer than 64 MiB")
)

// eventReader splits an SSE body into the payloads of its data lines. Other lines (blank
// separators, comments, event: and id: fields) are skipped, as OpenAI clients do.
type eventReader struct {
	body io.Reader
	// conn stamps the socket reads under body; nil when it is unknown (a caller's own
	// RoundTripper), and then each read of the body is an arrival of its own.
	conn       *arrivalConn
	stamp      int64 // conn's stamp at the latest read of the body
	pooled     *[]byte
	buf        []byte
	start, end int   // buf[start:end] holds bytes not yet split into lines
	scanned    int   // buf[start:scanned] holds no line break: next resumes its search there
	examined   int64 // bytes searched for line breaks, which a long line must not multiply
	maxLine    int   // the longest line taken, maxEventBytes but in tests
	reads      int   // arrivals that brought bytes; the current one's number tags its events
	done       bool  // [DONE] seen
	eof        bool
}

func newEventReader(body io.Reader, conn *arrivalConn) *eventReader {
	p := eventBuffers.Get().(*[]byte)
	return &eventReader{body: body, conn: conn, pooled: p, buf: *p, maxLine: maxEventBytes}
}

// release returns the buffer to the pool; payloads from next are invalid afterwards.
func (r *eventReader) release() {
	if r.pooled != nil && cap(r.buf) == eventBufferBytes {
		eventBuffers.Put(r.pooled)
	}
	r.pooled, r.buf = nil, nil
}

// read reads once more from the body and returns the time the bytes arrived: that of the
// latest socket read whose bytes the layers below had handed up, which is the same for
// bytes that came in one socket read and were handed up in pieces (TLS records, HTTP
// chunks). At the end of the body, an unterminated last line is completed so that next
// still returns it.
func (r *eventReader) read(dog *chunkWatchdog) (time.Time, error) {
	free, err := r.space()
	if err != nil {
		return time.Now(), err
	}
	n, err := r.body.Read(free)
	var now time.Time
	if n > 0 {
		r.end += n
		now = r.arrival()
		dog.touch(now)
	} else {
		now = time.Now()
	}
	if err == io.EOF {
		r.endOfBody()
	}
	return now, err
}

// arrival numbers and times the bytes a read of the body just brought: the socket read's
// stamp, or now where the socket is not known.
func (r *eventReader) arrival() time.Time {
	if r.conn == nil {
		r.reads++
		return time.Now()
	}
	stamp, at := r.conn.latest()
	if stamp != r.stamp || r.reads == 0 {
		r.stamp = stamp
		r.reads++
	}
	return at
}

// space moves the bytes not yet split to the buffer's start and returns its free part,
// growing the buffer when a line fills it.
func (r *eventReader) space() ([]byte, error) {
	if r.start > 0 {
		r.end = copy(r.buf, r.buf[r.start:r.end])
		r.scanned -= r.start
		r.start = 0
	}
	if r.end == len(r.buf) {
		if len(r.buf) >= r.maxLine {
			return nil, errEventTooLarge
		}
		grown := make([]byte, 2*len(r.buf))
		copy(grown, r.buf[:r.end])
		r.buf = grown
	}
	return r.buf[r.end:], nil
}

// endOfBody completes an unterminated last line, so that next still returns it.
func (r *eventReader) endOfBody() {
	r.eof = true
	if r.end > r.start && r.buf[r.end-1] != '\n' {
		r.buf = append(r.buf[:r.end], '\n')
		r.end++
	}
}

// next returns the payload of the next complete data line, "data:" and the spaces after
// it removed, or ok=false when no complete line is buffered. The payload aliases the
// buffer and is valid until the next read. Each byte is searched for a line break once,
// however many reads a long line takes.
func (r *eventReader) next() (payload []byte, ok bool) {
	for {
		from := max(r.start, r.scanned)
		i := bytes.IndexByte(r.buf[from:r.end], '\n')
		if i < 0 {
			r.examined += int64(r.end - from)
			r.scanned = r.end
			return nil, false
		}
		r.examined += int64(i + 1)
		line := bytes.TrimSpace(r.buf[r.start : from+i])
		r.start = from + i + 1
		r.scanned = r.start
		if bytes.HasPrefix(line, dataPrefix) {
			return bytes.TrimLeft(line[len(dataPrefix):], " \t"), true
		}
	}
}

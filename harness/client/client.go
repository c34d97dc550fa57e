// Package client talks to an OpenAI-compatible LLM server (vLLM first): it streams chat
// completions and completions (token-id or text prompts) and times them as docs/domain.md
// defines (time to first output, to first visible token, end to end, decode and effective
// prefill rates), and it calls the
// server's /tokenize, /v1/models, /version and /health endpoints for preflight checks and
// token targeting.
//
// A failed chat request is data, not an abort: StreamChat always returns a Result, and its
// Error, ErrorKind and HTTPStatus fields say what went wrong. The API key never appears in
// any error text or result field (see Redact), nor do credentials in a URL.
package client

import (
	"bytes"
	"cmp"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/prompts"
)

// DefaultProgressInterval is how often, at most, StreamChat reports decode progress.
const DefaultProgressInterval = 100 * time.Millisecond

// Default bounds of the waits on a server (see Config).
const (
	DefaultCallTimeout   = 30 * time.Second
	DefaultHeaderTimeout = 60 * time.Second
	DefaultChunkTimeout  = 2 * time.Minute
)

// AnswerCapBytes bounds the visible answer text kept in a Result.
const AnswerCapBytes = 4096

// Bounds of the output a Result keeps when ChatRequest.KeepOutput asks for it.
const (
	OutputTextCapBytes = 64 << 10
	OutputTokenIDsCap  = 1 << 16
)

// Config configures a Client.
type Config struct {
	// BaseURL is the OpenAI API base, e.g. "http://127.0.0.1:8000/v1". Server-root
	// endpoints (/tokenize, /version, /health) live at BaseURL without its trailing /v1.
	BaseURL string
	// APIKey is sent as a bearer token when not empty, and redacted from all errors.
	APIKey string
	// HTTPClient defaults to a client without an overall timeout, since streams are long;
	// every wait is bounded by the timeouts below, ChatRequest.Timeout and the context.
	// The client uses a copy whose *http.Transport (nil: the default one) dials connections
	// that time each socket read and speaks HTTP/1.1 only (see arrival.go); another
	// RoundTripper is used as it is, and its streams are timed per read of the body, which
	// over HTTPS is per TLS record.
	HTTPClient *http.Client
	// CallTimeout bounds each call to /v1/models, /version and /health, from connecting to
	// the last byte of the answer; 0 means DefaultCallTimeout.
	CallTimeout time.Duration
	// TokenizePath is where the tokenize endpoint is under the server root; "" means
	// "/tokenize" (a tokenizer sidecar may serve vLLM's dialect elsewhere).
	TokenizePath string
	// TokenizeTimeout bounds each /tokenize call, which takes long for a huge prompt on a
	// busy server; 0 means CallTimeout.
	TokenizeTimeout time.Duration
	// HeaderTimeout bounds the wait for a chat stream's response headers, which servers send
	// before prefilling; 0 means DefaultHeaderTimeout.
	HeaderTimeout time.Duration
	// ChunkTimeout bounds the silence between two reads of a chat stream once its first
	// bytes arrived; the prefill before them is bounded by ChatRequest.Timeout alone, so a
	// long prefill is never cut short. 0 means DefaultChunkTimeout.
	ChunkTimeout time.Duration
	// ProgressInterval throttles decode progress callbacks; 0 means DefaultProgressInterval.
	ProgressInterval time.Duration
}

// Client streams chat completions and calls a server's helper endpoints. It is safe for
// concurrent use.
type Client struct {
	baseURL          string
	rootURL          string
	apiKey           string
	httpClient       *http.Client
	chat             streamEndpoint
	completions      streamEndpoint
	chatHeader       http.Header
	progressInterval time.Duration
	callTimeout      time.Duration
	tokenizeTimeout  time.Duration
	tokenizePath     string
	headerTimeout    time.Duration
	chunkTimeout     time.Duration
}

// New returns a Client for cfg.
func New(cfg Config) *Client {
	httpClient := &http.Client{Transport: stampingTransport(pooledTransport())}
	if cfg.HTTPClient != nil {
		httpClient = stampingClient(cfg.HTTPClient)
	}
	// A redirect would send the prompts (and, to another host, not the key) elsewhere.
	httpClient = redact.NoRedirects(httpClient)
	base := strings.TrimRight(cfg.BaseURL, "/")
	header := http.Header{
		"Content-Type": {"application/json"},
		"Accept":       {"text/event-stream"},
		// An explicit identity keeps net/http from asking for gzip: a compressed stream
		// is timed by when the server's compressor flushes, not by its tokens.
		"Accept-Encoding": {"identity"},
		"Cache-Control":   {"no-cache"},
		"User-Agent":      {"kvbench"},
	}
	if cfg.APIKey != "" {
		header.Set("Authorization", "Bearer "+cfg.APIKey)
	}
	interval := cfg.ProgressInterval
	if interval <= 0 {
		interval = DefaultProgressInterval
	}
	c := &Client{
		baseURL:          base,
		rootURL:          RootURL(base),
		apiKey:           cfg.APIKey,
		httpClient:       httpClient,
		chat:             newStreamEndpoint(base, "/chat/completions"),
		completions:      newStreamEndpoint(base, "/completions"),
		chatHeader:       header,
		progressInterval: interval,
		callTimeout:      orDefault(cfg.CallTimeout, DefaultCallTimeout),
		headerTimeout:    orDefault(cfg.HeaderTimeout, DefaultHeaderTimeout),
		chunkTimeout:     orDefault(cfg.ChunkTimeout, DefaultChunkTimeout),
	}
	c.tokenizeTimeout = orDefault(cfg.TokenizeTimeout, c.callTimeout)
	c.tokenizePath = cmp.Or(cfg.TokenizePath, "/tokenize")
	return c
}

// pooledTransport keeps an idle connection per stream up to the largest concurrency a
// scenario allows: the default keeps two per host, and at 64 streams every other request
// would dial a new connection.
func pooledTransport() *http.Transport {
	tr := http.DefaultTransport.(*http.Transport).Clone()
	tr.MaxIdleConns = 0
	tr.MaxIdleConnsPerHost = 4096
	return tr
}

// streamEndpoint is a streaming route: its URL and the prefix of its errors, "post <redacted
// URL>".
type streamEndpoint struct{ url, where string }

func newStreamEndpoint(base, path string) streamEndpoint {
	return streamEndpoint{url: base + path, where: "post " + redact.URL(base) + path}
}

func orDefault(d, def time.Duration) time.Duration {
	if d > 0 {
		return d
	}
	return def
}

// BaseURL returns the OpenAI API base the client sends chat requests to.
func (c *Client) BaseURL() string { return c.baseURL }

// RootURL returns the server root: the base URL without a trailing /v1.
func (c *Client) RootURL() string { return c.rootURL }

// RootURL strips a trailing /v1 from an OpenAI base URL: vLLM serves /metrics, /tokenize
// and /health at the root.
func RootURL(endpoint string) string {
	return strings.TrimSuffix(strings.TrimSuffix(endpoint, "/"), "/v1")
}

// ChatRequest is one streamed chat completion.
type ChatRequest struct {
	Model    string
	Messages []prompts.Message
	// MaxTokens bounds generated tokens, reasoning included; 0 leaves it to the server.
	MaxTokens int
	// Temperature 0 means greedy and is sent as 0: vLLM, SGLang, TensorRT-LLM and llama.cpp
	// all decode greedily at 0 (llama.cpp only at <= 0: a tiny positive value would sample).
	Temperature float32
	// IgnoreEOS asks the server to generate exactly MaxTokens tokens, stop tokens or not
	// (vLLM, SGLang and the simulators honour it); false leaves the field out.
	IgnoreEOS bool
	// MinTokens asks for at least this many tokens before a stop token ends the output; 0
	// leaves the field out.
	MinTokens int
	// ExtraBody members are merged into the JSON body as they are; a key kvbench sets
	// itself (ReservedBodyKeys) makes the request invalid.
	ExtraBody map[string]any
	// Timeout bounds the whole request, stream included; 0 means only ctx bounds it.
	Timeout time.Duration
	// CachedTokensDetails sends SGLang's "return_cached_tokens_details": true, which makes
	// the server report the request's cached tokens per tier (Result.CachedTokensDetails).
	CachedTokensDetails bool
	// Body, when set, is the request as EncodeChat rendered it, sent as it is, and Messages
	// may be left empty (CompletionRequest.Body).
	Body *Body
	// KeepOutput keeps what comparing two outputs needs: the whole generated text
	// (reasoning and content, in order) and the generated token ids the chunks carry
	// (choices[].token_ids, which vLLM sends when the body asks with return_token_ids), each
	// up to its cap. Off, a Result keeps only the visible answer's first AnswerCapBytes.
	KeepOutput bool
}

// CompletionRequest is one streamed completion (POST /v1/completions): a prompt sent as it
// is, without a chat template. Exactly one of PromptTokenIDs, PromptText and PromptJSON is
// set; token ids reach the server's prefix cache exactly as sent (docs/traces.md,
// "Block-exact prompts"). The other fields are ChatRequest's.
type CompletionRequest struct {
	Model          string
	PromptTokenIDs []int32
	PromptText     string
	// PromptJSON is a prompt that writes its JSON value (token ids or text) as the body is
	// sent: a block-exact prompt held by its block list (prompts.StreamedPrompt).
	PromptJSON JSONPrompt

	MaxTokens           int
	Temperature         float32
	IgnoreEOS           bool
	MinTokens           int
	ExtraBody           map[string]any
	Timeout             time.Duration
	CachedTokensDetails bool
	// Body, when set, is the request as EncodeCompletion rendered it, sent as it is, and
	// the prompt fields may be left empty: a caller encodes ahead, so that no encoding
	// delays a request due now, and drops the prompt it no longer needs.
	Body *Body
}

// TierTokens is SGLang's sglext.cached_tokens_details: the record's type.
type TierTokens = record.TierTokens

// Phase names the stage of a request in a Progress report.
const (
	PhasePrefill = "prefill" // sent, nothing generated yet
	PhaseDecode  = "decode"  // first output seen
	PhaseDone    = "done"    // stream ended, successfully or not
)

// Progress is a live report on one streaming request.
type Progress struct {
	Phase string
	// Tokens counts generated chunks so far (about one token each on vLLM).
	Tokens  int
	Elapsed time.Duration
}

// Error kinds recorded in Result.ErrorKind.
const (
	ErrorKindInvalidRequest = "invalid_request" // rejected before sending (caller mistake)
	ErrorKindUnreachable    = "unreachable"     // no connection: refused, DNS, dial timeout
	ErrorKindTransport      = "transport"       // connection made, no HTTP response
	ErrorKindHTTPStatus     = "http_status"     // non-2xx answer; see HTTPStatus
	ErrorKindServerError    = "server_error"    // an error event inside the stream
	ErrorKindStreamCut      = "stream_cut"      // stream ended or broke without [DONE]
	ErrorKindMalformedChunk = "malformed_chunk" // a data: line that is not a chunk
	ErrorKindCanceled       = "canceled"        // the caller's context was canceled
	ErrorKindTimeout        = "timeout"         // ChatRequest.Timeout, a header or chunk bound, or ctx deadline passed
)

// Output token sources recorded in Result.OutputTokensSource.
const (
	OutputTokensFromUsage         = "usage"
	OutputTokensFromCountedChunks = "counted_chunks"
)

// Result is a streamed request's measurements: the record's type, which Stream fills.
type Result = record.Result

// Spread summarizes measured durations in milliseconds: the record's type.
type Spread = record.Spread

// Causes set when a bound of a chat request expires.
var (
	errRequestTimeout = errors.New("request timeout")
	errHeaderTimeout  = errors.New("no response headers in time")
	errChunkTimeout   = errors.New("stream silent for too long")
)

// StreamChat sends req as a streamed chat completion and measures it. It never aborts on
// a failed request: every outcome, including a canceled ctx, an elapsed Timeout and an
// invalid request, is returned in the Result's ErrorKind, Error and HTTPStatus, so the
// caller records the result either way and checks ctx itself to decide whether to stop.
//
// progress, when not nil, is called from the calling goroutine: once when the request is
// sent (prefill), at the first output (decode), at most every ProgressInterval while
// decoding, and once at the end (done). Nothing calls it while the server is prefilling.
func (c *Client) StreamChat(ctx context.Context, req ChatRequest, progress func(Progress)) Result {
	start := time.Now()
	if req.Model == "" || (req.Body == nil && len(req.Messages) == 0) {
		return invalidRequest(start, req.Model, "chat request needs a model and at least one message")
	}
	body := req.Body
	if body == nil {
		var err error
		if body, err = EncodeChat(req); err != nil {
			return invalidRequest(start, req.Model, c.redact(fmt.Sprintf("%s: %v", c.chat.where, err)))
		}
	}
	return c.streamRequest(ctx, start, c.chat, req.Model, body, req.Timeout, req.KeepOutput, progress)
}

// StreamCompletion sends req as a streamed completion (POST /v1/completions, the prompt as
// token ids or text, no chat template) and measures it exactly as StreamChat does: the same
// stream reader, bounds, timings and failure kinds.
func (c *Client) StreamCompletion(ctx context.Context, req CompletionRequest, progress func(Progress)) Result {
	start := time.Now()
	if req.Model == "" || (req.Body == nil && len(req.PromptTokenIDs) == 0 && req.PromptText == "" && req.PromptJSON == nil) {
		return invalidRequest(start, req.Model, "completion request needs a model and a prompt")
	}
	body := req.Body
	if body == nil {
		var err error
		if body, err = encodeCompletionRequest(req); err != nil {
			return invalidRequest(start, req.Model, c.redact(fmt.Sprintf("%s: %v", c.completions.where, err)))
		}
	}
	return c.streamRequest(ctx, start, c.completions, req.Model, body, req.Timeout, false, progress)
}

// invalidRequest is the Result of a request refused before sending.
func invalidRequest(start time.Time, model, why string) Result {
	return Result{StartedAt: start.UTC(), Model: model, OutputTokensSource: OutputTokensFromCountedChunks,
		ErrorKind: ErrorKindInvalidRequest, Error: why}
}

// streamRequest posts body to the streaming route at and reads its stream into a Result,
// timed from start; keepOutput keeps the whole output (ChatRequest.KeepOutput).
func (c *Client) streamRequest(ctx context.Context, start time.Time, at streamEndpoint, model string, body *Body,
	timeout time.Duration, keepOutput bool, progress func(Progress)) Result {
	res := Result{StartedAt: start.UTC(), Model: model, OutputTokensSource: OutputTokensFromCountedChunks}
	if progress == nil {
		progress = func(Progress) {}
	}
	reqCtx, cancel := ctx, context.CancelFunc(func() {})
	if timeout > 0 {
		reqCtx, cancel = context.WithTimeoutCause(ctx, timeout, errRequestTimeout)
	}
	defer cancel()
	reqCtx, cancelCause := context.WithCancelCause(reqCtx)
	defer cancelCause(nil)
	acc := streamAccumulator{start: start, res: &res, progress: progress, interval: c.progressInterval, keepOutput: keepOutput}
	progress(Progress{Phase: PhasePrefill})
	headers := time.AfterFunc(c.headerTimeout, func() {
		cancelCause(fmt.Errorf("%w (%s)", errHeaderTimeout, c.headerTimeout))
	})
	defer headers.Stop()
	c.stream(ctx, reqCtx, cancelCause, headers, &acc, at, body, progress)
	return res
}

// stream sends a streaming request and reads its stream into acc.
func (c *Client) stream(ctx, reqCtx context.Context, cancelCause context.CancelCauseFunc, headers *time.Timer,
	acc *streamAccumulator, at streamEndpoint, body *Body, progress func(Progress)) {
	res, where := acc.res, at.where
	var conn net.Conn // the connection the request went on, whose reads are timed
	httpReq, err := http.NewRequestWithContext(traceConn(reqCtx, &conn), http.MethodPost, at.url, body.NewReader())
	if err != nil {
		res.ErrorKind = ErrorKindInvalidRequest
		res.Error = c.redact(fmt.Sprintf("%s: %v", where, err))
		acc.finish()
		progress(doneProgress(res))
		return
	}
	// The body is written as it is read: its length is known, and a retry reads it afresh.
	httpReq.ContentLength = body.Len()
	httpReq.GetBody = func() (io.ReadCloser, error) { return io.NopCloser(body.NewReader()), nil }
	httpReq.Header = c.chatHeader.Clone()
	resp, err := c.httpClient.Do(httpReq)
	headers.Stop()
	if err != nil {
		c.recordOpenError(ctx, reqCtx, res, where, err)
		acc.finish()
		progress(doneProgress(res))
		return
	}
	defer resp.Body.Close()
	res.HTTPStatus = resp.StatusCode
	dog := &chunkWatchdog{timeout: c.chunkTimeout, cancel: cancelCause, base: acc.start}
	defer dog.stop()
	if resp.StatusCode < 200 || resp.StatusCode >= 300 {
		errBody, _ := io.ReadAll(io.LimitReader(watchedReader{resp.Body, dog}, maxErrorBody))
		msg := errorBodyMessage(errBody)
		if enc := contentEncoding(resp.Header); enc != "" {
			msg = fmt.Sprintf("a body in content encoding %q", snippet([]byte(enc)))
		}
		res.ErrorKind = ErrorKindHTTPStatus
		res.Error = c.redact(fmt.Sprintf("%s: http status %s: %s", where, resp.Status, msg))
		acc.finish()
		progress(doneProgress(res))
		return
	}
	if enc := contentEncoding(resp.Header); enc != "" {
		res.ErrorKind = ErrorKindStreamCut
		res.Error = c.redact(fmt.Sprintf("%s: stream unreadable: content encoding %q, which kvbench does not ask for (it asks for identity)",
			where, snippet([]byte(enc))))
		acc.finish()
		progress(doneProgress(res))
		return
	}

	sse := newEventReader(resp.Body, arrivalsOf(conn))
	defer sse.release()
	for {
		now, err := sse.read(dog)
		if c.handleEvents(sse, acc, now, where) {
			break
		}
		if err != nil {
			if errors.Is(err, io.EOF) {
				err = io.ErrUnexpectedEOF // the body ended before [DONE]
			}
			c.recordStreamError(ctx, reqCtx, res, where, acc.chunks, err, resp.Header.Get("Content-Type"))
			break
		}
	}
	acc.finish()
	progress(doneProgress(res))
	if sse.done && !sse.eof {
		drainAfterDone(resp.Body, cancelCause)
	}
}

// handleEvents takes every complete data line buffered in ev, read at now; it reports true
// when the stream is over: [DONE], an error event or a malformed chunk.
func (c *Client) handleEvents(ev *eventReader, acc *streamAccumulator, now time.Time, where string) bool {
	res := acc.res
	for {
		data, ok := ev.next()
		if !ok {
			return false
		}
		switch {
		case string(data) == "[DONE]":
			ev.done = true
			return true
		case bytes.HasPrefix(data, errorEventPrefix):
			res.ErrorKind = ErrorKindServerError
			res.Error = c.redact(fmt.Sprintf("%s: error in stream: %s", where, errorBodyMessage(data)))
			return true
		default:
			if err := acc.add(data, now, ev.reads); err != nil {
				res.ErrorKind = ErrorKindMalformedChunk
				res.Error = c.redact(fmt.Sprintf("%s: malformed stream chunk %q: %v", where, snippet(data), err))
				return true
			}
			if acc.serverError != "" {
				res.ErrorKind = ErrorKindServerError
				res.Error = c.redact(fmt.Sprintf("%s: error in stream: %s", where, acc.serverError))
				return true
			}
		}
	}
}

// contentEncoding returns a response's Content-Encoding unless it is none or identity.
func contentEncoding(h http.Header) string {
	enc := strings.TrimSpace(strings.Join(h.Values("Content-Encoding"), ","))
	if strings.EqualFold(enc, "identity") {
		return ""
	}
	return enc
}

// doneProgress is the last report on a request, sent once its Result is final.
func doneProgress(res *Result) Progress {
	return Progress{Phase: PhaseDone, Tokens: res.GeneratedChunks, Elapsed: time.Duration(res.StreamMS * float64(time.Millisecond))}
}

// maxErrorBody bounds the body of a non-2xx answer kept for its error message.
const maxErrorBody = 1 << 20

// errorEventPrefix starts an OpenAI error sent as a stream event in place of a chunk.
var errorEventPrefix = []byte(`{"error":`)

// recordOpenError classifies a failure before the response headers arrived.
func (c *Client) recordOpenError(ctx, reqCtx context.Context, res *Result, where string, err error) {
	switch {
	case ctxKind(ctx, reqCtx) != "":
		res.ErrorKind = ctxKind(ctx, reqCtx)
		res.Error = c.redact(fmt.Sprintf("%s: %s before a response: %v", where, res.ErrorKind, context.Cause(reqCtx)))
	case isDialError(err):
		res.ErrorKind = ErrorKindUnreachable
		res.Error = c.redact(fmt.Sprintf("%s: unreachable: %v", where, err))
	default:
		res.ErrorKind = ErrorKindTransport
		res.Error = c.redact(fmt.Sprintf("%s: no response: %v", where, err))
	}
}

// recordStreamError classifies a failure after the response headers arrived.
func (c *Client) recordStreamError(ctx, reqCtx context.Context, res *Result, where string, chunks int, err error, contentType string) {
	switch {
	case ctxKind(ctx, reqCtx) != "":
		res.ErrorKind = ctxKind(ctx, reqCtx)
		res.Error = c.redact(fmt.Sprintf("%s: %s while streaming: %v", where, res.ErrorKind, context.Cause(reqCtx)))
	case errors.Is(err, io.ErrUnexpectedEOF):
		res.ErrorKind = ErrorKindStreamCut
		res.Error = c.redact(fmt.Sprintf("%s: stream ended without [DONE] after %d chunks%s", where, chunks, contentTypeNote(contentType)))
	default:
		res.ErrorKind = ErrorKindStreamCut
		res.Error = c.redact(fmt.Sprintf("%s: stream broke: %v", where, err))
	}
}

// contentTypeNote names a content type that is not an event stream, which explains a
// stream without chunks (an HTML page from a proxy, a non-streaming JSON answer).
func contentTypeNote(contentType string) string {
	if strings.HasPrefix(contentType, "text/event-stream") {
		return ""
	}
	return fmt.Sprintf(" (content type %q, not text/event-stream)", contentType)
}

// ctxKind says whether the request ended because of the caller's context or the timeout.
func ctxKind(ctx, reqCtx context.Context) string {
	switch {
	case reqCtx.Err() == nil:
		return ""
	case errors.Is(context.Cause(reqCtx), errRequestTimeout), errors.Is(context.Cause(reqCtx), errHeaderTimeout),
		errors.Is(context.Cause(reqCtx), errChunkTimeout), errors.Is(ctx.Err(), context.DeadlineExceeded):
		return ErrorKindTimeout
	default:
		return ErrorKindCanceled
	}
}

// redact removes the API key and every URL's credentials (Go's errors quote request URLs).
func (c *Client) redact(s string) string { return redact.Text(Redact(s, c.apiKey)) }

package trace

import (
	"bufio"
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"slices"
	"strconv"
	"time"

	"github.com/anvil-serving/kvbench/harness/units"
)

// DefaultBlockTokens is the block size of the public Mooncake traces: one hash id per 512
// prompt tokens.
const DefaultBlockTokens = 512

// MaxLineBytes bounds one line of a trace file: a 1M-token request has about 2,000 hash
// ids (about 16 KB), so a longer line is a file that is not a trace.
const MaxLineBytes = 16 << 20

// MaxLengthTokens bounds a line's input_length and output_length: far above any prompt, and
// small enough for the sums of a window's lengths to stay exact.
const MaxLengthTokens = 1 << 40

// Request is one line of a trace.
type Request struct {
	// Line is the request's 1-based line in its file (for generated traces, its ordinal).
	// It is unique within a file, which makes it the key of the request's private blocks.
	Line int
	// Timestamp is the arrival time since the trace's start (the timestamp field, in ms).
	Timestamp time.Duration
	// InputLength is the prompt length in tokens, at least 1.
	InputLength int
	// OutputLength is the number of tokens the request generated, at least 0.
	OutputLength int
	// HashIDs names the prompt's blocks in order: HashIDs[i] covers tokens
	// [i*block_tokens, (i+1)*block_tokens). A request may name fewer blocks than its length
	// spans: the blocks it leaves unnamed are private to it (never shared with another
	// request). A Reader reuses the slice at its next call.
	HashIDs []uint64
	// Text is the prompt as the trace wrote it (AIPerf's text_input): a replay sends it as
	// given, to the completions endpoint, instead of blocks built from HashIDs. "" for a
	// trace of lengths and ids.
	Text string
	// Messages is the chat as the trace wrote it (AIPerf's messages): a replay sends it as
	// given, to the chat endpoint. nil for any other line.
	Messages []Message
	// Session is a hash of the line's session_id (AIPerf), never 0; 0 for a line without
	// one. A shard keeps a session's turns together (Shard).
	Session uint64
}

// Message is one message of a trace line's chat: a role and its text.
type Message struct {
	Role    string `json:"role"`
	Content string `json:"content"`
}

// Blocks is how many blocks of blockTokens the request's prompt spans, the partial last
// one included: the most hash ids it may name.
func (r *Request) Blocks(blockTokens int) int {
	return (r.InputLength + blockTokens - 1) / blockTokens
}

// AppendJSON appends the request as one Mooncake-format line, without the newline.
func (r *Request) AppendJSON(dst []byte) []byte {
	dst = append(dst, `{"timestamp": `...)
	if r.Timestamp%time.Millisecond == 0 {
		dst = strconv.AppendInt(dst, int64(r.Timestamp/time.Millisecond), 10)
	} else {
		dst = strconv.AppendFloat(dst, float64(r.Timestamp)/float64(time.Millisecond), 'f', -1, 64)
	}
	dst = append(dst, `, "input_length": `...)
	dst = strconv.AppendInt(dst, int64(r.InputLength), 10)
	dst = append(dst, `, "output_length": `...)
	dst = strconv.AppendInt(dst, int64(r.OutputLength), 10)
	dst = append(dst, `, "hash_ids": [`...)
	for i, id := range r.HashIDs {
		if i > 0 {
			dst = append(dst, ", "...)
		}
		dst = strconv.AppendUint(dst, id, 10)
	}
	return append(dst, "]}"...)
}

// Source hands out a trace's requests in order. Next fills req and returns io.EOF after the
// last one; req.HashIDs may be reused by the next call.
type Source interface {
	Next(req *Request) error
}

// ReadAll reads src to its end and returns every request, each with its own copy of its
// hash ids. It holds the whole trace in memory: for small traces and tests; a replay or an
// analysis streams with Next instead.
func ReadAll(src Source) ([]Request, error) {
	var out []Request
	for {
		var req Request
		err := src.Next(&req)
		if errors.Is(err, io.EOF) {
			return out, nil
		}
		if err != nil {
			return out, err
		}
		req.HashIDs = slices.Clone(req.HashIDs)
		out = append(out, req)
	}
}

// Errors a trace file can give; each comes wrapped in a *FormatError naming file and line.
var (
	ErrEmpty         = errors.New("empty trace: no requests")
	ErrNotJSON       = errors.New("not a JSON object")
	ErrMissingField  = errors.New("missing field")
	ErrBadValue      = errors.New("bad value")
	ErrNotMonotonic  = errors.New("timestamp goes back")
	ErrTooManyBlocks = errors.New("more hash ids than the input length spans")
	ErrLineTooLong   = errors.New("line too long")
	ErrCompressed    = errors.New("bad gzip stream")
	ErrNotCSV        = errors.New("not a CSV row")
)

// FormatError is a trace that breaks the format, at File:Line (Line 0: the file as a whole).
type FormatError struct {
	File string
	Line int
	Err  error
}

func (e *FormatError) Error() string {
	if e.Line == 0 {
		return fmt.Sprintf("%s: %v", e.File, e.Err)
	}
	return fmt.Sprintf("%s:%d: %v", e.File, e.Line, e.Err)
}

func (e *FormatError) Unwrap() error { return e.Err }

// Place is the trace's file and line at fault.
func (e *FormatError) Place() string {
	if e.Line == 0 {
		return e.File
	}
	return fmt.Sprintf("%s:%d", e.File, e.Line)
}

// Reader streams the requests of a Mooncake-format trace, checking each line: it must be a
// JSON object with a non-negative timestamp not before the previous line's, an input_length
// of at least 1, a non-negative output_length and hash_ids, a list of non-negative integers
// no longer than ceil(input_length/block_tokens). Blank lines are skipped; other fields are
// ignored. A trace without a request is an error (ErrEmpty).
type Reader struct {
	name        string
	in          *bufio.Reader
	format      Format // FormatMooncake or FormatBailian
	blockTokens int
	line        int
	requests    int
	last        time.Duration
	lastLine    int
	buf         []byte
	wire        wireRequest
	err         error
	info        Info
	seen        [numWireFields]bool
	// sessions is each session_id's last arrival, for a later turn's delay: it grows with
	// the sessions, not the lines.
	sessions map[string]time.Duration
}

var _ Source = (*Reader)(nil)

// NewReader reads a trace from in; name (a file name) is what errors cite.
func NewReader(in io.Reader, name string, blockTokens int) *Reader {
	if blockTokens <= 0 {
		blockTokens = DefaultBlockTokens
	}
	return newJSONReader(bufio.NewReaderSize(in, 256<<10), name, FormatMooncake, blockTokens)
}

func newJSONReader(in *bufio.Reader, name string, format Format, blockTokens int) *Reader {
	return &Reader{name: name, in: in, format: format, blockTokens: blockTokens, info: Info{Format: string(format)}}
}

// File is an open trace file.
type File struct {
	FormatReader
	f    *os.File
	stop func() bool // ends closing f when ctx is done
}

// Open opens the trace file at path for reading until ctx is done, its format told from its
// content (see OpenFormat).
func Open(ctx context.Context, path string, blockTokens int) (*File, error) {
	return OpenFormat(ctx, path, FormatAuto, blockTokens)
}

// OpenFormat opens the trace file at path, in format (FormatAuto: told from its content),
// for reading until ctx is done; blockTokens 0 is the format's block size. A file named on
// the command line may be a pipe, whose open waits for a writer and whose reads wait for
// data: ctx ends both waits (the open with ctx's cause, a read with an error once f is
// closed).
func OpenFormat(ctx context.Context, path string, format Format, blockTokens int) (*File, error) {
	type opened struct {
		f   *os.File
		err error
	}
	ch := make(chan opened, 1)
	go func() {
		f, err := os.Open(path)
		ch <- opened{f, err}
	}()
	var o opened
	select {
	case o = <-ch:
	case <-ctx.Done():
		go func() { // the open returns once a writer comes, or never: the process ends first
			if o := <-ch; o.f != nil {
				o.f.Close()
			}
		}()
		return nil, fmt.Errorf("open %s: %w", path, context.Cause(ctx))
	}
	if o.err != nil {
		return nil, explainMissing(path, o.err)
	}
	stop := context.AfterFunc(ctx, func() { o.f.Close() })
	r, err := NewFormatReader(o.f, path, format, blockTokens)
	if err != nil {
		if stop() {
			o.f.Close()
		}
		if ctx.Err() != nil {
			return nil, fmt.Errorf("%s: %w", path, context.Cause(ctx))
		}
		return nil, err
	}
	return &File{FormatReader: r, f: o.f, stop: stop}, nil
}

// Close closes the file.
func (f *File) Close() error {
	if !f.stop() {
		return nil // ctx closed it
	}
	return f.f.Close()
}

// Name is the name errors cite.
func (r *Reader) Name() string { return r.name }

// BlockTokens is the block size the reader checks hash ids against.
func (r *Reader) BlockTokens() int { return r.blockTokens }

// Info is what the reader has learned of its trace so far: its format and the fields its
// lines carried (complete once Next returned io.EOF).
func (r *Reader) Info() Info {
	info := r.info
	info.Fields = nil
	for i, seen := range r.seen {
		if seen && wireFormats[i]&formatBit(r.format) != 0 {
			info.Fields = append(info.Fields, wireNames[i])
		}
	}
	return info
}

// Next reads the next request into req. It returns io.EOF after the last request, and a
// *FormatError for a line that breaks the format (every later call returns it again).
func (r *Reader) Next(req *Request) error {
	if r.err != nil {
		return r.err
	}
	for {
		line, err := r.readLine()
		if err != nil {
			if errors.Is(err, io.EOF) && r.requests == 0 {
				err = &FormatError{File: r.name, Err: ErrEmpty}
			}
			r.err = err
			return err
		}
		if r.line == 1 {
			// A UTF-8 byte-order mark, which some editors write, is no part of the JSON.
			line = bytes.TrimPrefix(line, []byte("\xef\xbb\xbf"))
		}
		if len(bytes.TrimSpace(line)) == 0 {
			continue
		}
		if err := r.parse(line, req); err != nil {
			r.err = &FormatError{File: r.name, Line: r.line, Err: err}
			return r.err
		}
		r.requests++
		return nil
	}
}

// readLine returns the next line without its line ending, io.EOF at the end.
func (r *Reader) readLine() ([]byte, error) {
	r.buf = r.buf[:0]
	for {
		chunk, err := r.in.ReadSlice('\n')
		r.buf = append(r.buf, chunk...)
		if len(r.buf) > MaxLineBytes {
			return nil, &FormatError{File: r.name, Line: r.line + 1, Err: fmt.Errorf("%w: over %d MiB", ErrLineTooLong, MaxLineBytes>>20)}
		}
		switch {
		case err == nil:
			r.line++
			return bytes.TrimRight(r.buf, "\r\n"), nil
		case errors.Is(err, bufio.ErrBufferFull):
			continue
		case errors.Is(err, io.EOF):
			if len(r.buf) == 0 {
				return nil, io.EOF
			}
			r.line++
			return bytes.TrimRight(r.buf, "\r\n"), nil
		case errors.Is(err, ErrCompressed):
			return nil, &FormatError{File: r.name, Line: r.line + 1, Err: err}
		default:
			return nil, fmt.Errorf("%s: %w", r.name, err)
		}
	}
}

// wireRequest is a line as it is decoded: raw values, checked after decoding so each
// problem is named by its field. Mooncake's fields, AIPerf's extensions of them and
// Bailian's; wireNames lists them in this order.
type wireRequest struct {
	Timestamp    rawValue `json:"timestamp"`
	InputLength  rawValue `json:"input_length"`
	OutputLength rawValue `json:"output_length"`
	HashIDs      rawValue `json:"hash_ids"`
	SessionID    rawValue `json:"session_id"`
	Delay        rawValue `json:"delay"`
	TextInput    rawValue `json:"text_input"`
	Messages     rawValue `json:"messages"`
	ChatID       rawValue `json:"chat_id"`
	ParentChatID rawValue `json:"parent_chat_id"`
	Type         rawValue `json:"type"`
	Turn         rawValue `json:"turn"`
}

const numWireFields = 12

var wireNames = [numWireFields]string{"timestamp", "input_length", "output_length", "hash_ids", "session_id", "delay",
	"text_input", "messages", "chat_id", "parent_chat_id", "type", "turn"}

// wireFormats says which format each wire field belongs to (a Bailian line's session_id
// is no field of its format, so its records do not list it).
var wireFormats = [numWireFields]uint8{3, 3, 3, 3, 1, 1, 1, 1, 2, 2, 2, 2}

func formatBit(f Format) uint8 {
	if f == FormatBailian {
		return 2
	}
	return 1
}

func (w *wireRequest) values() [numWireFields]*rawValue {
	return [numWireFields]*rawValue{&w.Timestamp, &w.InputLength, &w.OutputLength, &w.HashIDs, &w.SessionID, &w.Delay,
		&w.TextInput, &w.Messages, &w.ChatID, &w.ParentChatID, &w.Type, &w.Turn}
}

// rawValue keeps a field's JSON text in a buffer reused from line to line.
type rawValue struct {
	set  bool
	text []byte
}

func (v *rawValue) UnmarshalJSON(data []byte) error {
	v.set = true
	v.text = append(v.text[:0], data...)
	return nil
}

func (r *Reader) parse(line []byte, req *Request) error {
	w := &r.wire
	values := w.values()
	for _, v := range values {
		v.set = false
	}
	if err := json.Unmarshal(line, w); err != nil {
		var syntax *json.SyntaxError
		if errors.As(err, &syntax) {
			return fmt.Errorf("%w: %v", ErrNotJSON, syntax)
		}
		return fmt.Errorf("%w: %s", ErrNotJSON, firstBytes(line))
	}
	for i, v := range values {
		if v.set && string(v.text) != "null" {
			r.seen[i] = true
		}
	}
	if r.format == FormatBailian && !present(&w.ChatID) {
		return fmt.Errorf("%w: chat_id (a Bailian trace's lines each name their chat)", ErrMissingField)
	}
	ts, err := r.arrival(w)
	if err != nil {
		return err
	}
	input, err := number(&w.InputLength, "input_length", true)
	if err != nil {
		return err
	}
	if input < 1 {
		return fmt.Errorf("%w: input_length %s: a prompt has at least 1 token", ErrBadValue, w.InputLength.text)
	}
	output, err := number(&w.OutputLength, "output_length", true)
	if err != nil {
		return err
	}
	req.Text, req.Messages = "", nil
	if present(&w.TextInput) {
		if err := json.Unmarshal(w.TextInput.text, &req.Text); err != nil || req.Text == "" {
			return fmt.Errorf("%w: text_input %s is not a non-empty string", ErrBadValue, firstBytes(w.TextInput.text))
		}
	}
	if present(&w.Messages) {
		if req.Text != "" {
			return fmt.Errorf("%w: text_input and messages: a line gives its prompt one way", ErrBadValue)
		}
		if req.Messages, err = parseMessages(w.Messages.text); err != nil {
			return err
		}
	}
	ids := req.HashIDs[:0]
	switch {
	case present(&w.HashIDs):
		if ids, err = parseHashIDs(ids, w.HashIDs.text); err != nil {
			return err
		}
		r.info.PrefixInformation = true
	case req.Text == "" && req.Messages == nil:
		return fmt.Errorf("%w: hash_ids", ErrMissingField)
	}
	req.HashIDs = ids
	req.Line = r.line
	req.Timestamp = ts
	req.InputLength = int(input)
	req.OutputLength = int(output)
	if r.requests > 0 && req.Timestamp < r.last {
		return fmt.Errorf("%w: %s ms is before line %d's %s ms (a trace is in arrival order)",
			ErrNotMonotonic, formatMillis(req.Timestamp), r.lastLine, formatMillis(r.last))
	}
	if most := req.Blocks(r.blockTokens); len(ids) > most {
		return fmt.Errorf("%w: %d hash ids for input_length %d, at most ceil(%d/%d) = %d (is the block size %d tokens?)",
			ErrTooManyBlocks, len(ids), req.InputLength, req.InputLength, r.blockTokens, most, r.blockTokens)
	}
	r.last, r.lastLine = req.Timestamp, r.line
	req.Session = 0
	if present(&w.SessionID) {
		req.Session = sessionHash(w.SessionID.text)
		if r.sessions == nil {
			r.sessions = map[string]time.Duration{}
		}
		r.sessions[string(w.SessionID.text)] = req.Timestamp
	}
	return nil
}

// sessionHash is FNV-1a of a session_id's JSON text, 1 where that is 0 (0 is no session).
func sessionHash(text []byte) uint64 {
	h := uint64(14695981039346656037)
	for _, c := range text {
		h = (h ^ uint64(c)) * 1099511628211
	}
	return max(h, 1)
}

// arrival is a line's arrival time: its timestamp (Bailian's in seconds, Mooncake's in
// milliseconds), or, for a later turn of an AIPerf session without one, the session's
// previous arrival plus its delay in milliseconds.
func (r *Reader) arrival(w *wireRequest) (time.Duration, error) {
	unit, field := float64(time.Millisecond), "timestamp"
	if r.format == FormatBailian {
		unit = float64(time.Second)
	}
	var base time.Duration
	v := &w.Timestamp
	if r.format == FormatMooncake && !present(v) && present(&w.Delay) {
		prev, ok := time.Duration(0), false
		if present(&w.SessionID) {
			prev, ok = r.sessions[string(w.SessionID.text)]
		}
		if !ok {
			return 0, fmt.Errorf("%w: timestamp (a delay counts from an earlier line of the same session_id)", ErrMissingField)
		}
		base, v, field = prev, &w.Delay, "delay"
	}
	x, err := number(v, field, false)
	if err != nil {
		return 0, err
	}
	if x*unit > float64(math.MaxInt64/2) {
		return 0, fmt.Errorf("%w: %s %s is beyond any trace", ErrBadValue, field, v.text)
	}
	return base + time.Duration(math.Round(x*unit)), nil
}

// parseMessages reads a line's messages: a non-empty list of {"role", "content"} objects
// with string values. Anything more (tool calls, content parts) is refused rather than
// dropped, so what is sent is what the trace wrote.
func parseMessages(text []byte) ([]Message, error) {
	dec := json.NewDecoder(bytes.NewReader(text))
	dec.DisallowUnknownFields()
	var msgs []Message
	if err := dec.Decode(&msgs); err != nil || len(msgs) == 0 {
		return nil, fmt.Errorf("%w: messages %s is not a non-empty list of {\"role\", \"content\"} strings (tool calls and content parts are not replayed)", ErrBadValue, firstBytes(text))
	}
	for i, m := range msgs {
		if m.Role == "" {
			return nil, fmt.Errorf("%w: messages[%d] has no role", ErrBadValue, i)
		}
	}
	return msgs, nil
}

// present reports whether a field was given, and not as null.
func present(v *rawValue) bool { return v.set && string(v.text) != "null" }

// number reads a present, non-negative JSON number; whole insists on an integer.
func number(v *rawValue, field string, whole bool) (float64, error) {
	if !v.set || string(v.text) == "null" {
		return 0, fmt.Errorf("%w: %s", ErrMissingField, field)
	}
	x, err := strconv.ParseFloat(string(v.text), 64)
	if err != nil || math.IsNaN(x) || math.IsInf(x, 0) {
		return 0, fmt.Errorf("%w: %s %s is not a number", ErrBadValue, field, firstBytes(v.text))
	}
	if x < 0 {
		return 0, fmt.Errorf("%w: %s %s is negative", ErrBadValue, field, v.text)
	}
	if whole && x != math.Trunc(x) {
		return 0, fmt.Errorf("%w: %s %s is not a whole number of tokens", ErrBadValue, field, v.text)
	}
	if whole && x > MaxLengthTokens {
		return 0, fmt.Errorf("%w: %s %s is above the most tokens a request may count (%d)", ErrBadValue, field, v.text, int64(MaxLengthTokens))
	}
	return x, nil
}

// parseHashIDs parses a JSON array of non-negative integers (already valid JSON).
func parseHashIDs(dst []uint64, text []byte) ([]uint64, error) {
	i := skipSpace(text, 0)
	if i >= len(text) || text[i] != '[' {
		return nil, fmt.Errorf("%w: hash_ids %s is not a list", ErrBadValue, firstBytes(text))
	}
	i = skipSpace(text, i+1)
	if i < len(text) && text[i] == ']' {
		return dst, nil
	}
	for n := 0; ; n++ {
		start := i
		var id uint64
		for i < len(text) && text[i] >= '0' && text[i] <= '9' {
			d := uint64(text[i] - '0')
			if id > (math.MaxUint64-d)/10 {
				return nil, fmt.Errorf("%w: hash_ids[%d] does not fit in 64 bits", ErrBadValue, n)
			}
			id = id*10 + d
			i++
		}
		end := i
		i = skipSpace(text, i)
		if end == start || i >= len(text) || text[i] != ',' && text[i] != ']' {
			return nil, fmt.Errorf("%w: hash_ids[%d] %s is not a non-negative integer", ErrBadValue, n, firstBytes(element(text, start)))
		}
		dst = append(dst, id)
		if text[i] == ']' {
			return dst, nil
		}
		i = skipSpace(text, i+1)
	}
}

func skipSpace(b []byte, i int) int {
	for i < len(b) && (b[i] == ' ' || b[i] == '\t' || b[i] == '\n' || b[i] == '\r') {
		i++
	}
	return i
}

// element returns the array element starting at i, up to the next comma or bracket.
func element(b []byte, i int) []byte {
	j := i
	for j < len(b) && b[j] != ',' && b[j] != ']' {
		j++
	}
	return bytes.TrimSpace(b[i:j])
}

// firstBytes quotes the start of b for an error message.
func firstBytes(b []byte) string {
	const most = 40
	if len(b) > most {
		return strconv.Quote(string(b[:most])) + "..."
	}
	return strconv.Quote(string(b))
}

func formatMillis(d time.Duration) string {
	return units.Exact(float64(d) / float64(time.Millisecond))
}

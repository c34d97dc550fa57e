// Package traceimport turns a user's own request log (JSONL of OpenAI requests) into a
// Mooncake-format trace that holds none of its text: each prompt is tokenized by the
// server's own tokenizer, its token ids cut into blocks, and each block named by a keyed
// hash chained to its prefix (HMAC-SHA256 under a random key that is never written), the
// hashes then numbered in order of first appearance. Equal ids mean equal prefixes; the
// ids say nothing else. The format and its rules: docs/traces.md, "Your own traffic".
package traceimport

import (
	"bufio"
	"bytes"
	"cmp"
	"context"
	"crypto/hmac"
	"crypto/rand"
	"crypto/sha256"
	"encoding/binary"
	"errors"
	"fmt"
	"hash"
	"io"
	"os"
	"slices"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/prompts"
)

// MaxLineBytes bounds one log line: a request of the longest contexts, as JSON.
const MaxLineBytes = 64 << 20

// KeyBytes is the size of the random key the block hashes are keyed with.
const KeyBytes = 32

// Tokenizer gives the token ids a server makes of a prompt; engine.Server is one.
type Tokenizer interface {
	// ChatTokenIDs renders msgs with model's chat template and the generation prompt, as the
	// server's chat endpoint does, and tokenizes the result.
	ChatTokenIDs(ctx context.Context, model string, msgs []prompts.Message) ([]int, error)
	// TextTokenIDs tokenizes a completions prompt, no template applied.
	TextTokenIDs(ctx context.Context, model, text string) ([]int, error)
}

// Options configures an import.
type Options struct {
	// BlockTokens is the trace's block size (trace.DefaultBlockTokens when 0): the server's
	// KV block size, or a multiple of it, makes the replay's blocks line up with its cache.
	BlockTokens int
	// Rate, when above 0, spaces the requests evenly at this many a second in the log's
	// order, logged timestamps or not; a log without timestamps needs it.
	Rate float64
	// Model, when set, is the model every prompt is tokenized for, instead of each line's.
	Model string
	// OutputTokens is the output length of a request whose line gives neither usage nor a
	// token limit.
	OutputTokens int
	// Concurrency is how many tokenize calls are in flight at once (1 when 0). The
	// Tokenizer must then be safe for concurrent use.
	Concurrency int
	// Key keys the block hashes; nil draws KeyBytes from crypto/rand. Tests set it.
	Key []byte
}

// Trace is an imported trace: its requests in arrival order, ids numbered in order of first
// appearance, and what the import found.
type Trace struct {
	Requests []trace.Request
	Report   Report
}

// ReportSchema names the JSON document `trace import --format json` prints.
const ReportSchema = "anvil-serving.kvbench-trace-import/v1"

// Report is what an import tells its user: how much of their traffic could be served from
// a prefix cache.
type Report struct {
	Log         string `json:"log"`
	Trace       string `json:"trace,omitempty"`
	TokenizedBy string `json:"tokenized_by,omitempty"`
	Requests    int    `json:"requests"`
	BlockTokens int    `json:"block_tokens"`
	// Arrivals is "logged" (the lines' timestamps, sorted) or "rate" (Rate, in log order).
	Arrivals        string  `json:"arrivals"`
	Rate            float64 `json:"rate,omitempty"`
	DurationSeconds float64 `json:"duration_seconds"`
	PromptTokens    int64   `json:"prompt_tokens"`
	DistinctBlocks  int64   `json:"distinct_blocks"`
	// SharingRequests counts the requests whose first whole block an earlier request had:
	// the ones an unbounded prefix cache serves at least one block of.
	SharingRequests int `json:"requests_sharing_a_prefix"`
	// UnboundedHitTokens and UnboundedHitRate are trace.Analysis's MaxHitTokens and
	// MaxHitRate of the imported trace: the most any prefix cache can serve of it.
	UnboundedHitTokens int64   `json:"unbounded_hit_tokens"`
	UnboundedHitRate   float64 `json:"unbounded_hit_rate"`
	// Where the output lengths came from: the response's usage, the request's
	// max_completion_tokens or max_tokens, or Options.OutputTokens.
	OutputFromUsage   int `json:"output_from_usage"`
	OutputFromLimit   int `json:"output_from_limit"`
	OutputFromDefault int `json:"output_from_default"`
	// Approximate counts the requests with tools, tool calls or non-text parts that the
	// tokenizer was not given: their input lengths fall short of the server's.
	Approximate int `json:"approximate_requests"`
	// TokenIDPrompts counts the completions whose prompt was logged as token ids.
	TokenIDPrompts int `json:"token_id_prompts"`
}

// ImportFile imports the log at path (see Import).
func ImportFile(ctx context.Context, path string, tok Tokenizer, opts Options) (*Trace, error) {
	f, err := os.Open(path)
	if err != nil {
		return nil, err
	}
	defer f.Close()
	return Import(ctx, f, path, tok, opts)
}

// Import reads a log of OpenAI requests from in, one JSON object a line (blank lines
// skipped): a request body or a Batch API line, see parseLine. name (a file name) is what
// errors cite: each names the line, and the import stops at the first.
func Import(ctx context.Context, in io.Reader, name string, tok Tokenizer, opts Options) (*Trace, error) {
	bt := opts.BlockTokens
	if bt <= 0 {
		bt = trace.DefaultBlockTokens
	}
	key := opts.Key
	if key == nil {
		key = make([]byte, KeyBytes)
		if _, err := rand.Read(key); err != nil {
			return nil, fmt.Errorf("drawing the hash key: %w", err)
		}
		defer clear(key) // it lives on in the HMAC state only, and dies with the import
	}
	im := &importer{tok: tok, opts: opts, bt: bt, conc: max(opts.Concurrency, 1), mac: hmac.New(sha256.New, key), seen: map[[16]byte]uint64{}}
	fail := func(line int, err error) error { return &trace.FormatError{File: name, Line: line, Err: err} }
	sc := bufio.NewScanner(in)
	sc.Buffer(make([]byte, 0, 64<<10), MaxLineBytes)
	// Lines are tokenized a batch at a time, Concurrency calls at once, and added in the
	// log's order: the first bad line in that order is the one reported.
	batch := make([]pending, 0, 4*im.conc)
	flush := func() error {
		im.tokenizeAll(ctx, batch)
		for i := range batch {
			p := &batch[i]
			if p.err == nil {
				p.err = im.add(p.l, p.ids)
			}
			if p.err != nil {
				if ctx.Err() != nil {
					return fmt.Errorf("%s:%d: %w", name, p.line, context.Cause(ctx))
				}
				return fail(p.line, p.err)
			}
		}
		clear(batch) // the lines' text goes with them
		batch = batch[:0]
		return nil
	}
	line := 0
	for sc.Scan() {
		line++
		b := sc.Bytes()
		if len(bytes.TrimSpace(b)) == 0 {
			continue
		}
		if err := ctx.Err(); err != nil {
			return nil, context.Cause(ctx)
		}
		l, err := parseLine(b)
		if err == nil {
			err = im.checkStamp(l)
		}
		batch = append(batch, pending{line: line, l: l, err: err})
		if err != nil || len(batch) == cap(batch) {
			if err := flush(); err != nil {
				return nil, err
			}
		}
	}
	if err := flush(); err != nil {
		return nil, err
	}
	if err := sc.Err(); err != nil {
		if errors.Is(err, bufio.ErrTooLong) {
			return nil, fail(line+1, fmt.Errorf("%w (over %d MiB)", trace.ErrLineTooLong, MaxLineBytes>>20))
		}
		return nil, fmt.Errorf("reading %s: %w", name, err)
	}
	if len(im.reqs) == 0 {
		return nil, &trace.FormatError{File: name, Err: errors.New("empty log: no requests")}
	}
	t, err := im.finish()
	if err != nil {
		return nil, err
	}
	t.Report.Log = name
	return t, nil
}

// importer holds what an import has read so far: the requests with provisional block ids
// (numbered in log order) and the hashes seen. No text, no token id.
type importer struct {
	tok   Tokenizer
	opts  Options
	bt    int
	conc  int
	mac   hash.Hash
	seen  map[[16]byte]uint64
	reqs  []trace.Request
	stamp string // the kind of timestamp the log's first line has
	rep   Report
	buf   []byte
}

// checkStamp holds every line to the first line's kind of timestamp, or to none with a rate.
func (im *importer) checkStamp(l logged) error {
	if im.opts.Rate > 0 {
		return nil
	}
	switch {
	case im.stamp == "" && l.stamp == "":
		return fmt.Errorf("%w: none here, and a log without timestamps needs --rate", ErrBadTimestamp)
	case im.stamp == "":
		im.stamp = l.stamp
	case l.stamp == "":
		return fmt.Errorf("%w: none here, where the log's first line has one", ErrBadTimestamp)
	case l.stamp != im.stamp:
		return fmt.Errorf("%w: a %s timestamp, where the log's first line has a %s one", ErrBadTimestamp, l.stamp, im.stamp)
	}
	return nil
}

// pending is a parsed line waiting for its tokens.
type pending struct {
	line int
	l    logged
	ids  []int
	err  error
}

// tokenizeAll tokenizes the batch's good lines, Concurrency at a time. A failure does not
// stop the others: each is bounded by the tokenizer's timeout, and an earlier line's own
// error must not read as an interrupt.
func (im *importer) tokenizeAll(ctx context.Context, batch []pending) {
	work := make(chan *pending)
	var wg sync.WaitGroup
	for range min(im.conc, len(batch)) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for p := range work {
				p.ids, p.err = im.tokens(ctx, p.l)
			}
		}()
	}
	for i := range batch {
		if batch[i].err == nil {
			work <- &batch[i]
		}
	}
	close(work)
	wg.Wait()
}

// model is the model a line's prompt is tokenized for.
func (im *importer) model(l logged) string {
	if im.opts.Model != "" {
		return im.opts.Model
	}
	return l.model
}

// add appends one tokenized request, in the log's order.
func (im *importer) add(l logged, ids []int) error {
	if len(ids) == 0 {
		return errors.New("the prompt tokenized to no tokens")
	}
	if len(ids) > trace.MaxLengthTokens {
		return fmt.Errorf("%w: %d prompt tokens", trace.ErrBadValue, len(ids))
	}
	req := trace.Request{Line: len(im.reqs) + 1, Timestamp: time.Duration(l.at), InputLength: len(ids), OutputLength: l.output}
	switch l.outputFrom {
	case "usage":
		im.rep.OutputFromUsage++
	case "limit":
		im.rep.OutputFromLimit++
	default:
		req.OutputLength = im.opts.OutputTokens
		im.rep.OutputFromDefault++
	}
	if l.approximate {
		im.rep.Approximate++
	}
	if l.ids != nil {
		im.rep.TokenIDPrompts++
	}
	req.HashIDs = im.blocks(im.model(l), ids)
	im.reqs = append(im.reqs, req)
	return nil
}

// tokens asks the tokenizer for a line's prompt tokens; safe for concurrent use.
func (im *importer) tokens(ctx context.Context, l logged) ([]int, error) {
	var ids []int
	var err error
	switch {
	case l.ids != nil:
		return l.ids, nil
	case l.chat != nil:
		ids, err = im.tok.ChatTokenIDs(ctx, im.model(l), l.chat)
	default:
		ids, err = im.tok.TextTokenIDs(ctx, im.model(l), l.text)
	}
	if err != nil {
		return nil, fmt.Errorf("tokenizing the prompt: %w", err)
	}
	return ids, nil
}

// blocks names each block of ids, the partial last one included, by its keyed hash chained
// to the blocks before it, and returns the provisional ids of those hashes. The chain starts
// from the model's name: the same tokens for another model are another cache's blocks.
func (im *importer) blocks(model string, ids []int) []uint64 {
	var prev [sha256.Size]byte
	im.mac.Reset()
	im.mac.Write([]byte(model))
	im.mac.Sum(prev[:0])
	out := make([]uint64, 0, (len(ids)+im.bt-1)/im.bt)
	for start := 0; start < len(ids); start += im.bt {
		block := ids[start:min(start+im.bt, len(ids))]
		im.buf = append(im.buf[:0], prev[:]...)
		for _, t := range block {
			im.buf = binary.LittleEndian.AppendUint64(im.buf, uint64(t))
		}
		im.mac.Reset()
		im.mac.Write(im.buf)
		im.mac.Sum(prev[:0])
		k := [16]byte(prev[:16])
		id, ok := im.seen[k]
		if !ok {
			id = uint64(len(im.seen))
			im.seen[k] = id
		}
		out = append(out, id)
	}
	return out
}

// finish orders the requests by arrival, numbers their blocks in order of first
// appearance, and computes the report from the trace as it will be written.
func (im *importer) finish() (*Trace, error) {
	reqs := im.reqs
	rep := im.rep
	rep.BlockTokens = im.bt
	if im.opts.Rate > 0 {
		rep.Arrivals, rep.Rate = "rate", im.opts.Rate
		for i := range reqs {
			reqs[i].Timestamp = time.Duration(float64(i) / im.opts.Rate * float64(time.Second))
		}
	} else {
		rep.Arrivals = "logged"
		slices.SortStableFunc(reqs, func(a, b trace.Request) int { return cmp.Compare(a.Timestamp, b.Timestamp) })
		origin := reqs[0].Timestamp
		for i := range reqs {
			reqs[i].Timestamp -= origin
			reqs[i].Timestamp = reqs[i].Timestamp.Round(time.Microsecond)
		}
	}
	renumber := make([]uint64, len(im.seen))
	for i := range renumber {
		renumber[i] = ^uint64(0)
	}
	next := uint64(0)
	for i := range reqs {
		r := &reqs[i]
		r.Line = i + 1
		if len(r.HashIDs) > 0 && renumber[r.HashIDs[0]] != ^uint64(0) && (r.InputLength-1)/im.bt >= 1 {
			rep.SharingRequests++
		}
		for j, id := range r.HashIDs {
			if renumber[id] == ^uint64(0) {
				renumber[id] = next
				next++
			}
			r.HashIDs[j] = renumber[id]
		}
	}
	im.seen = nil
	a, err := trace.Analyze(&sliceSource{reqs: reqs}, trace.Config{BlockTokens: im.bt})
	if err != nil {
		return nil, err
	}
	rep.Requests = a.Requests
	rep.PromptTokens, rep.DistinctBlocks = a.PromptTokens, a.DistinctBlocks
	rep.UnboundedHitTokens, rep.UnboundedHitRate = a.MaxHitTokens, a.MaxHitRate
	rep.DurationSeconds = reqs[len(reqs)-1].Timestamp.Seconds()
	return &Trace{Requests: reqs, Report: rep}, nil
}

// WriteJSONL writes the trace as Mooncake JSONL, one request a line.
func (t *Trace) WriteJSONL(w io.Writer) error {
	bw := bufio.NewWriterSize(w, 256<<10)
	var line []byte
	for i := range t.Requests {
		line = append(t.Requests[i].AppendJSON(line[:0]), '\n')
		if _, err := bw.Write(line); err != nil {
			return err
		}
	}
	return bw.Flush()
}

// sliceSource hands out requests from memory (trace.Source).
type sliceSource struct {
	reqs []trace.Request
	i    int
}

func (s *sliceSource) Next(req *trace.Request) error {
	if s.i == len(s.reqs) {
		return io.EOF
	}
	*req = s.reqs[s.i]
	s.i++
	return nil
}

package trace

import (
	"bufio"
	"bytes"
	"compress/gzip"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
)

// Format names a trace file's format (docs/traces.md, section 1).
type Format string

// The formats kvbench reads.
const (
	// FormatAuto tells the format from the file's content.
	FormatAuto Format = "auto"
	// FormatMooncake is the Mooncake team's JSONL, with AIPerf's extensions (session_id,
	// delay, text_input).
	FormatMooncake Format = "mooncake"
	// FormatBailian is Alibaba's Qwen Bailian usage traces: JSONL, timestamps in seconds,
	// salted hash ids of 16-token blocks.
	FormatBailian Format = "bailian"
	// FormatBurstGPT is the BurstGPT CSV: lengths and arrivals, no prefix structure.
	FormatBurstGPT Format = "burstgpt"
	// FormatAzure is the Azure LLM inference trace CSV: lengths and arrivals, no prefix
	// structure.
	FormatAzure Format = "azure"
)

// Formats are the formats a user may name, FormatAuto first.
var Formats = []Format{FormatAuto, FormatMooncake, FormatBailian, FormatBurstGPT, FormatAzure}

// BailianBlockTokens is the block size of the Bailian traces' hash ids.
const BailianBlockTokens = 16

// ParseFormat reads a format's name; "" is FormatAuto.
func ParseFormat(s string) (Format, error) {
	if s == "" {
		return FormatAuto, nil
	}
	for _, f := range Formats {
		if string(f) == s {
			return f, nil
		}
	}
	names := make([]string, len(Formats))
	for i, f := range Formats {
		names[i] = string(f)
	}
	return "", fmt.Errorf("%q is not a trace format (want %s)", s, strings.Join(names, ", "))
}

// Info is what a reader learned of its trace: the format, whether it was told from the
// content, whether the file was gzip-compressed, the format's fields its lines carried,
// whether any request names its blocks (prefix information), and the rows it skipped.
type Info = record.TraceFormat

// FormatReader is a trace reader of any format.
type FormatReader interface {
	Source
	// Name is the name errors cite.
	Name() string
	// BlockTokens is the block size of the trace's hash ids.
	BlockTokens() int
	// Info is what the reader has learned so far; complete once Next returned io.EOF.
	Info() Info
}

var (
	_ FormatReader = (*Reader)(nil)
	_ FormatReader = (*csvReader)(nil)
)

// NewFormatReader reads a trace in format from in; FormatAuto tells it from the content (a
// JSON line with a chat_id is Bailian's, any other JSON Mooncake's; a CSV header with
// "Request tokens" is BurstGPT's, with "ContextTokens" Azure's; anything else is read as
// Mooncake's, whose errors then say what is wrong). A gzip-compressed file is read through
// its decompression. blockTokens 0 is the format's block size (512, or Bailian's 16). name
// (a file name) is what errors cite.
func NewFormatReader(in io.Reader, name string, format Format, blockTokens int) (FormatReader, error) {
	if format == "" {
		format = FormatAuto
	}
	if _, err := ParseFormat(string(format)); err != nil {
		return nil, err
	}
	br := bufio.NewReaderSize(in, 256<<10)
	gz := false
	if magic, _ := br.Peek(2); bytes.Equal(magic, []byte{0x1f, 0x8b}) {
		zr, err := gzip.NewReader(br)
		if err != nil {
			return nil, &FormatError{File: name, Err: gzipError(err)}
		}
		br, gz = bufio.NewReaderSize(gzipReader{zr}, 256<<10), true
	}
	detected := format == FormatAuto
	if detected {
		format = sniff(br)
	}
	if format == FormatBailian {
		if blockTokens != 0 && blockTokens != BailianBlockTokens {
			return nil, fmt.Errorf("%s: a Bailian trace's hash ids name blocks of %d tokens, not %d (set block_tokens = %d, or --block-tokens %d)",
				name, BailianBlockTokens, blockTokens, BailianBlockTokens, BailianBlockTokens)
		}
		blockTokens = BailianBlockTokens
	}
	if blockTokens <= 0 {
		blockTokens = DefaultBlockTokens
	}
	var r FormatReader
	switch format {
	case FormatMooncake, FormatBailian:
		jr := newJSONReader(br, name, format, blockTokens)
		jr.info.Detected, jr.info.Gzip = detected, gz
		r = jr
	default:
		cr := newCSVReader(br, name, format, blockTokens)
		cr.info.Detected, cr.info.Gzip = detected, gz
		r = cr
	}
	return r, nil
}

// sniff tells a trace's format from its first non-blank line, FormatMooncake when it cannot.
func sniff(br *bufio.Reader) Format {
	line := firstLine(br)
	line = bytes.TrimSpace(bytes.TrimPrefix(line, []byte("\xef\xbb\xbf")))
	if bytes.HasPrefix(line, []byte("{")) {
		var keys map[string]json.RawMessage
		if json.Unmarshal(line, &keys) == nil {
			if _, ok := keys["chat_id"]; ok {
				return FormatBailian
			}
		}
		return FormatMooncake
	}
	header := string(line)
	switch {
	case strings.Contains(header, "Request tokens"):
		return FormatBurstGPT
	case strings.Contains(header, "ContextTokens"):
		return FormatAzure
	}
	return FormatMooncake
}

// firstLine peeks at br's first non-blank line without consuming it: as much as one read
// at a time brings (a pipe's writer may send a line and wait), up to the buffer's size.
func firstLine(br *bufio.Reader) []byte {
	for n := 1; ; {
		buf, err := br.Peek(n)
		rest := buf
		for len(rest) > 0 {
			i := bytes.IndexByte(rest, '\n')
			if i < 0 {
				break
			}
			if len(bytes.TrimSpace(rest[:i])) > 0 {
				return rest[:i]
			}
			rest = rest[i+1:]
		}
		if err != nil || len(buf) >= br.Size() {
			return rest
		}
		n = br.Buffered() + 1
	}
}

// gzipReader names a decompression error as one (ErrCompressed), so a reader cites the line
// it stopped at: a file cut short ends with io.ErrUnexpectedEOF, not io.EOF.
type gzipReader struct{ zr *gzip.Reader }

func (g gzipReader) Read(p []byte) (int, error) {
	n, err := g.zr.Read(p)
	if err != nil && !errors.Is(err, io.EOF) {
		err = gzipError(err)
	}
	return n, err
}

func gzipError(err error) error {
	if errors.Is(err, io.ErrUnexpectedEOF) || errors.Is(err, io.EOF) {
		return fmt.Errorf("%w: the compressed file is cut short", ErrCompressed)
	}
	return fmt.Errorf("%w: %v", ErrCompressed, err)
}

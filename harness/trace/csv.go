package trace

import (
	"bufio"
	"bytes"
	"encoding/csv"
	"errors"
	"fmt"
	"io"
	"math"
	"slices"
	"strings"
	"time"
)

// csvColumns are a CSV format's columns: the arrival, the prompt and the output lengths,
// which every file must have, and the others the format documents (recorded when present).
type csvColumns struct {
	arrival, input, output string
	others                 []string
}

var csvFormats = map[Format]csvColumns{
	// BurstGPT (github.com/HPMLL/BurstGPT, README): Timestamp in seconds.
	FormatBurstGPT: {"Timestamp", "Request tokens", "Response tokens", []string{"Model", "Total tokens", "Log Type"}},
	// Azure LLM inference traces (github.com/Azure/AzurePublicDataset,
	// AzureLLMInferenceDataset2023.md): TIMESTAMP a date and time.
	FormatAzure: {"TIMESTAMP", "ContextTokens", "GeneratedTokens", nil},
}

// azureLayouts are the date-times an Azure trace's TIMESTAMP is read in: its files write
// "2023-11-16 18:15:46.6805900", with or without a UTC offset.
var azureLayouts = []string{"2006-01-02 15:04:05.999999999", "2006-01-02 15:04:05.999999999Z07:00", time.RFC3339Nano}

// csvReader streams a CSV trace of lengths and arrivals (BurstGPT, Azure): its requests name
// no blocks, so each prompt's blocks are private and the trace has no prefix information.
// The header names the columns (in any order; other columns are ignored); each row must
// have the header's number of fields, lengths whole numbers >= 0 and arrivals in order.
type csvReader struct {
	name        string
	format      Format
	cols        csvColumns
	limit       *lineLimit
	cr          *csv.Reader
	blockTokens int
	idx         [3]int // arrival, input and output's field indexes
	header      bool
	requests    int
	line        int // the last row's
	origin      time.Time
	last        time.Duration
	lastLine    int
	info        Info
	err         error
	raw         [3]rawValue // the row's three fields, buffers reused from row to row
}

func newCSVReader(in *bufio.Reader, name string, format Format, blockTokens int) *csvReader {
	limit := &lineLimit{r: in}
	cr := csv.NewReader(limit)
	cr.ReuseRecord = true
	return &csvReader{name: name, format: format, cols: csvFormats[format], limit: limit, cr: cr, blockTokens: blockTokens,
		info: Info{Format: string(format)}}
}

func (r *csvReader) Name() string     { return r.name }
func (r *csvReader) BlockTokens() int { return r.blockTokens }
func (r *csvReader) Info() Info       { return r.info }

// Next reads the next row into req: io.EOF after the last, a *FormatError at a bad row
// (every later call returns it again).
func (r *csvReader) Next(req *Request) error {
	if r.err != nil {
		return r.err
	}
	for {
		row, err := r.cr.Read()
		if errors.Is(err, io.EOF) {
			err = nil
			if r.requests == 0 {
				err = &FormatError{File: r.name, Err: ErrEmpty}
			}
			if !r.header {
				err = &FormatError{File: r.name, Line: 1, Err: fmt.Errorf("%w: no header row (a %s trace starts with its column names)", ErrMissingField, r.format)}
			}
			if err == nil {
				err = io.EOF
			}
			r.err = err
			return err
		}
		if err != nil {
			r.err = r.readError(err)
			return r.err
		}
		r.line, _ = r.cr.FieldPos(0)
		if !r.header {
			if err := r.readHeader(row); err != nil {
				r.err = &FormatError{File: r.name, Line: r.line, Err: err}
				return r.err
			}
			continue
		}
		skip, err := r.parse(row, req)
		if err != nil {
			r.err = &FormatError{File: r.name, Line: r.line, Err: err}
			return r.err
		}
		if skip {
			r.info.SkippedRows++
			continue
		}
		r.requests++
		return nil
	}
}

// readError names where a read stopped: a row that is not CSV, a line too long, a gzip
// stream cut short.
func (r *csvReader) readError(err error) error {
	var pe *csv.ParseError
	switch {
	case errors.As(err, &pe):
		return &FormatError{File: r.name, Line: pe.StartLine, Err: fmt.Errorf("%w: %v", ErrNotCSV, pe.Err)}
	case errors.Is(err, ErrCompressed), errors.Is(err, ErrLineTooLong):
		return &FormatError{File: r.name, Line: r.line + 1, Err: err}
	}
	return fmt.Errorf("%s: %w", r.name, err)
}

func (r *csvReader) readHeader(row []string) error {
	r.header = true
	names := make([]string, len(row))
	for i, c := range row {
		if i == 0 {
			c = strings.TrimPrefix(c, "\ufeff")
		}
		names[i] = strings.TrimSpace(c)
	}
	for k, col := range []string{r.cols.arrival, r.cols.input, r.cols.output} {
		r.idx[k] = slices.Index(names, col)
		if r.idx[k] < 0 {
			return fmt.Errorf("%w: column %q (a %s trace's header names %s)", ErrMissingField, col, r.format, r.wantColumns())
		}
	}
	for _, n := range names {
		if n == r.cols.arrival || n == r.cols.input || n == r.cols.output || slices.Contains(r.cols.others, n) {
			r.info.Fields = append(r.info.Fields, n)
		}
	}
	return nil
}

func (r *csvReader) wantColumns() string {
	cols := append([]string{r.cols.arrival, r.cols.input, r.cols.output}, r.cols.others...)
	return `"` + strings.Join(cols, `", "`) + `"`
}

// parse reads one row; skip is a row the format marks as no request (BurstGPT logs a
// request that never reached the model with 0 request tokens).
func (r *csvReader) parse(row []string, req *Request) (skip bool, err error) {
	field := func(k int) *rawValue {
		v := &r.raw[k]
		v.set, v.text = true, append(v.text[:0], strings.TrimSpace(row[r.idx[k]])...)
		return v
	}
	ts, err := r.arrival(field(0))
	if err != nil {
		return false, err
	}
	input, err := number(field(1), r.cols.input, true)
	if err != nil {
		return false, err
	}
	output, err := number(field(2), r.cols.output, true)
	if err != nil {
		return false, err
	}
	if input < 1 {
		if r.format == FormatBurstGPT {
			return true, nil
		}
		return false, fmt.Errorf("%w: %s %s: a prompt has at least 1 token", ErrBadValue, r.cols.input, row[r.idx[1]])
	}
	if r.requests > 0 && ts < r.last {
		return false, fmt.Errorf("%w: %s %s is before line %d's (a trace is in arrival order)", ErrNotMonotonic, r.cols.arrival, row[r.idx[0]], r.lastLine)
	}
	*req = Request{Line: r.line, Timestamp: ts, InputLength: int(input), OutputLength: int(output), HashIDs: req.HashIDs[:0]}
	r.last, r.lastLine = ts, r.line
	return false, nil
}

// arrival reads a row's arrival: BurstGPT's seconds since the trace's start, Azure's date
// and time, counted from the first request's.
func (r *csvReader) arrival(v *rawValue) (time.Duration, error) {
	if r.format == FormatBurstGPT {
		s, err := number(v, r.cols.arrival, false)
		if err != nil {
			return 0, err
		}
		if s*float64(time.Second) > float64(math.MaxInt64/2) {
			return 0, fmt.Errorf("%w: %s %s is beyond any trace", ErrBadValue, r.cols.arrival, v.text)
		}
		return time.Duration(math.Round(s * float64(time.Second))), nil
	}
	text := string(v.text)
	var t time.Time
	var err error
	for _, layout := range azureLayouts {
		if t, err = time.Parse(layout, text); err == nil {
			break
		}
	}
	if err != nil {
		return 0, fmt.Errorf("%w: %s %s is not a date and time such as 2023-11-16 18:15:46.6805900", ErrBadValue, r.cols.arrival, firstBytes(v.text))
	}
	if r.requests == 0 {
		r.origin = t
	}
	d := t.Sub(r.origin)
	if d < 0 || d >= math.MaxInt64/2 {
		return 0, fmt.Errorf("%w: %s %s is before line %d's (a trace is in arrival order)", ErrNotMonotonic, r.cols.arrival, text, r.lastLine)
	}
	return d, nil
}

// lineLimit fails a read once a line runs past MaxLineBytes, so a file that is not a trace
// cannot make the CSV reader hold it whole.
type lineLimit struct {
	r   io.Reader
	run int // bytes since the last newline
}

func (l *lineLimit) Read(p []byte) (int, error) {
	n, err := l.r.Read(p)
	chunk := p[:n]
	if i := bytes.IndexByte(chunk, '\n'); i >= 0 && l.run+i > MaxLineBytes {
		l.run += i
	} else if i := bytes.LastIndexByte(chunk, '\n'); i >= 0 {
		l.run = len(chunk) - i - 1
	} else {
		l.run += len(chunk)
	}
	if l.run > MaxLineBytes {
		return n, fmt.Errorf("%w: over %d MiB", ErrLineTooLong, MaxLineBytes>>20)
	}
	return n, err
}

package client

import (
	"bytes"
	"errors"
	"fmt"
	"net/http"
	"sort"
	"strconv"
	"strings"
)

// HTTP/1.1 for the event loop's chat streams: the request's bytes, and a response parser
// fed with whatever each read brings. It knows only what a streamed chat answer uses: a
// status, a few headers, and a body that is chunked, of a Content-Length, or runs to the
// connection's close.

// h1RequestHead renders a POST's request line and headers up to the Content-Length value,
// which the caller appends with the body. Header values with line breaks are refused:
// they would smuggle headers in.
func h1RequestHead(path, host string, header http.Header) ([]byte, error) {
	var b bytes.Buffer
	fmt.Fprintf(&b, "POST %s HTTP/1.1\r\nHost: %s\r\n", path, host)
	names := make([]string, 0, len(header))
	for name := range header {
		names = append(names, name)
	}
	sort.Strings(names)
	for _, name := range names {
		for _, v := range header[name] {
			if strings.ContainsAny(name+v, "\r\n") {
				return nil, fmt.Errorf("header %s holds a line break", name)
			}
			fmt.Fprintf(&b, "%s: %s\r\n", name, v)
		}
	}
	b.WriteString("Content-Length: ")
	return b.Bytes(), nil
}

// h1Request is head (from h1RequestHead) with the body's length and the body.
func h1Request(head, body []byte) []byte {
	req := make([]byte, 0, len(head)+24+len(body))
	req = append(req, head...)
	req = strconv.AppendInt(req, int64(len(body)), 10)
	req = append(req, "\r\n\r\n"...)
	return append(req, body...)
}

// Response parser states.
const (
	h1Head       = iota // status line and headers
	h1ChunkSize         // a chunk's size line
	h1ChunkData         // a chunk's bytes
	h1ChunkEnd          // the line break after a chunk's bytes
	h1Trailer           // trailer lines after the last chunk
	h1Length            // a body of Content-Length bytes
	h1UntilClose        // a body that ends when the server closes
	h1Done
)

// Bounds on what a response may make the parser hold.
const (
	maxHeadBytes = 64 << 10
	maxLineBytes = 4 << 10
)

var errBadChunk = errors.New("malformed chunked encoding")

// h1Response parses one response. feed takes the bytes of each read in order and hands the
// body's bytes, without framing, to body.
type h1Response struct {
	state       int
	head        []byte
	line        []byte // a size or trailer line cut by the end of a read
	left        int64  // bytes left in the current chunk or the body
	Status      int
	StatusText  string // "404 Not Found"
	ContentType string
	// Reusable: the connection may carry another request once the body is done.
	Reusable bool
	// HeadDone turns true with the blank line that ends the head.
	HeadDone bool
}

// done says the body ended: its last chunk, its last byte, or (see eof) the close.
func (p *h1Response) done() bool { return p.state == h1Done }

// feed parses in. Bytes after the body's end are not part of any answer: the connection
// is then not reused.
func (p *h1Response) feed(in []byte, body func([]byte)) error {
	for len(in) > 0 {
		switch p.state {
		case h1Head:
			rest, err := p.feedHead(in)
			if err != nil {
				return err
			}
			in = rest
		case h1ChunkSize:
			line, rest, ok, err := p.takeLine(in)
			if err != nil || !ok {
				return err
			}
			in = rest
			size, _, _ := bytes.Cut(line, []byte(";"))
			n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
			if err != nil || n < 0 {
				return fmt.Errorf("%w: chunk size %q", errBadChunk, snippet(line))
			}
			p.left, p.state = n, h1ChunkData
			if n == 0 {
				p.state = h1Trailer
			}
		case h1ChunkData, h1Length:
			n := min(int64(len(in)), p.left)
			body(in[:n])
			in, p.left = in[n:], p.left-n
			if p.left > 0 {
				break
			}
			if p.state == h1Length {
				p.state = h1Done
			} else {
				p.state = h1ChunkEnd
			}
		case h1ChunkEnd, h1Trailer:
			line, rest, ok, err := p.takeLine(in)
			if err != nil || !ok {
				return err
			}
			in = rest
			switch {
			case p.state == h1Trailer && len(line) == 0:
				p.state = h1Done
			case p.state == h1ChunkEnd && len(line) != 0:
				return fmt.Errorf("%w: %q after a chunk", errBadChunk, snippet(line))
			case p.state == h1ChunkEnd:
				p.state = h1ChunkSize
			}
		case h1UntilClose:
			body(in)
			in = nil
		case h1Done:
			p.Reusable = false
			return nil
		}
	}
	return nil
}

// eof tells the parser the server closed the connection; it says whether that ended the
// body (a body that runs to the close) rather than cutting it.
func (p *h1Response) eof() bool {
	p.Reusable = false
	if p.state == h1UntilClose {
		p.state = h1Done
	}
	return p.state == h1Done
}

// takeLine returns the next complete line of p.line+in, without its line break.
func (p *h1Response) takeLine(in []byte) (line, rest []byte, ok bool, err error) {
	i := bytes.IndexByte(in, '\n')
	if i < 0 {
		if len(p.line)+len(in) > maxLineBytes {
			return nil, nil, false, fmt.Errorf("%w: a line longer than %d bytes", errBadChunk, maxLineBytes)
		}
		p.line = append(p.line, in...)
		return nil, nil, false, nil
	}
	if len(p.line)+i > maxLineBytes { // a read that brings the whole line is held to the same bound
		return nil, nil, false, fmt.Errorf("%w: a line longer than %d bytes", errBadChunk, maxLineBytes)
	}
	line, rest = in[:i], in[i+1:]
	if len(p.line) > 0 {
		line = append(p.line, line...)
		p.line = p.line[:0]
	}
	return bytes.TrimSuffix(line, []byte("\r")), rest, true, nil
}

// feedHead gathers the head and, at its blank line, reads it and picks the body's framing.
func (p *h1Response) feedHead(in []byte) ([]byte, error) {
	from := max(len(p.head)-3, 0)
	p.head = append(p.head, in...)
	end := bytes.Index(p.head[from:], []byte("\r\n\r\n"))
	if end < 0 {
		if len(p.head) > maxHeadBytes {
			return nil, fmt.Errorf("response head longer than %d bytes", maxHeadBytes)
		}
		return nil, nil
	}
	end += from + 4
	if end > maxHeadBytes { // a read that brings the whole head is held to the same bound
		return nil, fmt.Errorf("response head longer than %d bytes", maxHeadBytes)
	}
	rest := in[len(in)-(len(p.head)-end):]
	head := string(p.head[:end-4])
	p.head = p.head[:0]
	if err := p.parseHead(head); err != nil {
		return nil, err
	}
	if p.Status >= 100 && p.Status < 200 {
		p.state = h1Head // an interim answer; the real one follows
		return rest, nil
	}
	p.HeadDone = true
	return rest, nil
}

func (p *h1Response) parseHead(head string) error {
	statusLine, fields, _ := strings.Cut(head, "\r\n")
	proto, status, ok := strings.Cut(statusLine, " ")
	code, err := strconv.Atoi(status[:min(3, len(status))])
	if !ok || !strings.HasPrefix(proto, "HTTP/1.") || err != nil || code < 100 || code > 999 {
		return fmt.Errorf("malformed status line %q", snippet([]byte(statusLine)))
	}
	p.Status, p.StatusText = code, status
	p.Reusable = proto != "HTTP/1.0"
	length, chunked := int64(-1), false
	for f := range strings.SplitSeq(fields, "\r\n") {
		if f == "" {
			continue // a head of the status line alone
		}
		name, value, ok := strings.Cut(f, ":")
		if !ok {
			return fmt.Errorf("malformed header line %q", snippet([]byte(f)))
		}
		value = strings.TrimSpace(value)
		switch strings.ToLower(strings.TrimSpace(name)) {
		case "content-type":
			p.ContentType = value
		case "content-length":
			n, err := strconv.ParseInt(value, 10, 64)
			if err != nil || n < 0 || (length >= 0 && n != length) {
				return fmt.Errorf("malformed Content-Length %q", snippet([]byte(value)))
			}
			length = n
		case "transfer-encoding":
			// Only chunked alone: "gzip, chunked" would hand compressed bytes to the events.
			chunked = strings.EqualFold(value, "chunked")
			if !chunked {
				return fmt.Errorf("unsupported Transfer-Encoding %q", snippet([]byte(value)))
			}
		case "content-encoding":
			if !strings.EqualFold(value, "identity") {
				return fmt.Errorf("unsupported Content-Encoding %q (kvbench asks for none)", snippet([]byte(value)))
			}
		case "connection":
			if strings.EqualFold(value, "close") {
				p.Reusable = false
			}
		}
	}
	switch {
	case p.Status < 200 || p.Status == http.StatusNoContent || p.Status == http.StatusNotModified:
		p.state = h1Done
	case chunked:
		p.state = h1ChunkSize
		// Both framings: chunked wins, and the connection is not trusted again (RFC 9112 6.3).
		p.Reusable = p.Reusable && length < 0
	case length >= 0:
		p.state, p.left = h1Length, length
		if length == 0 {
			p.state = h1Done
		}
	default:
		p.state, p.Reusable = h1UntilClose, false
	}
	return nil
}

//go:build linux

package client

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/netip"
	"net/url"
	"os"
	"strconv"
	"sync"
	"syscall"
	"time"
)

// The epoll transport streams chat completions to a plain-HTTP endpoint the way a minimal
// C client does: one goroutine waits on every stream's socket with epoll and reads each
// ready socket once. Through net/http each token costs its stream's goroutine a wakeup
// and two reads (the second finds the socket empty before the goroutine parks); here it
// costs one read and a share of one epoll_wait, half the client's CPU at 64 streams.
// It serves http:// URLs with an IP address or localhost and no proxy; anything else
// (https, host names, a proxy, a caller's own http.Client) goes through net/http.

type epollTransport struct {
	epfd int

	mu       sync.Mutex
	streams  map[uint64]*epollStream
	nextID   uint64
	idle     map[string][]int           // keep-alive sockets by address
	draining map[*epollStream]time.Time // streams past [DONE], by deadline
}

var (
	epollOnce   sync.Once
	epollShared *epollTransport
)

// sharedEpollTransport returns the process's epoll transport, nil if it cannot start.
func sharedEpollTransport() *epollTransport {
	epollOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err != nil {
			return
		}
		epollShared = &epollTransport{epfd: fd, streams: map[uint64]*epollStream{}, idle: map[string][]int{},
			draining: map[*epollStream]time.Time{}}
		go epollShared.loop()
	})
	return epollShared
}

// epollTarget is where an endpoint's chat requests go, resolved once per client.
type epollTarget struct {
	addr netip.AddrPort
	head []byte // request line and headers up to Content-Length's value
}

// newEpollTarget returns the target of chatURL when the epoll transport can serve it.
func newEpollTarget(chatURL, apiKey string) *epollTarget {
	u, err := parseHTTPURL(chatURL)
	if err != nil || u == nil {
		return nil
	}
	host, port := u.Hostname(), u.Port()
	if host == "localhost" {
		host = "127.0.0.1"
	}
	ip, err := netip.ParseAddr(host)
	if err != nil || ip.Zone() != "" {
		return nil
	}
	if port == "" {
		port = "80"
	}
	p, err := strconv.ParseUint(port, 10, 16)
	if err != nil || !proxyFree(u) {
		return nil
	}
	var head bytes.Buffer
	fmt.Fprintf(&head, "POST %s HTTP/1.1\r\nHost: %s\r\nUser-Agent: kvbench\r\nContent-Type: application/json\r\nAccept: text/event-stream\r\nCache-Control: no-cache\r\n", u.RequestURI(), u.Host)
	if apiKey != "" {
		fmt.Fprintf(&head, "Authorization: Bearer %s\r\n", apiKey)
	}
	head.WriteString("Content-Length: ")
	return &epollTarget{addr: netip.AddrPortFrom(ip.Unmap(), uint16(p)), head: head.Bytes()}
}

// Stream phases.
const (
	phaseConnect = iota
	phaseWrite
	phaseHeaders
	phaseBody
	phaseDrain // [DONE] seen, reading the end of the body to keep the connection
	phaseOver
)

// Chunked body decoder states.
const (
	chunkSize = iota
	chunkData
	chunkDataEnd
	chunkTrailer
	chunkEnd
)

// maxHeaderBytes bounds a response's status line and headers.
const maxHeaderBytes = 1 << 20

// epollStream is one request on the epoll transport. The poller goroutine drives it; the
// caller's goroutine waits on done, and may abort it. mu orders the two.
type epollStream struct {
	t      *epollTransport
	id     uint64
	fd     int
	key    string
	reused bool

	mu    sync.Mutex
	phase int
	req   []byte
	wrote int

	in          []byte // received bytes not yet decoded: headers, chunk framing
	status      int
	contentType string
	keepAlive   bool
	chunked     bool
	length      int64 // body bytes left when Content-Length is given; -1 when not
	chunkState  int
	chunkLeft   int64
	gotBytes    bool   // any byte of the response arrived
	errBody     []byte // body of a non-2xx answer

	c       *Client
	where   string
	sse     *eventReader
	acc     *streamAccumulator
	dog     *chunkWatchdog
	headers *time.Timer
	reads   int

	done chan struct{}
	over bool
	err  error // why the stream ended early: a transport failure, EOF, an abort
	stop bool  // the events ended the stream ([DONE], an error event, a bad chunk)
}

// start dials (or reuses a connection) and hands the stream to the poller.
func (t *epollTransport) start(st *epollStream, target *epollTarget, reuse bool) error {
	st.key = target.addr.String()
	fd := -1
	if reuse {
		fd = t.takeIdle(st.key)
	}
	st.reused = fd >= 0
	if fd < 0 {
		var err error
		if fd, err = dialNonblocking(target.addr); err != nil {
			return err
		}
	}
	st.fd, st.phase = fd, phaseWrite
	if !st.reused {
		st.phase = phaseConnect
	}
	t.mu.Lock()
	t.nextID++
	st.id = t.nextID
	t.streams[st.id] = st
	t.mu.Unlock()
	ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLOUT | syscall.EPOLLRDHUP}
	setEventID(&ev, st.id)
	if err := syscall.EpollCtl(t.epfd, syscall.EPOLL_CTL_ADD, fd, &ev); err != nil {
		t.mu.Lock()
		delete(t.streams, st.id)
		t.mu.Unlock()
		syscall.Close(fd)
		return os.NewSyscallError("epoll_ctl", err)
	}
	return nil
}

func setEventID(ev *syscall.EpollEvent, id uint64) {
	ev.Fd, ev.Pad = int32(uint32(id)), int32(uint32(id>>32))
}

func eventID(ev *syscall.EpollEvent) uint64 {
	return uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
}

func dialNonblocking(addr netip.AddrPort) (int, error) {
	family, sa := syscall.AF_INET, syscall.Sockaddr(nil)
	if addr.Addr().Is4() {
		sa = &syscall.SockaddrInet4{Port: int(addr.Port()), Addr: addr.Addr().As4()}
	} else {
		family = syscall.AF_INET6
		sa = &syscall.SockaddrInet6{Port: int(addr.Port()), Addr: addr.Addr().As16()}
	}
	fd, err := syscall.Socket(family, syscall.SOCK_STREAM|syscall.SOCK_NONBLOCK|syscall.SOCK_CLOEXEC, 0)
	if err != nil {
		return -1, dialError(addr, os.NewSyscallError("socket", err))
	}
	_ = syscall.SetsockoptInt(fd, syscall.IPPROTO_TCP, syscall.TCP_NODELAY, 1)
	if err := syscall.Connect(fd, sa); err != nil && err != syscall.EINPROGRESS {
		syscall.Close(fd)
		return -1, dialError(addr, os.NewSyscallError("connect", err))
	}
	return fd, nil
}

// dialError has net.Dial's shape, so failures read and classify alike on both transports.
func dialError(addr netip.AddrPort, err error) error {
	return &net.OpError{Op: "dial", Net: "tcp", Addr: net.TCPAddrFromAddrPort(addr), Err: err}
}

// takeIdle returns a kept connection to key that the server has not closed, or -1.
func (t *epollTransport) takeIdle(key string) int {
	t.mu.Lock()
	defer t.mu.Unlock()
	var peek [1]byte
	for fds := t.idle[key]; len(fds) > 0; fds = t.idle[key] {
		fd := fds[len(fds)-1]
		t.idle[key] = fds[:len(fds)-1]
		// An idle connection has nothing to read: EAGAIN. EOF or data means it is done.
		if _, _, err := syscall.Recvfrom(fd, peek[:], syscall.MSG_PEEK|syscall.MSG_DONTWAIT); err == syscall.EAGAIN {
			return fd
		}
		syscall.Close(fd)
	}
	return -1
}

func (t *epollTransport) keepIdle(key string, fd int) {
	t.mu.Lock()
	defer t.mu.Unlock()
	if len(t.idle[key]) >= 4096 {
		syscall.Close(fd)
		return
	}
	t.idle[key] = append(t.idle[key], fd)
}

func (t *epollTransport) loop() {
	events := make([]syscall.EpollEvent, 512)
	buf := make([]byte, 64<<10)
	for {
		n, err := syscall.EpollWait(t.epfd, events, 100)
		if err != nil && err != syscall.EINTR {
			time.Sleep(10 * time.Millisecond) // not expected; do not spin
			continue
		}
		for i := range max(n, 0) {
			t.mu.Lock()
			st := t.streams[eventID(&events[i])]
			t.mu.Unlock()
			if st != nil {
				st.handle(events[i].Events, buf)
			}
		}
		t.expireDrains()
	}
}

// expireDrains closes connections whose body did not end soon after [DONE].
func (t *epollTransport) expireDrains() {
	now := time.Now()
	var late []*epollStream
	t.mu.Lock()
	for st, deadline := range t.draining {
		if now.After(deadline) {
			late = append(late, st)
		}
	}
	t.mu.Unlock()
	for _, st := range late {
		st.mu.Lock()
		st.close(false)
		st.signal()
		st.mu.Unlock()
	}
}

// handle runs one readiness event of the stream.
func (st *epollStream) handle(events uint32, buf []byte) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.phase == phaseOver {
		return
	}
	if st.phase == phaseConnect {
		if events&(syscall.EPOLLOUT|syscall.EPOLLERR|syscall.EPOLLHUP) == 0 {
			return
		}
		errno, err := syscall.GetsockoptInt(st.fd, syscall.SOL_SOCKET, syscall.SO_ERROR)
		if err == nil && errno != 0 {
			err = syscall.Errno(errno)
		}
		if err != nil {
			addr, _ := netip.ParseAddrPort(st.key)
			st.fail(dialError(addr, os.NewSyscallError("connect", err)))
			return
		}
		st.phase = phaseWrite
	}
	if st.phase == phaseWrite {
		for st.wrote < len(st.req) {
			n, err := syscall.Write(st.fd, st.req[st.wrote:])
			if err == syscall.EAGAIN {
				return
			}
			if err != nil {
				st.fail(st.noResponse(os.NewSyscallError("write", err)))
				return
			}
			st.wrote += n
		}
		st.phase = phaseHeaders
		ev := syscall.EpollEvent{Events: syscall.EPOLLIN | syscall.EPOLLRDHUP}
		setEventID(&ev, st.id)
		_ = syscall.EpollCtl(st.t.epfd, syscall.EPOLL_CTL_MOD, st.fd, &ev)
	}
	if events&(syscall.EPOLLIN|syscall.EPOLLRDHUP|syscall.EPOLLHUP|syscall.EPOLLERR) == 0 {
		return
	}
	n, err := syscall.Read(st.fd, buf)
	if err == syscall.EAGAIN || err == syscall.EINTR {
		return
	}
	now := time.Now()
	if err != nil {
		if st.phase == phaseHeaders {
			st.fail(st.noResponse(os.NewSyscallError("read", err)))
		} else {
			st.fail(os.NewSyscallError("read", err))
		}
		return
	}
	if n == 0 {
		st.eof()
		return
	}
	st.gotBytes = true
	st.reads++
	p := buf[:n]
	if st.phase == phaseHeaders {
		st.in = append(st.in, p...)
		if !st.parseHeaders() {
			return
		}
		p, st.in = st.in, nil
	}
	if len(p) > 0 {
		st.dog.touch(now) // the chunk bound starts with the body, not the headers
		st.body(p, now)
	}
}

// noResponse says that a connection failed before any answer; on a reused connection the
// server most likely closed it as idle, and the caller retries on a new one.
func (st *epollStream) noResponse(err error) error {
	if st.reused && !st.gotBytes {
		return errIdleClosed
	}
	return err
}

var errIdleClosed = errors.New("kept connection closed by the server")

// parseHeaders parses the status line and headers once they are complete; false while
// they are not (or on failure, which ends the stream).
func (st *epollStream) parseHeaders() bool {
	end := bytes.Index(st.in, []byte("\r\n\r\n"))
	if end < 0 {
		if len(st.in) > maxHeaderBytes {
			st.fail(errors.New("malformed HTTP response: headers longer than 1 MiB"))
		}
		return false
	}
	head := string(st.in[:end])
	st.in = st.in[end+4:]
	lines := bytes.Split([]byte(head), []byte("\r\n"))
	proto, rest, _ := bytes.Cut(lines[0], []byte(" "))
	code, _, _ := bytes.Cut(rest, []byte(" "))
	status, err := strconv.Atoi(string(code))
	if !bytes.HasPrefix(proto, []byte("HTTP/1.")) || err != nil || status < 100 || status > 999 {
		st.fail(fmt.Errorf("malformed HTTP response: status line %q", snippet(lines[0])))
		return false
	}
	if status >= 100 && status < 200 { // 100 Continue and friends: the answer follows
		return st.parseHeaders()
	}
	st.status, st.length = status, -1
	st.acc.res.HTTPStatus = status
	st.keepAlive = string(proto) == "HTTP/1.1"
	for _, l := range lines[1:] {
		name, value, ok := bytes.Cut(l, []byte(":"))
		if !ok {
			continue
		}
		value = bytes.TrimSpace(value)
		switch {
		case bytes.EqualFold(name, []byte("Content-Type")):
			st.contentType = string(value)
		case bytes.EqualFold(name, []byte("Transfer-Encoding")):
			st.chunked = bytes.EqualFold(value, []byte("chunked"))
		case bytes.EqualFold(name, []byte("Content-Length")):
			if n, err := strconv.ParseInt(string(value), 10, 64); err == nil && n >= 0 {
				st.length = n
			}
		case bytes.EqualFold(name, []byte("Connection")):
			if bytes.EqualFold(value, []byte("close")) {
				st.keepAlive = false
			}
		}
	}
	if st.chunked {
		st.length = -1
	}
	if !st.chunked && st.length < 0 {
		st.keepAlive = false // the body runs to the end of the connection
	}
	st.headers.Stop()
	st.phase = phaseBody
	return true
}

// body decodes received body bytes and feeds the events to the accumulator.
func (st *epollStream) body(p []byte, now time.Time) {
	if !st.chunked {
		if st.length >= 0 && int64(len(p)) > st.length {
			p = p[:st.length]
		}
		st.content(p)
		if st.length >= 0 {
			st.length -= int64(len(p))
			if st.length == 0 {
				st.bodyEnd()
			}
		}
	} else {
		st.in = append(st.in, p...)
		st.dechunk()
	}
	if st.phase == phaseBody && st.status >= 200 && st.status < 300 {
		st.events(now)
	}
}

// dechunk decodes as much of st.in as is complete.
func (st *epollStream) dechunk() {
	in := st.in
	for len(in) > 0 && st.phase < phaseOver && st.chunkState != chunkEnd {
		switch st.chunkState {
		case chunkSize, chunkDataEnd, chunkTrailer:
			i := bytes.IndexByte(in, '\n')
			if i < 0 {
				if len(in) > 4096 {
					st.fail(errors.New("malformed chunked body: line longer than 4 KiB"))
					return
				}
				st.in = append(st.in[:0], in...)
				return
			}
			line := bytes.TrimRight(in[:i], "\r")
			in = in[i+1:]
			switch st.chunkState {
			case chunkDataEnd:
				if len(line) != 0 {
					st.fail(errors.New("malformed chunked body: no line break after a chunk"))
					return
				}
				st.chunkState = chunkSize
			case chunkTrailer:
				if len(line) == 0 {
					st.chunkState = chunkEnd
					st.in = append(st.in[:0], in...) // what follows the body, if anything
					st.bodyEnd()
					return
				}
			default:
				size, _, _ := bytes.Cut(line, []byte(";"))
				n, err := strconv.ParseInt(string(bytes.TrimSpace(size)), 16, 64)
				if err != nil || n < 0 {
					st.fail(fmt.Errorf("malformed chunked body: chunk size %q", snippet(line)))
					return
				}
				st.chunkLeft = n
				st.chunkState = chunkData
				if n == 0 {
					st.chunkState = chunkTrailer
				}
			}
		case chunkData:
			k := min(int64(len(in)), st.chunkLeft)
			st.content(in[:k])
			in = in[k:]
			if st.chunkLeft -= k; st.chunkLeft == 0 {
				st.chunkState = chunkDataEnd
			}
		}
	}
	st.in = append(st.in[:0], in...)
}

// content takes decoded body bytes.
func (st *epollStream) content(p []byte) {
	if len(p) == 0 || st.phase != phaseBody && st.phase != phaseDrain {
		return
	}
	if st.status < 200 || st.status >= 300 {
		if room := maxErrorBody - len(st.errBody); room > 0 {
			st.errBody = append(st.errBody, p[:min(len(p), room)]...)
		}
		return
	}
	if st.phase == phaseDrain {
		return
	}
	if err := st.sse.feed(p); err != nil {
		st.fail(err)
	}
}

// events folds the complete events into the accumulator.
func (st *epollStream) events(now time.Time) {
	st.sse.reads = st.reads
	if st.c.takeEvents(st.sse, st.acc, now, st.where) {
		st.stop = true
		if st.sse.done && !st.bodyComplete() && st.keepAlive {
			// The caller gets the result once the connection can be kept (the end of
			// the body is usually in flight) or drainTimeout passed; the timings end here.
			st.phase = phaseDrain
			st.acc.end = now
			st.t.mu.Lock()
			st.t.draining[st] = now.Add(drainTimeout)
			st.t.mu.Unlock()
			return
		}
		st.close(st.sse.done && st.bodyComplete())
		st.signal()
	}
}

func (st *epollStream) bodyComplete() bool {
	return st.chunkState == chunkEnd || (!st.chunked && st.length == 0)
}

// bodyEnd ends a stream whose body is complete.
func (st *epollStream) bodyEnd() {
	switch st.phase {
	case phaseDrain:
		st.close(true)
		st.signal()
	case phaseBody:
		if st.status >= 200 && st.status < 300 {
			st.sse.endBody()
			st.events(time.Now())
			if st.phase == phaseOver {
				return
			}
		}
		st.close(st.keepAlive)
		st.signal()
	}
}

// eof handles the end of the connection.
func (st *epollStream) eof() {
	switch {
	case st.phase == phaseDrain:
		st.close(false)
		st.signal()
	case st.phase == phaseHeaders || st.phase == phaseWrite:
		st.fail(st.noResponse(io.EOF))
	case !st.chunked && st.length < 0: // the body ran to the close
		st.keepAlive = false
		st.bodyEnd()
	default:
		st.fail(io.ErrUnexpectedEOF)
	}
}

// fail ends the stream with err.
func (st *epollStream) fail(err error) {
	if st.phase == phaseOver {
		return
	}
	if st.err == nil && st.phase != phaseDrain { // a failure after [DONE] changes nothing
		st.err = err
	}
	st.close(false)
	st.signal()
}

// close takes the socket off the poller, keeping it for another request when keep says
// the body ended cleanly on a reusable connection.
func (st *epollStream) close(keep bool) {
	if st.phase == phaseOver {
		return
	}
	st.phase = phaseOver
	t := st.t
	t.mu.Lock()
	delete(t.streams, st.id)
	delete(t.draining, st)
	t.mu.Unlock()
	_ = syscall.EpollCtl(t.epfd, syscall.EPOLL_CTL_DEL, st.fd, nil)
	if keep && st.keepAlive && len(st.in) == 0 {
		t.keepIdle(st.key, st.fd)
	} else {
		syscall.Close(st.fd)
	}
	st.headers.Stop()
}

// signal tells the waiting caller that the stream's outcome is known.
func (st *epollStream) signal() {
	if !st.over {
		st.over = true
		close(st.done)
	}
}

// abort ends the stream for the caller (context canceled, a bound expired).
func (st *epollStream) abort(cause error) {
	st.mu.Lock()
	defer st.mu.Unlock()
	if st.over {
		return
	}
	if st.phase != phaseDrain {
		st.err = cause
	}
	st.close(false)
	st.signal()
}

// streamEpoll runs a chat request on the epoll transport, filling acc's result; it
// returns false, having done nothing, when the transport is not available.
func (c *Client) streamEpoll(ctx, reqCtx context.Context, cancel context.CancelCauseFunc, body []byte,
	acc *streamAccumulator, progress func(Progress), where string) bool {
	t := sharedEpollTransport()
	if t == nil {
		return false
	}
	req := make([]byte, 0, len(c.epoll.head)+24+len(body))
	req = append(req, c.epoll.head...)
	req = strconv.AppendInt(req, int64(len(body)), 10)
	req = append(req, "\r\n\r\n"...)
	req = append(req, body...)
	// The poller must never wait on the caller: its reports queue up, and a report that
	// finds the queue full is dropped (a later one supersedes it).
	reports := make(chan Progress, 64)
	acc.progress = func(p Progress) {
		select {
		case reports <- p:
		default:
		}
	}
	defer func() { acc.progress = progress }()
	deliver := func() {
		for {
			select {
			case p := <-reports:
				progress(p)
			default:
				return
			}
		}
	}
	for attempt := 0; ; attempt++ {
		st := &epollStream{t: t, req: req, c: c, where: where, sse: newEventReader(nil), acc: acc, done: make(chan struct{}),
			dog: &chunkWatchdog{timeout: c.chunkTimeout, cancel: cancel, base: acc.start}}
		st.headers = time.AfterFunc(c.headerTimeout, func() { cancel(fmt.Errorf("%w (%s)", errHeaderTimeout, c.headerTimeout)) })
		if err := t.start(st, c.epoll, attempt == 0); err != nil {
			st.headers.Stop()
			st.sse.release()
			c.recordOpenError(ctx, reqCtx, acc.res, err)
			return true
		}
	wait:
		for {
			select {
			case <-st.done:
				break wait
			case p := <-reports:
				progress(p)
			case <-reqCtx.Done():
				st.abort(context.Cause(reqCtx))
				break wait
			}
		}
		deliver()
		st.dog.stop()
		st.headers.Stop()
		if errors.Is(st.err, errIdleClosed) && attempt == 0 {
			st.sse.release()
			continue // the server had closed the kept connection: once more on a new one
		}
		c.epollOutcome(ctx, reqCtx, st)
		st.sse.release()
		return true
	}
}

// epollOutcome classifies how an epoll stream ended, as the net/http path does.
func (c *Client) epollOutcome(ctx, reqCtx context.Context, st *epollStream) {
	res := st.acc.res
	switch {
	case res.ErrorKind != "": // the events said: an error event, a malformed chunk
	case res.HTTPStatus == 0:
		err := st.err
		if err == nil || errors.Is(err, errIdleClosed) {
			err = io.EOF
		}
		c.recordOpenError(ctx, reqCtx, res, err)
	case res.HTTPStatus < 200 || res.HTTPStatus >= 300:
		res.ErrorKind = ErrorKindHTTPStatus
		res.Error = c.redact(fmt.Sprintf("%s: http status %d %s: %s", st.where, res.HTTPStatus, http.StatusText(res.HTTPStatus), errorBodyMessage(st.errBody)))
	case st.err != nil:
		c.recordStreamError(ctx, reqCtx, res, st.acc.chunks, st.err, st.contentType)
	case !st.sse.done:
		c.recordStreamError(ctx, reqCtx, res, st.acc.chunks, io.ErrUnexpectedEOF, st.contentType)
	}
}

func parseHTTPURL(s string) (*url.URL, error) {
	u, err := url.Parse(s)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Fragment != "" {
		return nil, err
	}
	return u, nil
}

// proxyFree reports whether requests to u go straight to it, not through an environment proxy.
func proxyFree(u *url.URL) bool {
	p, err := http.ProxyFromEnvironment(&http.Request{URL: u})
	return err == nil && p == nil
}

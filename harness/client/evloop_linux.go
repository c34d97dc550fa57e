package client

import (
	"context"
	"errors"
	"fmt"
	"io"
	"net"
	"net/http"
	"net/url"
	"os"
	"sync"
	"syscall"
	"time"
	"unsafe"
)

// The event loop: one goroutine reads every chat stream of the process, woken by epoll
// with the batch of connections that have bytes. With net/http each token wakes its
// stream's goroutine (a read that finds nothing, a park, a netpoll wake-up, often a
// thread hand-off); here a batch of tokens of all streams costs one wake-up and one read
// each. A stream's goroutine sleeps from sending its request until the Result is final,
// woken only for throttled progress reports.
//
// The loop owns a stream's connection from the request's first byte to the end of its
// body; a stream's state is guarded by its mutex, which the loop holds while it reads and
// which an abort (a canceled context, a bound that expired) takes to close the connection.

// loopTarget is a Client's chat endpoint as the loop reaches it, and its idle connections.
type loopTarget struct {
	loop *eventLoop
	addr string // host:port to dial
	head []byte // request line and headers, up to the Content-Length value

	mu   sync.Mutex
	idle []*rawConn
}

// Bounds on the connections a target keeps for later requests: how many, and for how long
// (as net/http's default transport; servers close theirs sooner, and a connection the
// server closed would otherwise sit half-closed at the bottom of the pool).
const (
	maxIdleConns = 4096
	maxIdleTime  = 90 * time.Second
)

// newLoopTarget returns the loop's view of chatURL, or nil where net/http must serve it:
// HTTPS, credentials in the URL, a proxy from the environment, or no epoll.
func newLoopTarget(chatURL string, header http.Header) *loopTarget {
	u, err := url.Parse(chatURL)
	if err != nil || u.Scheme != "http" || u.User != nil || u.Host == "" {
		return nil
	}
	if proxy, err := http.ProxyFromEnvironment(&http.Request{URL: u}); err != nil || proxy != nil {
		return nil
	}
	loop, err := sharedLoop()
	if err != nil {
		return nil
	}
	port := u.Port()
	if port == "" {
		port = "80"
	}
	head, err := h1RequestHead(u.RequestURI(), u.Host, header)
	if err != nil {
		return nil // net/http refuses the same header with its own error
	}
	return &loopTarget{loop: loop, addr: net.JoinHostPort(u.Hostname(), port), head: head}
}

// rawConn is a connection outside Go's netpoller: a non-blocking socket only the loop reads.
type rawConn struct {
	fd        int
	buf       []byte    // what one read brings
	idleSince time.Time // when it was pooled
}

const readBufferBytes = 16 << 10

// dial connects with the standard dialer (name resolution, timeouts, ctx), then keeps a
// duplicate of the socket and closes the original, which takes it out of Go's netpoller:
// otherwise every token would also wake the runtime's poller.
func (t *loopTarget) dial(ctx context.Context) (*rawConn, error) {
	var d net.Dialer
	nc, err := d.DialContext(ctx, "tcp", t.addr)
	if err != nil {
		return nil, err
	}
	defer nc.Close()
	sc, err := nc.(*net.TCPConn).SyscallConn()
	if err != nil {
		return nil, err
	}
	fd, dupErr := -1, error(nil)
	if err := sc.Control(func(s uintptr) {
		r, _, errno := syscall.Syscall(syscall.SYS_FCNTL, s, syscall.F_DUPFD_CLOEXEC, 0)
		if errno != 0 {
			dupErr = errno
			return
		}
		fd = int(r)
	}); err != nil {
		return nil, err
	}
	if dupErr != nil {
		return nil, fmt.Errorf("dup socket: %w", dupErr)
	}
	if err := syscall.SetNonblock(fd, true); err != nil {
		syscall.Close(fd)
		return nil, err
	}
	return &rawConn{fd: fd, buf: make([]byte, readBufferBytes)}, nil
}

// get returns an idle connection the server has not closed (reused), or dials one.
func (t *loopTarget) get(ctx context.Context) (c *rawConn, reused bool, err error) {
	for {
		t.mu.Lock()
		n := len(t.idle)
		if n == 0 {
			t.mu.Unlock()
			c, err := t.dial(ctx)
			return c, false, err
		}
		c := t.idle[n-1]
		t.idle = t.idle[:n-1]
		t.mu.Unlock()
		// An idle connection has nothing to read: a close or stray bytes disqualify it.
		if peekIdle(c.fd) {
			return c, true, nil
		}
		closeRaw(c.fd)
	}
}

// put pools c, and closes the connections idle for longer than maxIdleTime: the pool is a
// stack, so they are at its bottom.
func (t *loopTarget) put(c *rawConn) {
	t.mu.Lock()
	defer t.mu.Unlock()
	now := time.Now()
	old := 0
	for old < len(t.idle) && now.Sub(t.idle[old].idleSince) > maxIdleTime {
		closeRaw(t.idle[old].fd)
		old++
	}
	if old > 0 {
		t.idle = append(t.idle[:0], t.idle[old:]...)
	}
	if len(t.idle) >= maxIdleConns {
		closeRaw(c.fd)
		return
	}
	c.idleSince = now
	t.idle = append(t.idle, c)
}

// eventLoop is the process's one epoll instance and the goroutine that waits on it.
type eventLoop struct {
	epfd    int
	file    *os.File // keeps epfd open and in Go's netpoller
	wait    syscall.RawConn
	mu      sync.Mutex
	streams map[uint64]*loopStream // by the id in their epoll registration
	nextID  uint64
}

var (
	loopOnce    sync.Once
	processLoop *eventLoop
	loopErr     error
)

func sharedLoop() (*eventLoop, error) {
	loopOnce.Do(func() {
		fd, err := syscall.EpollCreate1(syscall.EPOLL_CLOEXEC)
		if err == nil {
			err = syscall.SetNonblock(fd, true)
		}
		if err != nil {
			loopErr = err
			return
		}
		// The epoll descriptor is itself readable while a connection is ready, so Go's
		// netpoller can wait on it: a blocking epoll_wait would keep the runtime's monitor
		// retaking the loop's processor every few microseconds instead.
		f := os.NewFile(uintptr(fd), "kvbench-event-loop")
		rc, err := f.SyscallConn()
		if err != nil {
			loopErr = err
			return
		}
		processLoop = &eventLoop{epfd: fd, file: f, wait: rc, streams: map[uint64]*loopStream{}}
		go processLoop.run()
	})
	return processLoop, loopErr
}

const (
	evRead  = syscall.EPOLLIN | syscall.EPOLLRDHUP
	evWrite = syscall.EPOLLOUT
)

// add registers s's connection. The id, not the descriptor, names it in events: a
// descriptor number is reused once closed, and a stale event must not reach a new stream.
func (l *eventLoop) add(s *loopStream, events uint32) error {
	l.mu.Lock()
	l.nextID++
	s.id = l.nextID
	l.streams[s.id] = s
	l.mu.Unlock()
	ev := syscall.EpollEvent{Events: events, Fd: int32(uint32(s.id)), Pad: int32(uint32(s.id >> 32))}
	if err := epollCtl(l.epfd, syscall.EPOLL_CTL_ADD, s.conn.fd, &ev); err != nil {
		l.forget(s)
		return err
	}
	return nil
}

func (l *eventLoop) modify(s *loopStream, events uint32) error {
	ev := syscall.EpollEvent{Events: events, Fd: int32(uint32(s.id)), Pad: int32(uint32(s.id >> 32))}
	return epollCtl(l.epfd, syscall.EPOLL_CTL_MOD, s.conn.fd, &ev)
}

// forget takes s's connection out of the loop; the caller then closes or pools it.
func (l *eventLoop) forget(s *loopStream) {
	epollCtl(l.epfd, syscall.EPOLL_CTL_DEL, s.conn.fd, nil)
	l.mu.Lock()
	delete(l.streams, s.id)
	l.mu.Unlock()
}

func (l *eventLoop) run() {
	events := make([]syscall.EpollEvent, 256)
	n := 0
	// Each Read looks at the epoll descriptor before it parks: only a wait that began with
	// nothing ready is sure to be woken by the next event (Go's netpoller registers
	// descriptors edge-triggered).
	poll := func(fd uintptr) bool {
		var err error
		n, err = epollPoll(int(fd), events)
		return n > 0 || (err != nil && err != syscall.EINTR)
	}
	for {
		err := l.wait.Read(poll)
		if err != nil || n <= 0 {
			// Neither can happen to a descriptor the loop never closes; not spun on.
			time.Sleep(10 * time.Millisecond)
			continue
		}
		for _, ev := range events[:n] {
			id := uint64(uint32(ev.Fd)) | uint64(uint32(ev.Pad))<<32
			l.mu.Lock()
			s := l.streams[id]
			l.mu.Unlock()
			if s != nil {
				s.ready(ev.Events)
			}
		}
	}
}

// loopStream is one chat request on the loop.
type loopStream struct {
	c           *Client
	t           *loopTarget
	conn        *rawConn
	id          uint64
	ctx, reqCtx context.Context
	cancelCause context.CancelCauseFunc
	headers     *time.Timer

	progress chan Progress // throttled decode reports for the request's goroutine
	done     chan struct{} // closed when the Result is final
	released chan struct{} // closed when the connection is pooled or closed

	mu       sync.Mutex
	unsent   []byte // request bytes not yet written
	resp     h1Response
	body     func([]byte) // the parser's sink: events, or a non-2xx answer's body
	ev       *eventReader
	acc      *streamAccumulator
	dog      *chunkWatchdog
	errBody  []byte
	fed      int   // body bytes the current read brought
	writeErr error // sending the request failed; reading goes on for an early answer
	over     bool  // the Result is final
	closed   bool  // the connection is released
}

// streamOnLoop sends a chat request on the event loop and waits for its Result.
func (c *Client) streamOnLoop(ctx, reqCtx context.Context, cancelCause context.CancelCauseFunc, headers *time.Timer,
	acc *streamAccumulator, body []byte, progress func(Progress)) {
	t, res := c.loop, acc.res
	unsent := h1Request(t.head, body)
	conn, sent, err := c.send(reqCtx, unsent)
	if err != nil {
		c.recordOpenError(ctx, reqCtx, res, err)
		acc.finish()
		progress(doneProgress(res))
		return
	}
	s := &loopStream{c: c, t: t, conn: conn, ctx: ctx, reqCtx: reqCtx, cancelCause: cancelCause, headers: headers,
		progress: make(chan Progress, 8), done: make(chan struct{}), released: make(chan struct{}), acc: acc,
		unsent: unsent[sent:]}
	s.ev = newEventReader(nil)
	defer s.ev.release()
	s.body = s.takeBody
	acc.progress = s.report
	events := uint32(evRead)
	if len(s.unsent) > 0 {
		events |= evWrite
	}
	s.mu.Lock() // the loop may see the connection as soon as it is added
	err = t.loop.add(s, events)
	s.mu.Unlock()
	if err != nil {
		closeRaw(conn.fd)
		c.recordOpenError(ctx, reqCtx, res, err)
		acc.finish()
		progress(doneProgress(res))
		return
	}
	stop := context.AfterFunc(reqCtx, s.abort)
	for waiting := true; waiting; {
		select {
		case p := <-s.progress:
			progress(p)
		case <-s.done:
			waiting = false
		}
	}
	stop()
	for len(s.progress) > 0 {
		progress(<-s.progress)
	}
	progress(doneProgress(res))
	// A sequential next request finds the connection pooled, as with net/http: the end of
	// the body is usually in flight with [DONE], and a drain is bounded by drainTimeout.
	<-s.released
}

// send takes a connection and writes what the socket takes of req now, from the request's
// goroutine: leaving it to the loop would add the loop's wake-up to the measured time to
// first token. The loop writes the rest. A pooled connection the server has reset fails
// its first write before the server saw any of the request, so a fresh one is dialed.
func (c *Client) send(ctx context.Context, req []byte) (*rawConn, int, error) {
	if err := ctx.Err(); err != nil {
		return nil, 0, err // a pooled connection would carry the request all the same
	}
	for {
		conn, reused, err := c.loop.get(ctx)
		if err != nil {
			return nil, 0, err
		}
		n, err := sendNoSignal(conn.fd, req)
		if err == nil || err == syscall.EAGAIN {
			return conn, max(n, 0), nil
		}
		closeRaw(conn.fd)
		if !reused {
			return nil, 0, fmt.Errorf("sending the request: %w", err)
		}
	}
}

// sendNoSignal writes p without raising SIGPIPE on a closed connection: kvbench catches
// SIGPIPE to notice a closed stdout, and a server's reset must not look like one.
func sendNoSignal(fd int, p []byte) (int, error) {
	if len(p) == 0 {
		return 0, nil
	}
	raceReleaseIO(fd)
	n, _, errno := syscall.RawSyscall6(syscall.SYS_SENDTO, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		syscall.MSG_NOSIGNAL, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// The loop's system calls never block (its sockets are non-blocking, its epoll_wait does
// not wait), so they are made raw: through syscall.Syscall each would tell the runtime it
// may block, which wakes the runtime's monitor thread at nearly every batch of tokens.
// (rawRead is in rawio_linux.go, beside its race-detector twin.)

func epollCtl(epfd, op, fd int, ev *syscall.EpollEvent) error {
	_, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_CTL, uintptr(epfd), uintptr(op), uintptr(fd),
		uintptr(unsafe.Pointer(ev)), 0, 0)
	if errno != 0 {
		return errno
	}
	return nil
}

// peekIdle says whether an idle connection has nothing to read (no close, no stray bytes).
func peekIdle(fd int) bool {
	var b [1]byte
	_, _, errno := syscall.RawSyscall6(syscall.SYS_RECVFROM, uintptr(fd), uintptr(unsafe.Pointer(&b[0])), 1,
		syscall.MSG_PEEK|syscall.MSG_DONTWAIT, 0, 0)
	return errno == syscall.EAGAIN
}

// closeRaw closes a socket of the loop's (closing a TCP socket without SO_LINGER never blocks).
func closeRaw(fd int) { syscall.RawSyscall(syscall.SYS_CLOSE, uintptr(fd), 0, 0) }

// epollPoll is epoll_wait without waiting.
func epollPoll(epfd int, events []syscall.EpollEvent) (int, error) {
	n, _, errno := syscall.RawSyscall6(syscall.SYS_EPOLL_PWAIT, uintptr(epfd), uintptr(unsafe.Pointer(&events[0])),
		uintptr(len(events)), 0, 0, 0)
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

// report hands a decode report to the request's goroutine; a report the goroutine has not
// taken yet makes the loop drop this one rather than wait.
func (s *loopStream) report(p Progress) {
	select {
	case s.progress <- p:
	default:
	}
}

// ready handles an epoll event on s's connection (on the loop's goroutine).
func (s *loopStream) ready(events uint32) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.closed {
		return
	}
	if len(s.unsent) > 0 && events&(evWrite|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
		n, err := sendNoSignal(s.conn.fd, s.unsent)
		if err != nil && err != syscall.EAGAIN {
			// A server may answer (413, say) and close before reading the whole request:
			// reading on finds its answer, or the end of the connection.
			s.writeErr = fmt.Errorf("sending the request: %w", err)
			n = len(s.unsent)
		}
		s.unsent = s.unsent[max(n, 0):]
		if len(s.unsent) == 0 {
			if err := s.t.loop.modify(s, evRead); err != nil {
				s.fail(false, err)
				return
			}
		}
	}
	if events&(evRead|syscall.EPOLLERR|syscall.EPOLLHUP) != 0 {
		s.read()
	}
}

// read reads once (the loop's epoll is level-triggered: bytes left for later wake it
// again) and feeds what came to the parser and the events to the accumulator.
func (s *loopStream) read() {
	n, err := rawRead(s.conn.fd, s.conn.buf)
	now := time.Now()
	switch {
	case err == syscall.EAGAIN || err == syscall.EINTR:
		return
	case err != nil:
		if !s.resp.HeadDone && s.writeErr != nil {
			err = s.writeErr
		}
		s.fail(s.resp.HeadDone, err)
		return
	case n == 0:
		s.closedByServer()
		return
	}
	wasHead := s.resp.HeadDone
	s.fed = 0
	// A framing error ends the stream, but only after what came before it in this read:
	// net/http hands those bytes on too.
	feedErr := s.resp.feed(s.conn.buf[:n], s.body)
	if s.over { // draining past [DONE]
		if feedErr != nil || s.resp.done() {
			s.release(feedErr == nil && s.resp.Reusable)
		}
		return
	}
	if !wasHead && s.resp.HeadDone {
		s.headers.Stop()
		s.acc.res.HTTPStatus = s.resp.Status
		s.dog = &chunkWatchdog{timeout: s.c.chunkTimeout, cancel: s.cancelCause, base: s.acc.start}
	}
	if s.fed > 0 {
		s.ev.reads++ // chunks of one read share its time: their gaps are not measurable
		s.dog.touch(now)
	}
	switch {
	case !s.resp.HeadDone:
		if feedErr != nil {
			s.fail(false, feedErr)
		}
	case !s.ok():
		if feedErr != nil || s.resp.done() || len(s.errBody) >= maxErrorBody {
			s.httpStatusError()
		}
	case s.c.handleEvents(s.ev, s.acc, now):
		s.end(s.ev.done && feedErr == nil)
	case feedErr != nil:
		s.fail(true, feedErr)
	case s.resp.done():
		s.bodyEnded(now)
	}
}

func (s *loopStream) ok() bool { return s.resp.Status >= 200 && s.resp.Status < 300 }

// takeBody is the parser's sink: a 2xx body goes to the event reader, another's is kept
// (bounded) for its error message, and nothing is kept once the Result is final.
func (s *loopStream) takeBody(b []byte) {
	s.fed += len(b)
	switch {
	case s.over:
	case s.ok():
		if err := s.ev.push(b); err != nil {
			s.fail(true, err)
		}
	default:
		s.errBody = append(s.errBody, b[:min(len(b), maxErrorBody-len(s.errBody))]...)
	}
}

// closedByServer handles the end of the connection.
func (s *loopStream) closedByServer() {
	switch {
	case s.over:
		s.release(false)
	case !s.resp.HeadDone && s.writeErr != nil:
		s.fail(false, s.writeErr)
	case !s.resp.HeadDone:
		s.fail(false, io.EOF)
	case !s.ok():
		s.resp.eof()
		s.httpStatusError()
	case s.resp.eof():
		s.bodyEnded(time.Now())
	default:
		s.fail(true, io.ErrUnexpectedEOF)
	}
}

// bodyEnded handles a 2xx body's end: a last line without its line break still counts,
// and a stream that never sent [DONE] was cut.
func (s *loopStream) bodyEnded(now time.Time) {
	s.ev.endOfBody()
	if s.c.handleEvents(s.ev, s.acc, now) {
		s.end(s.ev.done && s.resp.Reusable)
		return
	}
	s.fail(true, io.ErrUnexpectedEOF)
}

func (s *loopStream) httpStatusError() {
	res := s.acc.res
	res.ErrorKind = ErrorKindHTTPStatus
	res.Error = s.c.redact(fmt.Sprintf("%s: http status %s: %s", s.c.chatWhere, s.resp.StatusText, errorBodyMessage(s.errBody)))
	s.end(s.resp.done() && s.resp.Reusable)
}

// fail ends the stream with err; streaming says whether the head had arrived.
func (s *loopStream) fail(streaming bool, err error) {
	if s.over {
		s.release(false)
		return
	}
	if streaming && !s.ok() {
		// A non-2xx answer whose body broke or stalled is still that answer, as with
		// net/http, which keeps what it read of the body.
		s.httpStatusError()
		return
	}
	if streaming {
		s.c.recordStreamError(s.ctx, s.reqCtx, s.acc.res, s.acc.chunks, err, s.resp.ContentType)
	} else {
		s.c.recordOpenError(s.ctx, s.reqCtx, s.acc.res, err)
	}
	s.end(false)
}

// end makes the Result final. keep says the connection may serve another request: it is
// pooled once its body has ended, read to that end for at most drainTimeout.
func (s *loopStream) end(keep bool) {
	s.over = true
	s.acc.finish()
	s.dog.stop()
	s.headers.Stop()
	close(s.done)
	switch {
	case keep && s.resp.done():
		s.release(s.resp.Reusable)
	case keep && s.resp.Reusable: // read on past [DONE] for the body's end, within drainTimeout
		time.AfterFunc(drainTimeout, s.abort)
	default:
		s.release(false)
	}
}

// release takes the connection out of the loop and pools or closes it.
func (s *loopStream) release(reuse bool) {
	if s.closed {
		return
	}
	s.closed = true
	defer close(s.released)
	s.t.loop.forget(s)
	// A request not sent whole (the server answered early) leaves the server waiting for
	// the rest: the next request's bytes would be taken for it.
	if reuse && s.writeErr == nil && len(s.unsent) == 0 {
		s.t.put(s.conn)
		return
	}
	closeRaw(s.conn.fd)
}

// abort ends the stream when its context is done (a cancel, the request timeout, a header
// or chunk bound), and stops a drain that took too long.
func (s *loopStream) abort() {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.over {
		s.release(false)
		return
	}
	err := context.Cause(s.reqCtx)
	if err == nil {
		err = errors.New("aborted")
	}
	s.fail(s.resp.HeadDone, err)
}

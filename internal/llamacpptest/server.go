package llamacpptest

import (
	"context"
	"errors"
	"fmt"
	"net"
	"net/http"
	"os/exec"
	"runtime"
	"strconv"
	"strings"
	"sync"
	"time"
)

// Defaults for Options fields left zero.
const (
	DefaultSlots        = 1
	DefaultContext      = 16384
	DefaultStartTimeout = 60 * time.Second
)

// Options configures Start.
type Options struct {
	Server string // llama-server binary
	Model  string // GGUF model
	// CacheRAMMiB is passed as --cache-ram: the host-RAM prompt cache in MiB; 0 turns it
	// off, -1 means no limit.
	CacheRAMMiB int
	Slots       int      // -np; DefaultSlots when 0
	Context     int      // -c, the total context shared by all slots; DefaultContext when 0
	ExtraArgs   []string // appended after the arguments above
}

// Server is a running llama-server. Close it (callers: in t.Cleanup) to kill the process.
type Server struct {
	url  string
	cmd  *exec.Cmd
	log  *tailBuffer
	done chan struct{} // closed when the process has exited
	err  error         // the process's exit error, valid after done

	closeOnce sync.Once
}

// Start runs llama-server on a free loopback port and waits, at most DefaultStartTimeout
// or until ctx ends, for GET /health to answer 200. The process is killed when ctx ends
// or Close is called.
func Start(ctx context.Context, opts Options) (*Server, error) {
	if opts.Server == "" || opts.Model == "" {
		return nil, errors.New("llamacpp: Options.Server and Options.Model are required")
	}
	// Another process can take the port between our probe and the server's bind; retry
	// a few times on a bind failure only.
	const attempts = 3
	var err error
	for range attempts {
		var s *Server
		s, err = startOnce(ctx, opts)
		if err == nil {
			return s, nil
		}
		if !errors.Is(err, errBind) {
			return nil, err
		}
	}
	return nil, err
}

var errBind = errors.New("llama-server could not bind its port")

func startOnce(ctx context.Context, opts Options) (*Server, error) {
	port, err := freePort()
	if err != nil {
		return nil, err
	}
	slots := orDefault(opts.Slots, DefaultSlots)
	nctx := orDefault(opts.Context, DefaultContext)
	args := []string{
		"-m", opts.Model,
		"--host", "127.0.0.1",
		"--port", strconv.Itoa(port),
		"-np", strconv.Itoa(slots),
		"-c", strconv.Itoa(nctx),
		"--metrics",
		"--cache-ram", strconv.Itoa(opts.CacheRAMMiB),
		"--no-webui",
		// Half the machine: llama.cpp's threads spin at every barrier, and with the test's
		// own client and engines (or busy loops) on the other cores, a thread descheduled
		// mid-barrier stalls them all (on 2 busy cores, 2 threads ran 40% slower than 1).
		"--threads", strconv.Itoa(max(1, runtime.NumCPU()/2)),
	}
	args = append(args, opts.ExtraArgs...)

	s := &Server{
		url:  "http://127.0.0.1:" + strconv.Itoa(port),
		log:  newTailBuffer(64 << 10),
		done: make(chan struct{}),
	}
	s.cmd = exec.CommandContext(ctx, opts.Server, args...)
	s.cmd.Stdout = s.log
	s.cmd.Stderr = s.log
	s.cmd.SysProcAttr = sysProcAttr()
	s.cmd.WaitDelay = 5 * time.Second
	if err := s.cmd.Start(); err != nil {
		return nil, fmt.Errorf("starting %s: %w", opts.Server, err)
	}
	go func() {
		s.err = s.cmd.Wait()
		close(s.done)
	}()

	if err := s.waitHealthy(ctx, DefaultStartTimeout); err != nil {
		s.Close()
		if strings.Contains(s.log.String(), "couldn't bind") {
			return nil, fmt.Errorf("%w: port %d: %w", errBind, port, err)
		}
		return nil, fmt.Errorf("llama-server %s: %w\n%s", strings.Join(args, " "), err, s.log.Tail(40))
	}
	return s, nil
}

func orDefault(v, def int) int {
	if v == 0 {
		return def
	}
	return v
}

// waitHealthy polls /health until it answers 200, the process exits, ctx ends or timeout
// passes.
func (s *Server) waitHealthy(ctx context.Context, timeout time.Duration) error {
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	client := &http.Client{Timeout: 2 * time.Second}
	tick := time.NewTicker(100 * time.Millisecond)
	defer tick.Stop()
	for {
		req, err := http.NewRequestWithContext(ctx, http.MethodGet, s.url+"/health", nil)
		if err != nil {
			return err
		}
		if resp, err := client.Do(req); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return nil
			}
		}
		select {
		case <-s.done:
			return fmt.Errorf("exited before becoming healthy: %v", s.err)
		case <-ctx.Done():
			return fmt.Errorf("waiting for %s/health: %w", s.url, ctx.Err())
		case <-tick.C:
		}
	}
}

// URL returns the server's base URL, e.g. http://127.0.0.1:41234 (no trailing slash).
func (s *Server) URL() string { return s.url }

// Log returns the last 64 KiB of the server's combined stdout and stderr.
func (s *Server) Log() string { return s.log.String() }

// LogTail returns the last n lines of the server's log.
func (s *Server) LogTail(n int) string { return s.log.Tail(n) }

// Close kills the server and waits for it to exit. It is safe to call more than once.
func (s *Server) Close() error {
	s.closeOnce.Do(func() {
		select {
		case <-s.done:
		default:
			_ = s.cmd.Process.Kill()
		}
		<-s.done
	})
	return nil
}

// freePort asks the kernel for an unused loopback port.
func freePort() (int, error) {
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		return 0, fmt.Errorf("finding a free loopback port: %w", err)
	}
	defer l.Close()
	return l.Addr().(*net.TCPAddr).Port, nil
}

// tailBuffer keeps the last max bytes written to it; the server's log can be long.
type tailBuffer struct {
	mu  sync.Mutex
	max int
	buf []byte
}

func newTailBuffer(max int) *tailBuffer { return &tailBuffer{max: max} }

func (b *tailBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	b.buf = append(b.buf, p...)
	if over := len(b.buf) - b.max; over > 0 {
		b.buf = append(b.buf[:0], b.buf[over:]...)
	}
	return len(p), nil
}

func (b *tailBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return string(b.buf)
}

// Tail returns the last n lines.
func (b *tailBuffer) Tail(n int) string {
	lines := strings.Split(strings.TrimRight(b.String(), "\n"), "\n")
	if len(lines) > n {
		lines = lines[len(lines)-n:]
	}
	return strings.Join(lines, "\n")
}

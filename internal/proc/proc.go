// Package proc is how kvbench's process meets its signals and its terminal: a stop signal
// ends a run the way Ctrl-C does, and live console lines are drawn only on a terminal.
package proc

import (
	"context"
	"fmt"
	"io"
	"os"
	"os/signal"
	"syscall"

	"golang.org/x/term"
)

// StopSignals end a run the way Ctrl-C does: the context is cancelled, what was measured is
// written, the status is interrupted. SIGPIPE is among them so that `kvbench run ... | head`
// does not kill the process on its next console line: caught, a write to the closed pipe
// returns an error instead, and the run stops with its records. A SIGPIPE while stdout and
// stderr are open came from a socket (a server that reset a connection) and is ignored.
var StopSignals = []os.Signal{os.Interrupt, syscall.SIGTERM, syscall.SIGHUP, syscall.SIGPIPE}

// WithStopSignals returns a context cancelled by the first stop signal, its cause naming
// the signal. Later signals are caught too (a closed pipe raises SIGPIPE at every write)
// until stop is called.
func WithStopSignals(parent context.Context) (ctx context.Context, stop func()) {
	ctx, cancel := context.WithCancelCause(parent)
	ch := make(chan os.Signal, 4)
	signal.Notify(ch, StopSignals...)
	done := make(chan struct{})
	go func() {
		for {
			select {
			case sig := <-ch:
				if sig == syscall.SIGPIPE && !BrokenPipe(1, 2) {
					continue // a server's closed connection, not our stdout or stderr
				}
				cancel(fmt.Errorf("received %s", signalName(sig)))
			case <-done:
				return
			}
		}
	}()
	return ctx, func() {
		signal.Stop(ch)
		close(done)
		cancel(nil)
	}
}

func signalName(sig os.Signal) string {
	switch sig {
	case os.Interrupt:
		return "SIGINT"
	case syscall.SIGTERM:
		return "SIGTERM"
	case syscall.SIGHUP:
		return "SIGHUP"
	case syscall.SIGPIPE:
		return "SIGPIPE (stdout or stderr closed)"
	}
	return sig.String()
}

// IsTerminal reports whether w is a terminal (live console lines). Asking the terminal
// driver, not the file mode, tells a terminal from other character devices (/dev/null).
func IsTerminal(w io.Writer) bool {
	f, ok := w.(*os.File)
	return ok && term.IsTerminal(int(f.Fd()))
}

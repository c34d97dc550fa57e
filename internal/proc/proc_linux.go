package proc

import "golang.org/x/sys/unix"

// BrokenPipe reports whether any of fds is a pipe or socket whose reader has gone. Caught,
// SIGPIPE also comes from a write to a server's closed connection (net/http writes to
// sockets without MSG_NOSIGNAL), and that must not stop a run as a closed stdout does.
func BrokenPipe(fds ...int) bool {
	p := make([]unix.PollFd, len(fds))
	for i, fd := range fds {
		p[i].Fd = int32(fd)
	}
	n, err := unix.Poll(p, 0)
	if err != nil {
		return true // cannot tell: stop, as for a closed stdout
	}
	if n == 0 {
		return false
	}
	for _, f := range p {
		if f.Revents&(unix.POLLERR|unix.POLLHUP) != 0 {
			return true
		}
	}
	return false
}

package main

import (
	"syscall"
	"unsafe"
)

// Linux poll(2) flags.
const (
	pollErr = 0x8
	pollHup = 0x10
)

// brokenPipe reports whether any of fds is a pipe or socket whose reader has gone. Caught,
// SIGPIPE also comes from a write to a server's closed connection (net/http writes to
// sockets without MSG_NOSIGNAL), and that must not stop a run as a closed stdout does.
func brokenPipe(fds ...int) bool {
	type pollFd struct {
		fd              int32
		events, revents int16
	}
	p := make([]pollFd, len(fds))
	for i, fd := range fds {
		p[i].fd = int32(fd)
	}
	var zero syscall.Timespec
	n, _, errno := syscall.Syscall6(syscall.SYS_PPOLL, uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)),
		uintptr(unsafe.Pointer(&zero)), 0, 0, 0)
	if errno != 0 {
		return true // cannot tell: stop, as for a closed stdout
	}
	if n == 0 {
		return false
	}
	for _, f := range p {
		if f.revents&(pollErr|pollHup) != 0 {
			return true
		}
	}
	return false
}

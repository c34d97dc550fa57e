//go:build !race

package client

import (
	"syscall"
	"unsafe"
)

func rawRead(fd int, p []byte) (int, error) {
	n, _, errno := syscall.RawSyscall(syscall.SYS_READ, uintptr(fd), uintptr(unsafe.Pointer(&p[0])), uintptr(len(p)))
	if errno != 0 {
		return 0, errno
	}
	return int(n), nil
}

func raceReleaseIO(int) {}

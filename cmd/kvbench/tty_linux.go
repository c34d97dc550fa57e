package main

import (
	"syscall"
	"unsafe"
)

// isTTY tells a terminal from other character devices (/dev/null reads as one too): only a
// terminal answers TCGETS.
func isTTY(fd uintptr) bool {
	var t syscall.Termios
	_, _, errno := syscall.Syscall(syscall.SYS_IOCTL, fd, syscall.TCGETS, uintptr(unsafe.Pointer(&t)))
	return errno == 0
}

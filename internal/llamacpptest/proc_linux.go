package llamacpptest

import "syscall"

// sysProcAttr makes the kernel kill the server when the process that started it dies, so
// a test binary that panics or times out cannot leave a server behind.
func sysProcAttr() *syscall.SysProcAttr {
	return &syscall.SysProcAttr{Pdeathsig: syscall.SIGKILL}
}

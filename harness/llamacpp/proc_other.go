//go:build !linux

package llamacpp

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; callers rely on Close.
func sysProcAttr() *syscall.SysProcAttr { return nil }

//go:build !linux

package llamacpptest

import "syscall"

// sysProcAttr has no parent-death signal outside Linux; callers rely on Close.
func sysProcAttr() *syscall.SysProcAttr { return nil }

//go:build race

package client

import "syscall"

// Under the race detector the loop's I/O goes through package syscall, whose calls tell
// the detector that I/O orders memory (a test's server writes what its client reads back):
// raw calls would make it report races the network rules out.

func rawRead(fd int, p []byte) (int, error) { return syscall.Read(fd, p) }

// raceReleaseIO announces a send: a zero-length write carries the detector's release and
// sends nothing.
func raceReleaseIO(fd int) { syscall.Write(fd, nil) }

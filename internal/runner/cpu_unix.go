//go:build unix

package runner

import (
	"time"

	"golang.org/x/sys/unix"
)

// processCPU is the user and system CPU time of this process so far.
func processCPU() (time.Duration, bool) {
	var ru unix.Rusage
	if unix.Getrusage(unix.RUSAGE_SELF, &ru) != nil {
		return 0, false
	}
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano()), true
}

//go:build !unix

package runner

import "time"

// processCPU is not read here: step records leave the client's cost out.
func processCPU() (time.Duration, bool) { return 0, false }

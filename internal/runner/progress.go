package runner

import (
	"fmt"
	"time"

	"github.com/anvil-serving/kvbench/harness/units"
)

// ProgressText says how far a long step has got: done of total units (requests, steps,
// levels), the percentage, the rate of requests (requests done over elapsed) and the time
// left at that pace, e.g. "40/100 requests (40%), 3.9 requests/s, ETA 15s". Before anything
// is done neither rate nor ETA is known, and they are left out; once all are done the ETA is.
func ProgressText(done, total int, unit string, requests int, elapsed time.Duration) string {
	text := fmt.Sprintf("%d/%d %s", done, total, unit)
	if total > 0 {
		text += fmt.Sprintf(" (%d%%)", 100*done/total)
	}
	secs := elapsed.Seconds()
	if requests > 0 && secs > 0 {
		rate := float64(requests) / secs
		text += fmt.Sprintf(", %s requests/s", units.Scale(units.PerSecond, rate).Format(rate))
	}
	if done > 0 && done < total && secs > 0 {
		text += ", ETA " + eta(time.Duration(float64(elapsed)*float64(total-done)/float64(done)))
	}
	return text
}

// eta words a time left, to the second.
func eta(d time.Duration) string {
	if d < time.Second {
		return "<1s"
	}
	return d.Round(time.Second).String()
}

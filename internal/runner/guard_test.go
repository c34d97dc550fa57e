package runner

import (
	"context"
	"errors"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// scriptedSource answers each scrape from a script: an error, a hang (until its context
// ends), or a snapshot.
type scriptedSource struct {
	script []string // "ok", "err" or "hang"; the last entry repeats
	n      int
}

func (s *scriptedSource) Snapshot(ctx context.Context) (metrics.Snapshot, error) {
	step := s.script[min(s.n, len(s.script)-1)]
	s.n++
	switch step {
	case "err":
		return metrics.Snapshot{}, errors.New("500 Internal Server Error")
	case "hang":
		<-ctx.Done()
		return metrics.Snapshot{}, ctx.Err()
	}
	return metrics.Snapshot{}, nil
}

func TestMetricsGuardStopsOnDeadMetrics(t *testing.T) {
	cases := []struct {
		script []string
		scrape int // scrapes made
		dead   int // the scrape after which dead is called (0: never)
	}{
		{[]string{"ok"}, 10, 0},
		{[]string{"err", "err", "ok", "err", "err", "ok"}, 6, 0}, // a success resets the count
		{[]string{"ok", "err"}, 6, 4},
		{[]string{"hang"}, 3, 3}, // each hang is cut at the budget and counts
	}
	for _, c := range cases {
		var deadAt int
		var why error
		g := &metricsGuard{inner: &scriptedSource{script: c.script}, budget: 20 * time.Millisecond, limit: 3}
		for i := 1; i <= c.scrape; i++ {
			g.dead = func(err error) {
				if deadAt == 0 {
					deadAt, why = i, err
				}
			}
			g.Snapshot(context.Background())
		}
		if deadAt != c.dead {
			t.Errorf("%v: dead after scrape %d, want %d", c.script, deadAt, c.dead)
		}
		if c.dead > 0 && !strings.Contains(why.Error(), "/metrics stopped answering: 3 scrapes in a row failed") {
			t.Errorf("%v: reason %q", c.script, why)
		}
	}
}

func TestMetricsGuardIgnoresTheRunsOwnCancel(t *testing.T) {
	g := &metricsGuard{inner: &scriptedSource{script: []string{"hang"}}, budget: time.Minute, limit: 1,
		dead: func(err error) { t.Fatalf("a cancelled run's scrape counted as dead /metrics: %v", err) }}
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	if _, err := g.Snapshot(ctx); err == nil {
		t.Fatal("a cancelled scrape succeeded")
	}
}

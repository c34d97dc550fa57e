package runner

import (
	"context"
	"fmt"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// Scrape limits: /metrics answers in milliseconds on a healthy server, so a scrape that takes
// longer than ScrapeBudget is a failure, and DeadScrapes failures in a row mean the counters
// are gone: the run stops instead of paying the budget for every request it has left.
const (
	ScrapeBudget = 10 * time.Second
	DeadScrapes  = 3
)

// metricsGuard bounds each scrape of the wrapped source and calls dead once DeadScrapes
// scrapes in a row have failed. A scrape cut short by the run's own cancellation is not a
// failure of the server's.
type metricsGuard struct {
	inner  MetricsSource
	budget time.Duration
	limit  int
	dead   func(error)

	mu       sync.Mutex
	failures int
}

var _ MetricsSource = (*metricsGuard)(nil)

func (g *metricsGuard) Snapshot(ctx context.Context) (metrics.Snapshot, error) {
	sctx, cancel := context.WithTimeout(ctx, g.budget)
	defer cancel()
	s, err := g.inner.Snapshot(sctx)
	if ctx.Err() != nil {
		return s, err
	}
	g.mu.Lock()
	if err == nil {
		g.failures = 0
	} else {
		g.failures++
	}
	n := g.failures
	g.mu.Unlock()
	if err != nil && n == g.limit {
		g.dead(fmt.Errorf("the server's /metrics stopped answering: %d scrapes in a row failed (each allowed %s), the last: %w", n, g.budget, err))
	}
	return s, err
}

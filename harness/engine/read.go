package engine

import (
	"context"
	"net/http"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// CountersSchema is the schema of the readings kvbench counters prints.
const CountersSchema = "anvil-serving.kvbench-counters/v1"

// ReadCounters reads the /metrics URLs or saved exposition files of one target and returns
// their summed readings under backend's counter names, with overrides (COUNTER=SELECTOR)
// applied; each URL is read within timeout. Every error is bad input: an unknown engine or
// override, or a source that is not an exposition.
func ReadCounters(ctx context.Context, backend string, overrides []string, timeout time.Duration, sources []string) (metrics.Snapshot, error) {
	profile, err := CounterProfile(backend, overrides)
	if err != nil {
		return metrics.Snapshot{}, err
	}
	client := &http.Client{Timeout: timeout}
	exps := make([]metrics.Exposition, len(sources))
	for i, src := range sources {
		if exps[i], err = metrics.Read(ctx, client, src); err != nil {
			return metrics.Snapshot{}, err
		}
	}
	return profile.Snapshot(exps...), nil
}

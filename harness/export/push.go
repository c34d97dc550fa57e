package export

import (
	"context"
	"fmt"
	"net/http"
	"time"

	"github.com/prometheus/client_golang/prometheus"
	"github.com/prometheus/client_golang/prometheus/push"
	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// DefaultPushTimeout bounds one push, connection and answer included.
const DefaultPushTimeout = 30 * time.Second

// PushOptions say where and how a run is pushed.
type PushOptions struct {
	// URL is the Pushgateway's base URL (http://pushgateway:9091); user info in it is sent
	// as basic auth and never printed.
	URL string
	// Labels extend the grouping key (job, scenario, recipe, endpoint).
	Labels []Label
	// Timeout bounds the push; 0 means DefaultPushTimeout.
	Timeout time.Duration
}

// Push replaces r's group on the Pushgateway (HTTP PUT) with r's series: the group's key is
// job "kvbench", r's identity and opts.Labels, so a series the last run had and this one has
// not (another verdict, a request that failed) is gone. Errors are redacted.
func Push(ctx context.Context, r *runs.Run, opts PushOptions) error {
	fams, err := Families(r, nil)
	if err != nil {
		return err
	}
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultPushTimeout
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := push.New(opts.URL, Job).
		Client(&http.Client{Timeout: timeout}).
		Gatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil }))
	for _, l := range append(Identity(r), opts.Labels...) {
		p = p.Grouping(l.Name, l.Value)
	}
	if err := p.PushContext(ctx); err != nil {
		return redact.Error(fmt.Errorf("pushing %s to %s: %w", r.Dir, redact.URL(opts.URL), err))
	}
	return nil
}

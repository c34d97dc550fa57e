package export

import (
	"context"
	"fmt"
	"net/http"
	"net/url"
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
	// as basic auth and never printed. A query string (a gateway behind a proxy that wants
	// ?token=...) is sent with every request, after the group's path.
	URL string
	// Labels extend the grouping key (job, scenario, recipe, endpoint).
	Labels []Label
	// Timeout bounds the push; 0 means DefaultPushTimeout.
	Timeout time.Duration
	// Username and Password, when Password is set, are sent as basic auth instead of URL user
	// info (read from a Secret's environment variables: never printed, never written).
	Username, Password string
	// PerRequest adds a series per request (--per-request-series); by default the series are
	// per step and per replay, a bounded number whatever the step's size.
	PerRequest bool
}

// Push replaces r's group on the Pushgateway (HTTP PUT) with r's series: the group's key is
// job "kvbench", r's identity and opts.Labels, so a series the last run had and this one has
// not (another verdict, a request that failed) is gone. Errors are redacted.
func Push(ctx context.Context, r *runs.Run, opts PushOptions) error {
	fams, err := FamiliesFor(r, nil, opts.PerRequest)
	if err != nil {
		return err
	}
	if err := PushFamilies(ctx, fams, Job, append(Identity(r), opts.Labels...), opts); err != nil {
		return fmt.Errorf("%s: %w", r.Dir, err)
	}
	return nil
}

// PushFamilies replaces the group of job and grouping on the Pushgateway with fams. Errors
// are redacted.
func PushFamilies(ctx context.Context, fams []*dto.MetricFamily, job string, grouping []Label, opts PushOptions) error {
	timeout := opts.Timeout
	if timeout <= 0 {
		timeout = DefaultPushTimeout
	}
	base, query, err := splitQuery(opts.URL)
	if err != nil {
		return redact.Error(fmt.Errorf("pushing to %s: %w", redact.URL(opts.URL), err))
	}
	ctx, cancel := context.WithTimeout(ctx, timeout)
	defer cancel()
	p := push.New(base, job).
		Client(queryDoer{client: &http.Client{Timeout: timeout}, query: query}).
		Gatherer(prometheus.GathererFunc(func() ([]*dto.MetricFamily, error) { return fams, nil }))
	if opts.Password != "" {
		p = p.BasicAuth(opts.Username, opts.Password)
	}
	for _, l := range grouping {
		p = p.Grouping(l.Name, l.Value)
	}
	if err := p.PushContext(ctx); err != nil {
		return redact.Error(fmt.Errorf("pushing to %s: %w", redact.URL(opts.URL), err))
	}
	return nil
}

// splitQuery cuts raw's query string off: the push package appends the group's path to the
// URL as text, which would put it after the query.
func splitQuery(raw string) (base, query string, err error) {
	u, err := url.Parse(raw)
	if err != nil {
		return "", "", err
	}
	query = u.RawQuery
	u.RawQuery, u.ForceQuery, u.Fragment, u.RawFragment = "", false, "", ""
	return u.String(), query, nil
}

// queryDoer sends every request with the push URL's query string.
type queryDoer struct {
	client *http.Client
	query  string
}

func (d queryDoer) Do(req *http.Request) (*http.Response, error) {
	if d.query != "" {
		if req.URL.RawQuery != "" {
			req.URL.RawQuery += "&" + d.query
		} else {
			req.URL.RawQuery = d.query
		}
	}
	return d.client.Do(req)
}

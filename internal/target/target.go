// Package target resolves where a run's requests go and which secret goes with them, and
// refuses what a scenario file chose without the user: a scenario may come from a stranger,
// so neither a secret of this machine, a request to a host of the file's choosing nor a
// command of the file's runs on the file's word alone.
package target

import (
	"errors"
	"fmt"
	"io"
	"net"
	"net/url"
	"os"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/scenarios"
)

// DefaultEndpoint is where requests go when neither the scenario nor the user names a server.
const DefaultEndpoint = "http://127.0.0.1:8000/v1"

// Overrides are the command line's choices over a scenario's [target] table.
type Overrides struct {
	Endpoint  string
	Metrics   []string
	Model     string
	APIKeyEnv string
	Backend   string
	// Trace is the trace file the user names for the scenario's trace steps, TraceFormat
	// its format.
	Trace       string
	TraceFormat string
	// Shard is the part of each trace step's window to replay ("K/N"; "": all of it).
	Shard string
	// TrustHosts sends requests to the hosts the scenario file names.
	TrustHosts bool
}

// Resolved is a scenario's target after Apply, with what the scenario file chose that the
// command line left in place: the file's URLs and its API key variable.
type Resolved struct {
	o        Overrides
	fileURLs []fileURL
	fileKey  bool
}

// fileURL is a URL a scenario file named, with the key that named it.
type fileURL struct{ key, url string }

// Apply writes o over sc's target and fills the defaults (the endpoint, the engine's metrics
// URL), noting first which URLs and key variable the scenario file chose.
func Apply(sc *scenarios.Scenario, o Overrides) (*Resolved, error) {
	r := &Resolved{o: o, fileKey: o.APIKeyEnv == "" && sc.Target.APIKeyEnv != ""}
	if o.Endpoint == "" && sc.Target.Endpoint != "" {
		r.fileURLs = append(r.fileURLs, fileURL{"target.endpoint", sc.Target.Endpoint})
	}
	if o.Endpoint == "" && len(o.Metrics) == 0 {
		for _, m := range sc.Target.Metrics {
			r.fileURLs = append(r.fileURLs, fileURL{"target.metrics", m})
		}
	}
	if o.Endpoint != "" {
		sc.Target.Endpoint = o.Endpoint
		if len(o.Metrics) == 0 {
			sc.Target.Metrics = nil // the scenario's metrics URLs belong to its own endpoint
		}
	}
	if len(o.Metrics) > 0 {
		sc.Target.Metrics = slices.Clone(o.Metrics)
	}
	if o.Model != "" {
		sc.Target.Model = o.Model
	}
	if o.APIKeyEnv != "" {
		sc.Target.APIKeyEnv = o.APIKeyEnv
	}
	if o.Backend != "" {
		sc.Target.Backend = o.Backend
	}
	if o.Trace != "" {
		if !sc.HasTrace() {
			return nil, fmt.Errorf("--trace %s: %s has no step with kind = \"trace\"", o.Trace, sc.Path)
		}
		sc.UseTrace(o.Trace)
	}
	if o.TraceFormat != "" {
		f, err := trace.ParseFormat(o.TraceFormat)
		if err != nil {
			return nil, fmt.Errorf("--trace-format: %w", err)
		}
		if !sc.HasTrace() {
			return nil, fmt.Errorf("--trace-format %s: %s has no step with kind = \"trace\"", f, sc.Path)
		}
		sc.UseTraceFormat(f)
	}
	if o.Shard != "" {
		sh, err := trace.ParseShard(o.Shard)
		if err != nil {
			return nil, fmt.Errorf("--shard: %w", err)
		}
		if !sc.HasTrace() {
			return nil, fmt.Errorf("--shard %s: %s has no step with kind = \"trace\"", sh, sc.Path)
		}
		sc.UseShard(sh)
	}
	for _, u := range append([]string{sc.Target.Endpoint}, sc.Target.Metrics...) {
		if u != "" && !scenarios.IsHTTPURL(u) {
			return nil, fmt.Errorf("%q is not an http(s) URL", redact.URL(u))
		}
	}
	if sc.Target.Endpoint == "" {
		sc.Target.Endpoint = DefaultEndpoint
	}
	if len(sc.Target.Metrics) == 0 {
		sc.Target.Metrics = DefaultMetrics(sc.Target.Endpoint, sc.Target.Backend)
		if len(r.fileURLs) > 0 && r.fileURLs[0].key == "target.endpoint" {
			// The counters are read from the file's endpoint host too.
			r.fileURLs = append(r.fileURLs, fileURL{"target.endpoint", sc.Target.Metrics[0]})
		}
	}
	return r, nil
}

// DefaultMetrics is the /metrics URL of a server at endpoint, run by engine backend, when
// none is named: its root's /metrics, or the engine's own path.
func DefaultMetrics(endpoint, backend string) []string {
	path := "/metrics"
	if def, err := engine.ByName(backend); err == nil {
		path = def.DefaultMetricsPath() // trtllm-serve serves Prometheus text apart from /metrics
	}
	return []string{client.RootURL(endpoint) + path}
}

// Consent refuses, before anything is sent, what the scenario file chose and the user did
// not: the API key's variable is used only when the user names it; a URL to a host other
// than this machine (loopback) only with TrustHosts or when the user names the server.
func (r *Resolved) Consent(sc *scenarios.Scenario) error {
	var why []string
	if r.fileKey {
		why = append(why, fmt.Sprintf("%s: target.api_key_env: the scenario file asks to send the secret in $%s to %s; kvbench sends an API key only from a variable you name: pass --api-key-env %s to send it",
			sc.Position("target.api_key_env"), sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint), sc.Target.APIKeyEnv))
	}
	if !r.o.TrustHosts {
		for _, u := range r.fileURLs {
			if !IsLoopbackURL(u.url) {
				why = append(why, fmt.Sprintf("%s: %s: requests would go to %s, a host the scenario file names, not you: name the server with --endpoint (and --metrics), or pass --trust-hosts to send them there",
					sc.Position(u.key), u.key, hostOf(u.url)))
			}
		}
	}
	if len(why) > 0 {
		return errors.New(strings.Join(why, "; "))
	}
	return nil
}

// Destination says in one line where sc's requests go and which key goes with them (the
// variable's name, never its value), URLs redacted: what a command prints before it sends
// anything.
func Destination(sc *scenarios.Scenario) string {
	metricsURLs := make([]string, len(sc.Target.Metrics))
	for i, m := range sc.Target.Metrics {
		metricsURLs[i] = redact.URL(m)
	}
	key := "no API key"
	if sc.Target.APIKeyEnv != "" {
		key = "API key from $" + sc.Target.APIKeyEnv
	}
	return fmt.Sprintf("requests go to %s (counters from %s), %s", redact.URL(sc.Target.Endpoint), strings.Join(metricsURLs, ", "), key)
}

// WriteTrust writes where sc's requests would go, who named each destination and the key's
// variable, and what a run needs to use them.
func (r *Resolved) WriteTrust(w io.Writer, sc *scenarios.Scenario) error {
	named := map[string]bool{}
	for _, u := range r.fileURLs {
		named[u.url] = true
	}
	whose := func(u string) string {
		switch {
		case !named[u] && (u == r.o.Endpoint || slices.Contains(r.o.Metrics, u) || r.o.Endpoint != "" && len(r.o.Metrics) == 0):
			return "command line"
		case !named[u]:
			return "kvbench's default"
		case IsLoopbackURL(u):
			return "scenario file, this machine"
		case r.o.TrustHosts:
			return "scenario file, trusted with --trust-hosts"
		default:
			return "scenario file, another host: run needs --endpoint or --trust-hosts"
		}
	}
	var b strings.Builder
	fmt.Fprintf(&b, "  requests to   %s (%s)\n", redact.URL(sc.Target.Endpoint), whose(sc.Target.Endpoint))
	for _, m := range sc.Target.Metrics {
		fmt.Fprintf(&b, "  counters from %s (%s)\n", redact.URL(m), whose(m))
	}
	switch {
	case sc.Target.APIKeyEnv == "":
		fmt.Fprintf(&b, "  API key       none\n")
	case r.fileKey:
		fmt.Fprintf(&b, "  API key       $%s, named by the scenario file, would go to %s: sent only if you pass --api-key-env %s\n", sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint), sc.Target.APIKeyEnv)
	default:
		fmt.Fprintf(&b, "  API key       $%s (--api-key-env), sent to %s\n", sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint))
	}
	_, err := io.WriteString(w, b.String())
	return err
}

// hostOf is a URL's host:port, for saying where requests go; the redacted URL when it has no host.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return redact.URL(raw)
}

// IsLoopbackURL reports whether raw's host is this machine: localhost or a loopback address.
func IsLoopbackURL(raw string) bool {
	u, err := url.Parse(raw)
	if err != nil {
		return false
	}
	h := u.Hostname()
	if strings.EqualFold(h, "localhost") {
		return true
	}
	ip := net.ParseIP(h)
	return ip != nil && ip.IsLoopback()
}

// APIKey reads the key sc names from the environment.
func APIKey(sc *scenarios.Scenario) (string, error) {
	if sc.Target.APIKeyEnv == "" {
		return "", nil
	}
	key, ok := os.LookupEnv(sc.Target.APIKeyEnv)
	if !ok || key == "" {
		return "", fmt.Errorf("environment variable %s (target.api_key_env) is not set", sc.Target.APIKeyEnv)
	}
	// A key read from a file often keeps its newline; no HTTP header can carry it.
	if strings.ContainsFunc(key, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", fmt.Errorf("environment variable %s (target.api_key_env) holds a bad API key: it contains a newline or another control character", sc.Target.APIKeyEnv)
	}
	return key, nil
}

package main

import (
	"flag"
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
	"github.com/anvil-serving/kvbench/scenarios"
)

// targetFlags are the command-line overrides of a scenario's [target] table, and what apply
// found the scenario file itself chose: where requests go and which secret goes with them
// are the user's to say (see consent).
type targetFlags struct {
	endpoint   string
	metrics    stringList
	model      string
	apiKeyEnv  string
	backend    string
	trustHosts bool
	// trace is the trace the user names for the scenario's trace steps.
	trace string

	// fileURLs are the URLs requests will go to that the scenario file named, the command
	// line not overriding them; fileKey: the file alone named the API key's variable.
	fileURLs []fileURL
	fileKey  bool
}

// fileURL is a URL a scenario file named, with the key that named it.
type fileURL struct{ key, url string }

func (t *targetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.endpoint, "endpoint", "", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (overrides target.endpoint)")
	fs.Var(&t.metrics, "metrics", "Prometheus /metrics URL; repeat for several (overrides target.metrics)")
	fs.StringVar(&t.model, "model", "", "served model name (overrides target.model)")
	fs.StringVar(&t.apiKeyEnv, "api-key-env", "", "environment variable holding the API key (overrides target.api_key_env)")
	fs.StringVar(&t.backend, "backend", "", "engine (metric names and evidence): "+strings.Join(engine.Names(), ", ")+" (overrides target.backend)")
	fs.StringVar(&t.trace, "trace", "", "the Mooncake-format trace the scenario's trace steps replay (overrides step.file; read wherever it lies: a scenario may name only a trace inside its own directory)")
	fs.BoolVar(&t.trustHosts, "trust-hosts", false, "send requests to the hosts the scenario file's target.endpoint and target.metrics name when they are not this machine (loopback); without it such a scenario is refused: name the server with --endpoint instead")
}

// apply writes the flags over sc's target and fills the derived defaults, noting first which
// URLs and key variable the scenario file chose that the flags leave in place (for consent).
func (t *targetFlags) apply(sc *scenarios.Scenario) error {
	t.fileURLs, t.fileKey = nil, t.apiKeyEnv == "" && sc.Target.APIKeyEnv != ""
	if t.endpoint == "" && sc.Target.Endpoint != "" {
		t.fileURLs = append(t.fileURLs, fileURL{"target.endpoint", sc.Target.Endpoint})
	}
	if t.endpoint == "" && len(t.metrics) == 0 {
		for _, m := range sc.Target.Metrics {
			t.fileURLs = append(t.fileURLs, fileURL{"target.metrics", m})
		}
	}
	if t.endpoint != "" {
		sc.Target.Endpoint = t.endpoint
		if len(t.metrics) == 0 {
			sc.Target.Metrics = nil // the scenario's metrics URLs belong to its own endpoint
		}
	}
	if len(t.metrics) > 0 {
		sc.Target.Metrics = append([]string(nil), t.metrics...)
	}
	if t.model != "" {
		sc.Target.Model = t.model
	}
	if t.apiKeyEnv != "" {
		sc.Target.APIKeyEnv = t.apiKeyEnv
	}
	if t.backend != "" {
		sc.Target.Backend = t.backend
	}
	if t.trace != "" {
		if !sc.HasTrace() {
			return usageErrorf("--trace %s: %s has no step with kind = \"trace\"", t.trace, sc.Path)
		}
		sc.UseTrace(t.trace)
	}
	for _, u := range append([]string{sc.Target.Endpoint}, sc.Target.Metrics...) {
		if u != "" && !scenarios.IsHTTPURL(u) {
			return usageErrorf("%q is not an http(s) URL", redact.URL(u))
		}
	}
	if sc.Target.Endpoint == "" {
		sc.Target.Endpoint = "http://127.0.0.1:8000/v1"
	}
	if len(sc.Target.Metrics) == 0 {
		path := "/metrics"
		if def, err := engine.ByName(sc.Target.Backend); err == nil {
			path = def.DefaultMetricsPath() // trtllm-serve serves Prometheus text apart from /metrics
		}
		sc.Target.Metrics = []string{client.RootURL(sc.Target.Endpoint) + path}
		if len(t.fileURLs) > 0 && t.fileURLs[0].key == "target.endpoint" {
			// The counters are read from the file's endpoint host too.
			t.fileURLs = append(t.fileURLs, fileURL{"target.endpoint", sc.Target.Metrics[0]})
		}
	}
	return nil
}

// consent refuses, before anything is sent, what the scenario file chose and the user did
// not: a file may come from a stranger, and neither a secret of this machine nor a request
// to a host of the file's choosing leaves it on the file's word alone. The API key's variable
// is used only when --api-key-env names it; a URL to a host other than this machine
// (loopback) only with --trust-hosts or when the command line names the server instead.
func (t *targetFlags) consent(sc *scenarios.Scenario) error {
	var why []string
	if t.fileKey {
		why = append(why, fmt.Sprintf("%s: target.api_key_env: the scenario file asks to send the secret in $%s to %s; kvbench sends an API key only from a variable you name: pass --api-key-env %s to send it",
			sc.Position("target.api_key_env"), sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint), sc.Target.APIKeyEnv))
	}
	if !t.trustHosts {
		for _, u := range t.fileURLs {
			if !isLoopbackURL(u.url) {
				why = append(why, fmt.Sprintf("%s: %s: requests would go to %s, a host the scenario file names, not you: name the server with --endpoint (and --metrics), or pass --trust-hosts to send them there",
					sc.Position(u.key), u.key, hostOf(u.url)))
			}
		}
	}
	if len(why) > 0 {
		return usageErrorf("%s", strings.Join(why, "; "))
	}
	return nil
}

// destination says in one line where sc's requests go and which key goes with them (the
// variable's name, never its value), URLs redacted: what run, sweep, preflight and plan print
// before they send anything.
func destination(sc *scenarios.Scenario) string {
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

// writeTrust prints, for validate and plan, where sc's requests would go and who named each
// destination and the key's variable, with what a run needs to use them.
func (t *targetFlags) writeTrust(w io.Writer, sc *scenarios.Scenario) {
	named := map[string]bool{}
	for _, u := range t.fileURLs {
		named[u.url] = true
	}
	whose := func(u string) string {
		switch {
		case !named[u] && (u == t.endpoint || slices.Contains(t.metrics, u) || t.endpoint != "" && len(t.metrics) == 0):
			return "command line"
		case !named[u]:
			return "kvbench's default"
		case isLoopbackURL(u):
			return "scenario file, this machine"
		case t.trustHosts:
			return "scenario file, trusted with --trust-hosts"
		default:
			return "scenario file, another host: run needs --endpoint or --trust-hosts"
		}
	}
	fmt.Fprintf(w, "  requests to   %s (%s)\n", redact.URL(sc.Target.Endpoint), whose(sc.Target.Endpoint))
	for _, m := range sc.Target.Metrics {
		fmt.Fprintf(w, "  counters from %s (%s)\n", redact.URL(m), whose(m))
	}
	switch {
	case sc.Target.APIKeyEnv == "":
		fmt.Fprintf(w, "  API key       none\n")
	case t.fileKey:
		fmt.Fprintf(w, "  API key       $%s, named by the scenario file, would go to %s: sent only if you pass --api-key-env %s\n", sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint), sc.Target.APIKeyEnv)
	default:
		fmt.Fprintf(w, "  API key       $%s (--api-key-env), sent to %s\n", sc.Target.APIKeyEnv, hostOf(sc.Target.Endpoint))
	}
}

// hostOf is a URL's host:port, for saying where requests go; the redacted URL when it has no host.
func hostOf(raw string) string {
	if u, err := url.Parse(raw); err == nil && u.Host != "" {
		return u.Host
	}
	return redact.URL(raw)
}

// isLoopbackURL reports whether raw's host is this machine: localhost or a loopback address.
func isLoopbackURL(raw string) bool {
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

// apiKey reads the key named by the scenario from the environment.
func apiKey(sc *scenarios.Scenario) (string, error) {
	if sc.Target.APIKeyEnv == "" {
		return "", nil
	}
	key, ok := os.LookupEnv(sc.Target.APIKeyEnv)
	if !ok || key == "" {
		return "", usageErrorf("environment variable %s (target.api_key_env) is not set", sc.Target.APIKeyEnv)
	}
	// A key read from a file often keeps its newline; no HTTP header can carry it.
	if strings.ContainsFunc(key, func(r rune) bool { return r < ' ' || r == 0x7f }) {
		return "", usageErrorf("environment variable %s (target.api_key_env) holds a bad API key: it contains a newline or another control character", sc.Target.APIKeyEnv)
	}
	return key, nil
}

// loadScenario resolves a name or file and maps its problems to a usage error.
func loadScenario(nameOrPath string) (*scenarios.Scenario, error) {
	sc, err := scenarios.Resolve(nameOrPath)
	if err != nil {
		return nil, usageError(err)
	}
	return sc, nil
}

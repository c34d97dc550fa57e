package main

import (
	"flag"
	"os"
	"strings"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/scenarios"
)

// targetFlags are the command-line overrides of a scenario's [target] table.
type targetFlags struct {
	endpoint  string
	metrics   stringList
	model     string
	apiKeyEnv string
	backend   string
}

func (t *targetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.endpoint, "endpoint", "", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (overrides target.endpoint)")
	fs.Var(&t.metrics, "metrics", "Prometheus /metrics URL; repeat for several (overrides target.metrics)")
	fs.StringVar(&t.model, "model", "", "served model name (overrides target.model)")
	fs.StringVar(&t.apiKeyEnv, "api-key-env", "", "environment variable holding the API key (overrides target.api_key_env)")
	fs.StringVar(&t.backend, "backend", "", "engine (metric names and evidence): "+strings.Join(engine.Names(), ", ")+" (overrides target.backend)")
}

// apply writes the flags over sc's target and fills the derived defaults.
func (t *targetFlags) apply(sc *scenarios.Scenario) error {
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
	for _, u := range append([]string{sc.Target.Endpoint}, sc.Target.Metrics...) {
		if u != "" && !scenarios.IsHTTPURL(u) {
			return usageErrorf("%q is not an http(s) URL", redact.URL(u))
		}
	}
	if sc.Target.Endpoint == "" {
		sc.Target.Endpoint = "http://127.0.0.1:8000/v1"
	}
	if len(sc.Target.Metrics) == 0 {
		sc.Target.Metrics = []string{client.RootURL(sc.Target.Endpoint) + "/metrics"}
	}
	return nil
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

package main

import (
	"flag"
	"strings"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/scenarios"
)

// targetFlags are the command-line overrides of a scenario's [target] table; resolved is
// what apply found, for consent.
type targetFlags struct {
	target.Overrides
	metrics  stringList
	resolved *target.Resolved
}

func (t *targetFlags) register(fs *flag.FlagSet) {
	fs.StringVar(&t.Endpoint, "endpoint", "", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (overrides target.endpoint)")
	fs.Var(&t.metrics, "metrics", "Prometheus /metrics URL; repeat for several (overrides target.metrics)")
	fs.StringVar(&t.Model, "model", "", "served model name (overrides target.model)")
	fs.StringVar(&t.APIKeyEnv, "api-key-env", "", "environment variable holding the API key (overrides target.api_key_env)")
	fs.StringVar(&t.Backend, "backend", "", "engine (metric names and evidence): "+strings.Join(engine.Names(), ", ")+" (overrides target.backend)")
	fs.StringVar(&t.Trace, "trace", "", "the Mooncake-format trace the scenario's trace steps replay (overrides step.file; read wherever it lies: a scenario may name only a trace inside its own directory)")
	fs.BoolVar(&t.TrustHosts, "trust-hosts", false, "send requests to the hosts the scenario file's target.endpoint and target.metrics name when they are not this machine (loopback); without it such a scenario is refused: name the server with --endpoint instead")
}

// apply writes the flags over sc's target (see target.Apply).
func (t *targetFlags) apply(sc *scenarios.Scenario) error {
	t.Metrics = t.metrics
	r, err := target.Apply(sc, t.Overrides)
	t.resolved = r
	return usageError(err)
}

// consent refuses what the scenario file chose and the user did not (see Resolved.Consent).
func (t *targetFlags) consent(sc *scenarios.Scenario) error {
	return usageError(t.resolved.Consent(sc))
}

// scenario loads the one scenario args name (for command cmd) and applies the flags.
func (t *targetFlags) scenario(cmd string, args []string) (*scenarios.Scenario, error) {
	if len(args) != 1 {
		return nil, usageErrorf("%s: want one scenario file or built-in name, got %d", cmd, len(args))
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return nil, err
	}
	return sc, t.apply(sc)
}

// loadScenario resolves a name or file and maps its problems to a usage error.
func loadScenario(nameOrPath string) (*scenarios.Scenario, error) {
	sc, err := scenarios.Resolve(nameOrPath)
	return sc, usageError(err)
}

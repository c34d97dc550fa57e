package target

import (
	"flag"
	"strings"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Flags are the command-line overrides of a scenario's [target] table (--endpoint,
// --metrics, ...); Resolved is what Apply found, for consent. Each method's error is bad
// input (exit 2).
type Flags struct {
	Overrides
	MetricsURLs cli.StringList
	Resolved    *Resolved
}

// Register adds the flags to fs.
func (t *Flags) Register(fs *flag.FlagSet) {
	fs.StringVar(&t.Endpoint, "endpoint", "", "OpenAI-compatible base URL, e.g. http://127.0.0.1:8000/v1 (overrides target.endpoint)")
	fs.Var(&t.MetricsURLs, "metrics", "Prometheus /metrics URL; repeat for several (overrides target.metrics)")
	fs.StringVar(&t.Model, "model", "", "served model name (overrides target.model)")
	fs.StringVar(&t.APIKeyEnv, "api-key-env", "", "environment variable holding the API key (overrides target.api_key_env)")
	fs.StringVar(&t.Backend, "backend", "", "engine (metric names and evidence): "+strings.Join(engine.Names(), ", ")+" (overrides target.backend)")
	fs.StringVar(&t.Trace, "trace", "", "the trace the scenario's trace steps replay (overrides step.file; read wherever it lies: a scenario may name only a trace inside its own directory)")
	fs.StringVar(&t.TraceFormat, "trace-format", "", "the format of the trace steps' trace: auto (told from its content), mooncake, bailian, burstgpt or azure (overrides step.format; docs/traces.md)")
	fs.StringVar(&t.Shard, "shard", "", "replay shard K/N of each trace step's window: a deterministic 1/N of its requests (by session where the trace names one, else round robin), each at its trace time; N clients with K = 1..N replay the window together (docs/traces.md)")
	fs.BoolVar(&t.TrustHosts, "trust-hosts", false, "send requests to the hosts the scenario file's target.endpoint and target.metrics name when they are not this machine (loopback); without it such a scenario is refused: name the server with --endpoint instead")
}

// Apply writes the flags over sc's target (see the package's Apply).
func (t *Flags) Apply(sc *scenarios.Scenario) error {
	t.Metrics = t.MetricsURLs
	r, err := Apply(sc, t.Overrides)
	t.Resolved = r
	return cli.UsageError(err)
}

// Consent refuses what the scenario file chose and the user did not (see Resolved.Consent).
func (t *Flags) Consent(sc *scenarios.Scenario) error {
	return cli.UsageError(t.Resolved.Consent(sc))
}

// Scenario loads the one scenario args name (for command cmd) and applies the flags.
func (t *Flags) Scenario(cmd string, args []string) (*scenarios.Scenario, error) {
	if len(args) != 1 {
		return nil, cli.Usagef("%s: want one scenario file or built-in name, got %d", cmd, len(args))
	}
	sc, err := scenarios.Resolve(args[0])
	if err != nil {
		return nil, cli.UsageError(err)
	}
	return sc, t.Apply(sc)
}

// Key is the API key a run of sc sends, once the user's consent covers what the scenario
// file chose (Consent); either refusal is bad input.
func (t *Flags) Key(sc *scenarios.Scenario) (string, error) {
	if err := t.Consent(sc); err != nil {
		return "", err
	}
	key, err := APIKey(sc)
	return key, cli.UsageError(err)
}

// Admit is Resolved.Admit (consent, probes, key) with each refusal bad input.
func (t *Flags) Admit(sc *scenarios.Scenario, allowProbes, noProbes bool) (string, error) {
	key, err := t.Resolved.Admit(sc, allowProbes, noProbes)
	return key, cli.UsageError(err)
}

package target

import (
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/scenarios"
)

// stranger is a scenario whose file names another host's endpoint and metrics, an API key
// variable and a probe: everything a stranger's file may ask for.
func stranger(t *testing.T) *scenarios.Scenario {
	t.Helper()
	sc, err := scenarios.Parse([]byte(`name = "stranger"
[target]
endpoint = "http://192.0.2.7:19000/v1"
metrics = ["http://192.0.2.8:9100/metrics"]
api_key_env = "STRANGER_KEY"
model = "m"
[prompt]
seed = 1
[[step]]
id = "a"
planned_context_tokens = [500]
[[probe]]
name = "p"
when = "before"
command = ["true"]
`), "stranger.toml")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

// TestFileChoicesNeedConsent: the file's hosts and key variable are refused, each with the
// way to consent; --trust-hosts consents to the hosts, --endpoint replaces them (and the
// file's metrics URLs, which belong to its endpoint), --api-key-env names the key.
func TestFileChoicesNeedConsent(t *testing.T) {
	sc := stranger(t)
	r, err := Apply(sc, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	err = r.Consent(sc)
	if err == nil {
		t.Fatal("a stranger's hosts and key variable were accepted")
	}
	for _, want := range []string{"target.endpoint: requests would go to 192.0.2.7:19000", "target.metrics: requests would go to 192.0.2.8:9100", "--trust-hosts", "pass --api-key-env STRANGER_KEY"} {
		if !strings.Contains(err.Error(), want) {
			t.Errorf("refusal %q lacks %q", err, want)
		}
	}
	for name, o := range map[string]Overrides{
		"--trust-hosts": {TrustHosts: true, APIKeyEnv: "STRANGER_KEY"},
		"--endpoint":    {Endpoint: "http://127.0.0.1:8000/v1", APIKeyEnv: "STRANGER_KEY"},
		"another host":  {Endpoint: "http://192.0.2.9:8000/v1", APIKeyEnv: "STRANGER_KEY"}, // the user's own choice
	} {
		sc := stranger(t)
		r, err := Apply(sc, o)
		if err != nil {
			t.Fatal(err)
		}
		if err := r.Consent(sc); err != nil {
			t.Errorf("%s: %v", name, err)
		}
		if o.Endpoint != "" && (len(sc.Target.Metrics) != 1 || !strings.HasPrefix(sc.Target.Metrics[0], o.Endpoint[:len(o.Endpoint)-3])) {
			t.Errorf("%s: metrics %v do not follow the endpoint", name, sc.Target.Metrics)
		}
	}
}

// TestWriteTrustSaysWhoChose: validate and plan say who named each destination.
func TestWriteTrustSaysWhoChose(t *testing.T) {
	sc := stranger(t)
	r, err := Apply(sc, Overrides{})
	if err != nil {
		t.Fatal(err)
	}
	var b strings.Builder
	if err := r.WriteTrust(&b, sc); err != nil {
		t.Fatal(err)
	}
	for _, want := range []string{
		"requests to   http://192.0.2.7:19000/v1 (scenario file, another host: run needs --endpoint or --trust-hosts)",
		"API key       $STRANGER_KEY, named by the scenario file, would go to 192.0.2.7:19000: sent only if you pass --api-key-env STRANGER_KEY",
	} {
		if !strings.Contains(b.String(), want) {
			t.Errorf("trust lines lack %q:\n%s", want, b.String())
		}
	}
	sc = stranger(t)
	if r, err = Apply(sc, Overrides{Endpoint: "http://127.0.0.1:8000/v1"}); err != nil {
		t.Fatal(err)
	}
	b.Reset()
	if err := r.WriteTrust(&b, sc); err != nil {
		t.Fatal(err)
	}
	if !strings.Contains(b.String(), "requests to   http://127.0.0.1:8000/v1 (command line)") || !strings.Contains(b.String(), "counters from http://127.0.0.1:8000/metrics (command line)") {
		t.Errorf("the command line's endpoint not named as its:\n%s", b.String())
	}
}

// TestApplyRefusesBadURLs: a URL that is not http(s) is refused, credentials redacted.
func TestApplyRefusesBadURLs(t *testing.T) {
	sc := stranger(t)
	_, err := Apply(sc, Overrides{Endpoint: "ftp://user:hunter2@host/v1"})
	if err == nil || strings.Contains(err.Error(), "hunter2") || !strings.Contains(err.Error(), "not an http(s) URL") {
		t.Fatalf("err = %v", err)
	}
}

// TestAPIKey: the key comes from the variable, never a control character.
func TestAPIKey(t *testing.T) {
	sc := stranger(t)
	t.Setenv("STRANGER_KEY", "")
	if _, err := APIKey(sc); err == nil || !strings.Contains(err.Error(), "STRANGER_KEY (target.api_key_env) is not set") {
		t.Errorf("empty variable: %v", err)
	}
	t.Setenv("STRANGER_KEY", "sk-1\n")
	if _, err := APIKey(sc); err == nil || strings.Contains(err.Error(), "sk-1") {
		t.Errorf("key with a newline: %v", err)
	}
	t.Setenv("STRANGER_KEY", "sk-1")
	if k, err := APIKey(sc); err != nil || k != "sk-1" {
		t.Errorf("key = %q, %v", k, err)
	}
}

// TestProbeConsent: a scenario's probes run only with --allow-probes; --no-probes skips them.
func TestProbeConsent(t *testing.T) {
	sc := stranger(t)
	if err := ProbeConsent(sc, false, false); err == nil || !strings.Contains(err.Error(), "--allow-probes") {
		t.Errorf("probes without consent: %v", err)
	}
	if ProbeConsent(sc, true, false) != nil || ProbeConsent(sc, false, true) != nil {
		t.Error("consent or skip refused")
	}
	var b strings.Builder
	if err := WriteProbes(&b, sc); err != nil || !strings.Contains(b.String(), "probe p (before") {
		t.Errorf("probe listing %q, %v", b.String(), err)
	}
}

func TestIsLoopbackURL(t *testing.T) {
	for u, want := range map[string]bool{"http://127.0.0.1:8000/v1": true, "http://localhost/v1": true, "http://[::1]:80/": true, "http://192.0.2.7/": false, "http://example.com/": false, "%": false} {
		if got := IsLoopbackURL(u); got != want {
			t.Errorf("IsLoopbackURL(%q) = %v", u, got)
		}
	}
}

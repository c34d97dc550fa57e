package main

import (
	"bytes"
	"context"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"regexp"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// strangerScenario writes smoke with target put into its [target] table (a stranger's file).
func strangerScenario(t *testing.T, target string) string {
	t.Helper()
	base, err := os.ReadFile("../../scenarios/smoke.toml")
	if err != nil {
		t.Fatal(err)
	}
	return withTarget(t, strings.Replace(string(base), "endpoint = \"http://127.0.0.1:8000/v1\"\n", "", 1), target)
}

// strangerChat is the small conversation scenario with target in its [target] table.
func strangerChat(t *testing.T, target string) string { return withTarget(t, chatScenarioTOML, target) }

func withTarget(t *testing.T, text, target string) string {
	t.Helper()
	if !strings.Contains(text, "[target]\n") {
		t.Fatal("the scenario has no [target] table: update the test")
	}
	file := filepath.Join(t.TempDir(), "stranger.toml")
	if err := os.WriteFile(file, []byte(strings.Replace(text, "[target]\n", "[target]\n"+target, 1)), 0o644); err != nil {
		t.Fatal(err)
	}
	return file
}

// TestScenarioKeyNeedsConsent: a scenario file naming api_key_env does not get the secret
// in that variable on its own word: run, preflight, plan and sweep refuse it before any
// request, saying how to consent (--api-key-env naming the variable), and validate and plan
// show which variable would go to which host. With the consent, the key is sent, and it
// never reaches the console or a file.
func TestScenarioKeyNeedsConsent(t *testing.T) {
	const secret = "ghp-kvbench-test-secret-0123456789"
	t.Setenv("KVBENCH_TEST_SECRET", secret)
	var hits atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer counting.Close()
	host := strings.TrimPrefix(counting.URL, "http://")
	target := "endpoint = \"" + counting.URL + "/v1\"\napi_key_env = \"KVBENCH_TEST_SECRET\"\n"
	file := strangerScenario(t, target)
	chat := strangerChat(t, target)

	for _, args := range [][]string{
		{"run", file, "--out", t.TempDir()},
		{"preflight", file},
		{"plan", file},
		{"sweep", chat, "--users", "2", "--out", t.TempDir()},
	} {
		_, errOut, code := runCLI(t, args...)
		if code != cli.ExitUsage || !regexp.MustCompile(`stranger\.toml:\d+: target\.api_key_env: the scenario file asks to send the secret`).MatchString(errOut) ||
			!strings.Contains(errOut, "$KVBENCH_TEST_SECRET to "+host) || !strings.Contains(errOut, "pass --api-key-env KVBENCH_TEST_SECRET") || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%s: exit %d %q; want exit 2 naming the variable, the host and how to consent", args[0], code, errOut)
		}
		if strings.Contains(errOut, secret) {
			t.Errorf("%s printed the secret", args[0])
		}
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("refused commands sent %d requests", n)
	}
	for _, args := range [][]string{{"validate", file}, {"plan", file, "--estimate"}} {
		stdout, errOut, code := runCLI(t, args...)
		want := "API key       $KVBENCH_TEST_SECRET, named by the scenario file, would go to " + host + ": sent only if you pass --api-key-env KVBENCH_TEST_SECRET"
		if code != cli.ExitOK || !strings.Contains(stdout, want) || !strings.Contains(stdout, "requests to   "+counting.URL+"/v1 (scenario file, this machine)") {
			t.Errorf("%s: exit %d %s\n%s", args[0], code, errOut, stdout)
		}
	}

	// With the consent the key goes to the server (which requires it), and nowhere else.
	srv := startSim(t, sim.Options{Profile: "tiny", APIKey: secret})
	file = strangerScenario(t, "endpoint = \""+srv.URL()+"/v1\"\napi_key_env = \"KVBENCH_TEST_SECRET\"\n")
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", file, "--api-key-env", "KVBENCH_TEST_SECRET", "--out", out}, &stdout, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
		t.Fatalf("with --api-key-env: exit %d: %s", code, stderr.String())
	}
	console := stdout.String()
	said := strings.Index(console, "requests go to "+srv.URL()+"/v1 (counters from "+srv.URL()+"/metrics), API key from $KVBENCH_TEST_SECRET")
	if said < 0 || said > strings.Index(console, "  model ") {
		t.Errorf("run did not say where requests go before preflight:\n%s", console)
	}
	if strings.Contains(console+stderr.String(), secret) {
		t.Error("the secret reached the console")
	}
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			if data, _ := os.ReadFile(p); bytes.Contains(data, []byte(secret)) {
				t.Errorf("the secret is in %s", p)
			}
		}
		return nil
	})
}

// TestScenarioHostNeedsConsent: requests go to a host other than this machine only when the
// user names it (--endpoint) or trusts the file's hosts (--trust-hosts); a file naming one is
// refused before anything is sent, with the host, the key and both ways to consent, and
// validate says the file names another host.
func TestScenarioHostNeedsConsent(t *testing.T) {
	// 192.0.2.0/24 is reserved for documentation; and the context is cancelled, so even a
	// kvbench that failed to refuse would send nothing.
	target := "endpoint = \"http://192.0.2.7:19000/v1\"\nmetrics = [\"http://192.0.2.8:9100/metrics\"]\n"
	file := strangerScenario(t, target)
	chat := strangerChat(t, target)
	ctx, cancel := context.WithCancel(context.Background())
	cancel()
	for _, args := range [][]string{
		{"run", file, "--out", t.TempDir()},
		{"preflight", file},
		{"sweep", chat, "--users", "2", "--out", t.TempDir()},
	} {
		var stdout, stderr bytes.Buffer
		code := cli.ExitCode(run(ctx, args, &stdout, &stderr), &stderr)
		errOut := stderr.String()
		if code != cli.ExitUsage || !regexp.MustCompile(`stranger\.toml:\d+: target\.endpoint: requests would go to 192\.0\.2\.7:19000, a host the scenario file names`).MatchString(errOut) ||
			!strings.Contains(errOut, "target.metrics: requests would go to 192.0.2.8:9100") || !strings.Contains(errOut, "--endpoint") || !strings.Contains(errOut, "--trust-hosts") {
			t.Errorf("%s: exit %d %q", args[0], code, errOut)
		}
	}
	stdout, _, code := runCLI(t, "validate", file)
	if code != cli.ExitOK || !strings.Contains(stdout, "requests to   http://192.0.2.7:19000/v1 (scenario file, another host: run needs --endpoint or --trust-hosts)") {
		t.Errorf("validate: exit %d\n%s", code, stdout)
	}

}

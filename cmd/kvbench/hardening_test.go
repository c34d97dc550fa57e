package main

import (
	"bytes"
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// TestOversizedScenarioIsBadInput: sizes no server takes are refused by validate and plan
// with the file, line and key (before any prompt is built, which ran out of memory).
func TestOversizedScenarioIsBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "huge.toml")
	os.WriteFile(file, []byte("[prompt]\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000000000000]\n[[step]]\nid = \"b\"\nrequests = 1000000000\nplanned_context_tokens = [500]\n"), 0o644)
	for _, cmd := range []string{"validate", "plan"} {
		_, errOut, code := runCLI(t, cmd, file)
		if code != cli.ExitUsage || !strings.Contains(errOut, "huge.toml:5: step[0].planned_context_tokens: value 0 (1000000000000) is above the ceiling") ||
			!strings.Contains(errOut, "huge.toml:8: step[1].requests: 1000000000 is above the ceiling") {
			t.Errorf("%s: exit %d %q", cmd, code, errOut)
		}
	}
}

// probedScenario writes smoke with one probe that prints, as JSON, the variables it sees.
func probedScenario(t *testing.T) string {
	t.Helper()
	base, err := os.ReadFile("../../scenarios/smoke.toml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "probed.toml")
	os.WriteFile(file, append(base, []byte(`
[[probe]]
name = "env"
when = "before"
command = ["sh", "-c", "printf '{\"key\":\"%s\",\"token\":\"%s\",\"path\":\"%s\"}' \"$KVBENCH_TEST_KEY\" \"$KVBENCH_TEST_TOKEN\" \"$PATH\""]
`)...), 0o644)
	return file
}

// TestProbesAreOptIn: a scenario's probe commands run only with --allow-probes; without it
// (or --no-probes) run refuses before any traffic and lists each command; validate and plan
// show them; probes never see the API key variable, nor secret-looking ones unless
// --probe-secrets.
func TestProbesAreOptIn(t *testing.T) {
	const key = "sk-kvbench-probe-test-0123456789"
	srv := startSim(t, sim.Options{Profile: "tiny", APIKey: key})
	t.Setenv("KVBENCH_TEST_KEY", key)
	t.Setenv("KVBENCH_TEST_TOKEN", "tok-123")
	file := probedScenario(t)
	shown := `env (before): sh -c "printf '{\"key\":`

	var hits atomic.Int64
	counting := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) { hits.Add(1) }))
	defer counting.Close()
	out := t.TempDir()
	_, errOut, code := runCLI(t, "run", file, "--endpoint", counting.URL+"/v1", "--out", out, "--api-key-env", "KVBENCH_TEST_KEY")
	if code != cli.ExitUsage || !strings.Contains(errOut, shown) || !strings.Contains(errOut, "--allow-probes") || !strings.Contains(errOut, "--no-probes") || strings.Count(errOut, "\n") != 1 {
		t.Fatalf("without --allow-probes: exit %d %q", code, errOut)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Fatalf("a refused run left %d entries", len(entries))
	}
	if n := hits.Load(); n != 0 {
		t.Fatalf("a refused run sent %d requests", n)
	}
	for _, cmd := range [][]string{{"validate", file}, {"plan", file, "--estimate"}} {
		stdout, errOut, code := runCLI(t, cmd...)
		if code != cli.ExitOK || !strings.Contains(stdout, `probe env (before, timeout 5m0s): sh -c "printf`) {
			t.Errorf("%s does not show the probe command: exit %d %s\n%s", cmd, code, errOut, stdout)
		}
	}

	seen := func(extra ...string) map[string]any {
		t.Helper()
		args := append([]string{"run", file, "--endpoint", srv.URL() + "/v1", "--out", t.TempDir(), "--api-key-env", "KVBENCH_TEST_KEY", "--allow-probes"}, extra...)
		rec, stderr, code := runJSON(t, context.Background(), args...)
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, stderr)
		}
		p := section(t, rec, "probes")["env"].(map[string]any)
		if p["ok"] != true {
			t.Fatalf("probe %v", p)
		}
		return p["output"].(map[string]any)
	}
	env := seen()
	if env["key"] != "" || env["token"] != "" || env["path"] == "" {
		t.Errorf("default probe environment: %v; want no key, no token, a PATH", env)
	}
	env = seen("--probe-secrets")
	if env["key"] != "" || env["token"] != "tok-123" {
		t.Errorf("--probe-secrets environment: %v; want the token but never the API key", env)
	}
}

// TestURLCredentialsNeverWritten: user info in the endpoint and a token in the metrics URL
// reach the server but no record, step file or output, on success and on failure.
func TestURLCredentialsNeverWritten(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	host := strings.TrimPrefix(srv.URL(), "http://")
	endpoint := "http://alice:PASS-1234@" + host + "/v1"
	metricsURL := "http://" + host + "/metrics?token=T0K-5678"
	noSecret := func(t *testing.T, where, text string) {
		t.Helper()
		for _, s := range []string{"PASS-1234", "T0K-5678", "alice"} {
			if strings.Contains(text, s) {
				t.Errorf("%q is in %s", s, where)
			}
		}
	}

	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	err := run(context.Background(), []string{"run", "smoke", "--endpoint", endpoint, "--metrics", metricsURL, "--out", out, "--format", "json"}, &stdout, &stderr)
	if code := cli.ExitCode(err, &stderr); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	noSecret(t, "the output", stdout.String()+stderr.String())
	var rec map[string]any
	if err := json.Unmarshal(stdout.Bytes(), &rec); err != nil {
		t.Fatal(err)
	}
	target := section(t, section(t, rec, "scenario"), "target")
	if target["endpoint"] != "http://REDACTED@"+host+"/v1" || target["metrics"].([]any)[0] != "http://"+host+"/metrics?token=REDACTED" {
		t.Errorf("recorded target %v", target)
	}
	files := 0
	filepath.Walk(out, func(p string, info os.FileInfo, err error) error {
		if err == nil && !info.IsDir() {
			files++
			data, _ := os.ReadFile(p)
			noSecret(t, p, string(data))
		}
		return nil
	})
	if files < 3 {
		t.Fatalf("only %d files written", files)
	}

	dead := httptest.NewServer(http.NotFoundHandler())
	deadHost := strings.TrimPrefix(dead.URL, "http://")
	dead.Close()
	for name, args := range map[string][]string{
		"dead endpoint":    {"--endpoint", "http://alice:PASS-1234@" + deadHost + "/v1"},
		"dead metrics":     {"--endpoint", srv.URL() + "/v1", "--metrics", "http://alice:PASS-1234@" + deadHost + "/metrics?token=T0K-5678"},
		"endpoint not URL": {"--endpoint", "ftp://alice:PASS-1234@" + host + "/v1"},
	} {
		_, errOut, code := runCLI(t, append([]string{"run", "smoke", "--out", t.TempDir()}, args...)...)
		if code != cli.ExitUsage || !strings.Contains(errOut, "REDACTED@") {
			t.Errorf("%s: exit %d %q; want exit 2 naming the redacted URL", name, code, errOut)
		}
		noSecret(t, name+"'s error", errOut)
	}
}

// TestAPIKeyWithNewlineIsBadKey: a key no HTTP header can carry is bad input, named as a
// bad key, not a server that cannot be reached.
func TestAPIKeyWithNewlineIsBadKey(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	t.Setenv("KVBENCH_TEST_KEY", "sk-kvbench-test\n")
	_, errOut, code := runCLI(t, "run", "smoke", "--endpoint", srv.URL()+"/v1", "--out", t.TempDir(), "--api-key-env", "KVBENCH_TEST_KEY")
	if code != cli.ExitUsage || !strings.Contains(errOut, "KVBENCH_TEST_KEY (target.api_key_env) holds a bad API key") || strings.Contains(errOut, "unreachable") {
		t.Fatalf("exit %d %q", code, errOut)
	}
}

// TestClaimMetricTypoIsBadInput: verify exits 2 (bad input) naming the claim file, line and
// key, not 3 as if the claim were measured and not reproduced.
func TestClaimMetricTypoIsBadInput(t *testing.T) {
	claim := filepath.Join(t.TempDir(), "typo.toml")
	os.WriteFile(claim, []byte("[source]\nurl = \"https://example.com/r\"\nobserved_date = \"2026-08-02\"\n[[expect]]\nmetric = \"cached_fractoin\"\nat_least = 0.99\n"), 0o644)
	_, errOut, code := runCLI(t, "verify", claim, "testdata/compare/baseline")
	if code != cli.ExitUsage || !strings.Contains(errOut, "typo.toml:5: expect[0].metric: \"cached_fractoin\" is not a field") {
		t.Fatalf("exit %d %q", code, errOut)
	}
}

// TestReportIntoMissingDirectoryNamesThePath: the error names the -o path the user gave,
// not kvbench's hidden temp file beside it.
func TestReportIntoMissingDirectoryNamesThePath(t *testing.T) {
	target := filepath.Join(t.TempDir(), "missing", "dir", "x.html")
	_, errOut, code := runCLI(t, "report", "testdata/compare/baseline", "-o", target)
	if code != cli.ExitUsage || !strings.Contains(errOut, "-o "+target+": its directory does not exist") || strings.Contains(errOut, ".tmp-") {
		t.Fatalf("exit %d %q", code, errOut)
	}
}

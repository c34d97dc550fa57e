package main

import (
	"encoding/json"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/export"
)

const deployDir = "../../deploy"

func readDeploy(t *testing.T, path string) string {
	t.Helper()
	data, err := os.ReadFile(filepath.Join(deployDir, path))
	if err != nil {
		t.Fatal(err)
	}
	return string(data)
}

// commandFlags lists the flags of kvbench COMMAND, read from its -h output.
func commandFlags(t *testing.T, command string) []string {
	t.Helper()
	out, stderr, code := runCLI(t, command, "-h")
	if code != exitOK {
		t.Fatalf("kvbench %s -h: exit %d: %s", command, code, stderr)
	}
	var flags []string
	for _, m := range regexp.MustCompile(`(?m)^  -([a-z0-9-]+)`).FindAllStringSubmatch(out, -1) {
		flags = append(flags, m[1])
	}
	if len(flags) == 0 {
		t.Fatalf("kvbench %s -h lists no flags:\n%s", command, out)
	}
	return flags
}

// kvbenchCalls returns the kvbench invocations of a shell script as words, continuation lines
// joined and quotes dropped.
func kvbenchCalls(script string) [][]string {
	var calls [][]string
	for _, line := range strings.Split(strings.ReplaceAll(script, "\\\n", " "), "\n") {
		words := strings.Fields(strings.ReplaceAll(line, `"`, ""))
		if len(words) > 1 && words[0] == "kvbench" {
			calls = append(calls, words)
		}
	}
	return calls
}

// TestNightlyManifestUsesRealFlags keeps deploy/kubernetes honest: every flag the nightly
// script passes to kvbench exists on that command, the script runs the README's recipe (run
// --repeat 3 --push, then compare), and the CronJob mounts the script and sets what it needs.
func TestNightlyManifestUsesRealFlags(t *testing.T) {
	script := readDeploy(t, "kubernetes/nightly.sh")
	calls := kvbenchCalls(script)
	used := map[string][]string{}
	for _, call := range calls {
		cmd := call[1]
		if _, ok := commands[cmd]; !ok {
			t.Errorf("nightly.sh runs kvbench %s: no such command", cmd)
			continue
		}
		known := commandFlags(t, cmd)
		for _, w := range call[2:] {
			if !strings.HasPrefix(w, "-") {
				continue
			}
			name, _, _ := strings.Cut(strings.TrimLeft(w, "-"), "=")
			if !slices.Contains(known, name) {
				t.Errorf("nightly.sh: kvbench %s has no flag %s (it has %v)", cmd, w, known)
			}
			used[cmd] = append(used[cmd], name)
		}
	}
	for cmd, flags := range map[string][]string{"run": {"repeat", "push", "push-label", "out"}, "compare": {"format"}} {
		for _, f := range flags {
			if !slices.Contains(used[cmd], f) {
				t.Errorf("nightly.sh: kvbench %s without --%s (calls: %v)", cmd, f, calls)
			}
		}
	}
	if !strings.Contains(script, "--repeat 3") {
		t.Error("nightly.sh: the recipe runs --repeat 3")
	}

	cron := readDeploy(t, "kubernetes/cronjob.yaml")
	kust := readDeploy(t, "kubernetes/kustomization.yaml")
	for _, want := range []string{"kind: CronJob", `command: ["/busybox/sh", "/etc/kvbench/nightly.sh"]`, "mountPath: /etc/kvbench", "name: kvbench-nightly", "restartPolicy: Never", "runAsNonRoot: true"} {
		if !strings.Contains(cron, want) {
			t.Errorf("cronjob.yaml lacks %q", want)
		}
	}
	if !strings.Contains(kust, "- nightly.sh") || !strings.Contains(kust, "name: kvbench-nightly") || !strings.Contains(kust, "- cronjob.yaml") {
		t.Errorf("kustomization.yaml does not build the kvbench-nightly ConfigMap from nightly.sh:\n%s", kust)
	}
	for _, m := range regexp.MustCompile(`\$\{([A-Z_]+):\?`).FindAllStringSubmatch(script, -1) {
		if !strings.Contains(cron, "- name: "+m[1]+"\n") {
			t.Errorf("nightly.sh requires %s; cronjob.yaml does not set it", m[1])
		}
	}
}

var metricName = regexp.MustCompile(`\bkvbench_[a-z0-9_]+`)

// checkMetricNames reports every kvbench_ name in text that kvbench does not export; it
// returns how many it found.
func checkMetricNames(t *testing.T, where, text string) int {
	t.Helper()
	names := export.Names()
	found := metricName.FindAllString(text, -1)
	for _, n := range found {
		if !slices.Contains(names, n) {
			t.Errorf("%s queries %s, which kvbench does not export", where, n)
		}
	}
	return len(found)
}

// dashboardQueries returns each panel's title with its queries, and the variables' queries.
func dashboardQueries(t *testing.T) (panels map[string][]string, variables []string) {
	t.Helper()
	var d struct {
		Panels []struct {
			Title   string `json:"title"`
			Targets []struct {
				Expr string `json:"expr"`
			} `json:"targets"`
		} `json:"panels"`
		Templating struct {
			List []struct {
				Type  string          `json:"type"`
				Query json.RawMessage `json:"query"`
			} `json:"list"`
		} `json:"templating"`
	}
	if err := json.Unmarshal([]byte(readDeploy(t, "grafana/kvbench-dashboard.json")), &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	panels = map[string][]string{}
	for _, p := range d.Panels {
		for _, tg := range p.Targets {
			panels[p.Title] = append(panels[p.Title], tg.Expr)
		}
	}
	for _, v := range d.Templating.List {
		if v.Type == "query" {
			variables = append(variables, string(v.Query))
		}
	}
	return panels, variables
}

// TestDashboardAndAlertsQueryExportedSeries: every series the Grafana dashboard, the alert
// rules and the README's fleet section name is one kvbench exports, and every panel queries one.
func TestDashboardAndAlertsQueryExportedSeries(t *testing.T) {
	panels, variables := dashboardQueries(t)
	if len(panels) < 8 {
		t.Fatalf("dashboard has %d panels with queries", len(panels))
	}
	for title, exprs := range panels {
		if checkMetricNames(t, "dashboard panel "+title, strings.Join(exprs, "\n")) == 0 {
			t.Errorf("dashboard panel %q queries no kvbench series: %v", title, exprs)
		}
	}
	if checkMetricNames(t, "dashboard variables", strings.Join(variables, "\n")) < 3 {
		t.Errorf("dashboard variables %v", variables)
	}
	if checkMetricNames(t, "kvbench-alerts.yaml", readDeploy(t, "prometheus/kvbench-alerts.yaml")) < 4 {
		t.Error("kvbench-alerts.yaml: too few kvbench series")
	}
	readme, err := os.ReadFile("../../README.md")
	if err != nil {
		t.Fatal(err)
	}
	_, fleet, ok := strings.Cut(string(readme), "## Running nightly on a fleet")
	if !ok {
		t.Fatal(`README has no "## Running nightly on a fleet" section`)
	}
	fleet, _, _ = strings.Cut(fleet, "\n## ")
	if checkMetricNames(t, "README (fleet section)", fleet) < 3 {
		t.Error("README's fleet section names too few series")
	}
}

// TestAlertRules checks the alert rules and runs their unit tests with promtool (Debian's
// prometheus package); skipped without it unless KVBENCH_REQUIRE_PROMETHEUS=1.
func TestAlertRules(t *testing.T) {
	promtool := os.Getenv("KVBENCH_PROMTOOL")
	if promtool == "" {
		promtool = "/usr/bin/promtool"
	}
	if _, err := os.Stat(promtool); err != nil {
		msg := promtool + " not found (apt-get install prometheus, or set KVBENCH_PROMTOOL)"
		if os.Getenv("KVBENCH_REQUIRE_PROMETHEUS") == "1" {
			t.Fatal(msg)
		}
		t.Skip(msg)
	}
	dir := filepath.Join(deployDir, "prometheus")
	for _, args := range [][]string{{"check", "rules", "kvbench-alerts.yaml"}, {"test", "rules", "kvbench-alerts_test.yaml"}} {
		cmd := exec.Command(promtool, args...)
		cmd.Dir = dir
		if out, err := cmd.CombinedOutput(); err != nil {
			t.Errorf("promtool %v: %v\n%s", args, err, out)
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/export"
	"github.com/anvil-serving/kvbench/sim"
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
	if code != cli.ExitOK {
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

// TestNightlyManifestUsesRealFlags keeps deploy/kubernetes/nightly.sh honest: every flag it
// passes to kvbench exists on that command (the push flags it shares between run and
// compare on both), and it runs the recipe: run with repeats, the API key's variable and the
// push, compare as markdown with the push, and the report. (The CronJob's objects are checked
// against the Kubernetes API types in package deploy.)
func TestNightlyManifestUsesRealFlags(t *testing.T) {
	script := readDeploy(t, "kubernetes/nightly.sh")
	calls := kvbenchCalls(script)
	used := map[string][]string{}
	for _, call := range calls {
		cmd := call[1]
		if _, ok := cli.Commands[cmd]; !ok {
			t.Errorf("nightly.sh runs kvbench %s: no such command", cmd)
			continue
		}
		known := commandFlags(t, cmd)
		for _, w := range call[2:] {
			// ${API_KEY_ENV:+--api-key-env ...} passes a flag only when the setting is given.
			if _, flag, ok := strings.Cut(w, ":+"); ok {
				w = flag
			}
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
	// The push flags, set once with 'set --' and passed to run and compare as "$@".
	var pushFlags []string
	for _, line := range strings.Split(script, "\n") {
		if rest, ok := strings.CutPrefix(strings.TrimSpace(line), "set -- "); ok {
			for _, w := range strings.Fields(rest) {
				if strings.HasPrefix(w, "--") {
					pushFlags = append(pushFlags, strings.TrimPrefix(w, "--"))
				}
			}
		}
	}
	for _, cmd := range []string{"run", "compare"} {
		known := commandFlags(t, cmd)
		for _, f := range pushFlags {
			if !slices.Contains(known, f) {
				t.Errorf("nightly.sh passes --%s to kvbench %s, which has no such flag", f, cmd)
			}
		}
	}
	for _, f := range []string{"push", "push-label", "push-user-env", "push-password-env"} {
		if !slices.Contains(pushFlags, f) {
			t.Errorf("nightly.sh's push flags %v lack --%s", pushFlags, f)
		}
	}
	for cmd, flags := range map[string][]string{"run": {"endpoint", "repeat", "out", "api-key-env"}, "compare": {"format"}, "report": {"o"}} {
		for _, f := range flags {
			if !slices.Contains(used[cmd], f) {
				t.Errorf("nightly.sh: kvbench %s without -%s (calls: %v)", cmd, f, calls)
			}
		}
	}
	if !strings.Contains(script, "REPEAT=${REPEAT:-3}") {
		t.Error("nightly.sh: the recipe repeats 3 times unless told otherwise")
	}
}

// dashboard is the Grafana dashboard's panels, as far as the tests read them.
type dashboard struct {
	Panels []struct {
		Title       string `json:"title"`
		Type        string `json:"type"`
		FieldConfig struct {
			Defaults struct {
				Unit       string `json:"unit"`
				Thresholds *struct {
					Steps []struct {
						Color string   `json:"color"`
						Value *float64 `json:"value"`
					} `json:"steps"`
				} `json:"thresholds"`
			} `json:"defaults"`
		} `json:"fieldConfig"`
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

func readDashboard(t *testing.T) dashboard {
	t.Helper()
	var d dashboard
	if err := json.Unmarshal([]byte(readDeploy(t, "grafana/kvbench-dashboard.json")), &d); err != nil {
		t.Fatalf("dashboard: %v", err)
	}
	return d
}

// dashboardQueries returns each panel's title with its queries, and the variables' queries.
func dashboardQueries(t *testing.T) (panels map[string][]string, variables []string) {
	t.Helper()
	d := readDashboard(t)
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

// alertExprs returns each alert rule's expression by name.
func alertExprs(t *testing.T) map[string]string {
	t.Helper()
	// The rule file is YAML; each rule's expr follows its alert name, inline or as a block.
	text := readDeploy(t, "prometheus/kvbench-alerts.yaml")
	out := map[string]string{}
	var name string
	lines := strings.Split(text, "\n")
	for i := 0; i < len(lines); i++ {
		l := strings.TrimSpace(lines[i])
		if v, ok := strings.CutPrefix(l, "- alert: "); ok {
			name = v
		}
		v, ok := strings.CutPrefix(l, "expr: ")
		if !ok || name == "" {
			continue
		}
		if v == "|" { // a block: the more indented lines that follow
			indent := len(lines[i+1]) - len(strings.TrimLeft(lines[i+1], " "))
			var block []string
			for i+1 < len(lines) && len(lines[i+1])-len(strings.TrimLeft(lines[i+1], " ")) >= indent && strings.TrimSpace(lines[i+1]) != "" {
				i++
				block = append(block, strings.TrimSpace(lines[i]))
			}
			v = strings.Join(block, " ")
		}
		out[name] = v
	}
	return out
}

// selector is one series selector of a PromQL expression: a metric name and its matchers.
type selector struct {
	name     string
	matchers []matcher
}

type matcher struct{ label, op, value string }

var (
	selectorPattern = regexp.MustCompile(`\b((?:kvbench|kube_job)_[a-z0-9_]+)\b(\{[^}]*\})?`)
	matcherPattern  = regexp.MustCompile(`([a-zA-Z_][a-zA-Z0-9_]*)\s*(=~|!~|!=|=)\s*"((?:[^"\\]|\\.)*)"`)
)

// selectors finds the series selectors of expr, Grafana's $variables read as "match all".
func selectors(expr string) []selector {
	expr = regexp.MustCompile(`"\$[a-z]+"`).ReplaceAllString(expr, `".*"`)
	var out []selector
	for _, m := range selectorPattern.FindAllStringSubmatch(expr, -1) {
		s := selector{name: m[1]}
		for _, mm := range matcherPattern.FindAllStringSubmatch(m[2], -1) {
			s.matchers = append(s.matchers, matcher{mm[1], mm[2], mm[3]})
		}
		out = append(out, s)
	}
	return out
}

// matches reports whether a series' labels satisfy every matcher (an absent label is "").
func (s selector) matches(labels map[string]string) bool {
	for _, m := range s.matchers {
		v := labels[m.label]
		var ok bool
		switch m.op {
		case "=":
			ok = v == m.value
		case "!=":
			ok = v != m.value
		case "=~", "!~":
			re := regexp.MustCompile("^(?:" + m.value + ")$")
			ok = re.MatchString(v) == (m.op == "=~")
		}
		if !ok {
			return false
		}
	}
	return true
}

// kubeStateMetrics are the kube-state-metrics Job series the alerts read, with their labels
// (docs/metrics/workload/job-metrics.md, commit 076987a505f4657582125886383ec68eba5ec45d of
// kubernetes/kube-state-metrics), plus the job label of the scrape.
var kubeStateMetrics = map[string][]string{
	"kube_job_failed":  {"job", "namespace", "job_name", "condition"},
	"kube_job_owner":   {"job", "namespace", "job_name", "owner_kind", "owner_name", "owner_is_controller"},
	"kube_job_created": {"job", "namespace", "job_name"},
}

// pushedSeries runs the nightly scenario (gated on the replay's verdict, repeated) on two
// embedded engines and compares the runs, and returns every series a Prometheus scraping the
// Pushgateway would hold after run --push and compare --push with --push-label cluster=ci: the
// families' labels, the grouping key's (job, identity, cluster) and the series' own.
func pushedSeries(t *testing.T) map[string][]map[string]string {
	t.Helper()
	// Eight output tokens at 50 a second: every request has a decode rate.
	scenario := writeScenario(t, strings.Replace(regressionScenario, "max_tokens = 1\n", "max_tokens = 8\n", 1)+
		"[[gate]]\nstep = \"replay\"\nverdict = \"cpu_reload\"\n")
	var dirs []string
	for range 2 {
		srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.DecodeTokensPerSecond = 50 }})
		out := t.TempDir()
		_, stderr, code := runCLI(t, "run", scenario, "--endpoint", srv.URL()+"/v1", "--out", out, "--force", "--repeat", "2")
		if code != cli.ExitOK && code != cli.ExitGateFailed {
			t.Fatalf("run: exit %d: %s", code, stderr)
		}
		dirs = append(dirs, filepath.Join(out, onlyEntry(t, out)))
	}
	loaded, err := cli.LoadRuns(dirs)
	if err != nil {
		t.Fatal(err)
	}
	withUnmeasured(t, loaded[1])
	cluster := export.Label{Name: "cluster", Value: "ci"}
	runFams, err := export.Families(loaded[1], append(export.Identity(loaded[1]), cluster, export.Label{Name: "job", Value: export.Job}))
	if err != nil {
		t.Fatal(err)
	}
	res, err := compare.Compare(loaded[0], loaded[1], compare.Options{Tolerance: compare.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	cmpFams, err := export.CompareFamilies(res, append(export.Identity(loaded[1]), cluster, export.Label{Name: "job", Value: export.CompareJob}))
	if err != nil {
		t.Fatal(err)
	}
	// A capacity sweep's series, as kvbench export writes them (no sweep of this scenario).
	cap16, p90, within := 16, 120.0, true
	sweep := &record.Sweep{ObservedAt: loaded[1].ObservedAt, Scenario: loaded[1].Scenario.Name, Step: "chat", CapacityUsers: &cap16, CapacityRequestsPerSecond: &p90,
		Levels: []record.SweepLevel{{Users: 16, TTFTMS: record.Percentiles{P90: &p90}, WithinThreshold: &within}}}
	sweepFams, err := export.SweepFamilies(sweep, append(export.SweepIdentity(sweep), cluster))
	if err != nil {
		t.Fatal(err)
	}
	series := map[string][]map[string]string{}
	for _, f := range slices.Concat(runFams, cmpFams, sweepFams) {
		for _, m := range f.GetMetric() {
			labels := map[string]string{}
			for _, l := range m.GetLabel() {
				labels[l.GetName()] = l.GetValue()
			}
			names := []string{f.GetName()}
			if f.GetType() == dto.MetricType_SUMMARY {
				names = append(names, f.GetName()+"_sum", f.GetName()+"_count")
				labels["quantile"] = "0.5" // each quantile is a series of the summary's name
			}
			for _, n := range names {
				series[n] = append(series[n], labels)
			}
		}
	}
	return series
}

// withUnmeasured adds to r's record what this scenario on the embedded engine does not
// measure, so that the series a night of another scenario pushes are checked too: an offload
// gain over a cold twin and a reload that diverged on its replay, and a trace step with
// measured and ideal tier shares and warm caches.
func withUnmeasured(t *testing.T, r *runs.Run) {
	t.Helper()
	f := func(v float64) *float64 { return &v }
	diverged, at := false, 17
	for i := range r.Sections {
		if rp := r.Sections[i].Replay; rp != nil {
			rp.OffloadGain = &record.OffloadGain{TTFTRatio: f(4), PrefillSecondsSaved: f(1.5)}
			rp.ReloadFidelity = &record.ReloadFidelity{Compared: true, Basis: "token_ids", Identical: &diverged, FirstDivergence: &at}
		}
	}
	r.Sections = append(r.Sections, record.Section{Step: "trace", Trace: &record.TraceSection{
		Tiers:      record.TierShares{GPU: f(0.5), Host: f(0.3), Recompute: f(0.2)},
		Ideal:      &record.IdealTiers{IdealShares: record.IdealShares{GPUShare: 0.6, HostShare: 0.3, RecomputeShare: 0.1}},
		WarmCaches: &record.WarmCaches{Requests: 3, Of: 600, CachedBeyondReusable: 4096},
	}})
}

// unpaneled are the series kvbench pushes that no dashboard panel shows, each with why.
var unpaneled = map[string]string{
	"kvbench_repeats_repetitions":                         "a count the run's table states; the repeats panels carry the values",
	"kvbench_repeats_verdict_repetitions":                 "Repetitions agree shows when it matters (they disagree)",
	"kvbench_repeats_decode_spread_tokens_per_second":     "the decode panel shows the median; the spread is in compare's judgement",
	"kvbench_repeats_cached_prompt_tokens_ratio":          "the cached fraction panel shows the first repetition's; compare judges the spread",
	"kvbench_repeats_cached_prompt_tokens_spread_ratio":   "as above",
	"kvbench_repeats_offload_load_bytes_per_token":        "Offload bytes per token shows the run's measured value",
	"kvbench_repeats_offload_load_bytes_per_token_spread": "as above",
	"kvbench_sampled_peak_kv_usage_ratio":                 "a sampled peak that says whether a step filled the pool; read in the report",
	"kvbench_failed_requests":                             "the Failed gates panel turns red on it (the implicit max_failed_requests gate)",
	"kvbench_offload_load_duration_seconds":               "reload bandwidth is the report's; bytes moved are on a panel",
	"kvbench_compare_timestamp_seconds":                   "the KvbenchCompareAbsent alert's, not a value to look at",
	"kvbench_sweep_timestamp_seconds":                     "when a sweep ran; the capacity panel's points are its samples",
	"kvbench_time_to_first_output_seconds":                "per request: only with --per-request-series",
	"kvbench_end_to_end_seconds":                          "per request: only with --per-request-series",
	"kvbench_decode_tokens_per_second":                    "per request: only with --per-request-series",
	"kvbench_effective_prefill_tokens_per_second":         "per request: only with --per-request-series",
}

// TestEveryPushedSeriesIsOnAPanel: each series kvbench exports is read by a dashboard panel,
// or listed in unpaneled with why; a name in unpaneled that a panel reads, or that kvbench no
// longer exports, is an error too.
func TestEveryPushedSeriesIsOnAPanel(t *testing.T) {
	panels, _ := dashboardQueries(t)
	onPanel := map[string]bool{}
	for _, es := range panels {
		for _, e := range es {
			for _, s := range selectors(e) {
				onPanel[strings.TrimSuffix(strings.TrimSuffix(s.name, "_sum"), "_count")] = true
			}
		}
	}
	names := map[string]bool{}
	for _, n := range export.Names() {
		if strings.HasSuffix(n, "_sum") || strings.HasSuffix(n, "_count") {
			if base := strings.TrimSuffix(strings.TrimSuffix(n, "_sum"), "_count"); slices.Contains(export.Names(), base) {
				continue
			}
		}
		names[n] = true
		_, unused := unpaneled[n]
		switch {
		case onPanel[n] && unused:
			t.Errorf("%s is on a panel and listed as unpaneled", n)
		case !onPanel[n] && !unused:
			t.Errorf("%s is pushed but on no dashboard panel: add one, or list it in unpaneled with why", n)
		}
	}
	for n := range unpaneled {
		if !names[n] {
			t.Errorf("unpaneled lists %s, which kvbench does not export", n)
		}
	}
}

// TestDeployQueriesFindSeriesARunExports: every series selector of the Grafana dashboard, the
// alert rules and docs/fleet.md's PromQL names a series that a run and a comparison on
// the embedded engine really push, and its label matchers find such a series (a matcher on a
// label the series lacks, or on a value kvbench never writes, finds nothing in production
// either). The kube-state-metrics selectors name series of its documented Job metrics.
func TestDeployQueriesFindSeriesARunExports(t *testing.T) {
	series := pushedSeries(t)
	exprs := map[string]string{}
	panels, variables := dashboardQueries(t)
	for title, es := range panels {
		for i, e := range es {
			exprs[fmt.Sprintf("dashboard panel %q query %d", title, i)] = e
		}
	}
	for i, v := range variables {
		exprs[fmt.Sprintf("dashboard variable %d", i)] = v
	}
	for name, e := range alertExprs(t) {
		exprs["alert "+name] = e
	}
	fleet, err := os.ReadFile("../../docs/fleet.md")
	if err != nil {
		t.Fatal(err)
	}
	blocks := regexp.MustCompile("(?s)```promql\n(.*?)```").FindAllStringSubmatch(string(fleet), -1)
	if len(blocks) == 0 {
		t.Fatal("docs/fleet.md has no promql block")
	}
	for i, block := range blocks {
		exprs[fmt.Sprintf("docs/fleet.md promql block %d", i)] = block[1]
	}
	if len(alertExprs(t)) < 10 || len(panels) < 15 {
		t.Fatalf("%d alert rules, %d panels: the readers changed", len(alertExprs(t)), len(panels))
	}
	checked := 0
	for where, e := range exprs {
		sels := selectors(e)
		if len(sels) == 0 && !strings.Contains(where, "variable") {
			t.Errorf("%s: no kvbench series in %s", where, e)
		}
		for _, s := range sels {
			checked++
			if now, ok := export.Renamed[s.name]; ok {
				t.Errorf("%s: %s was renamed %s", where, s.name, now)
				continue
			}
			if labels, ok := kubeStateMetrics[s.name]; ok {
				for _, m := range s.matchers {
					if !slices.Contains(labels, m.label) {
						t.Errorf("%s: %s has no label %s", where, s.name, m.label)
					}
				}
				continue
			}
			got, ok := series[s.name]
			if !ok {
				t.Errorf("%s: %s is not a series kvbench pushes", where, s.name)
				continue
			}
			if !slices.ContainsFunc(got, s.matches) {
				t.Errorf("%s: no pushed %s series matches %v (the series: %v)", where, s.name, s.matchers, got)
			}
		}
	}
	t.Logf("%d selectors in %d expressions checked against %d pushed series names", checked, len(exprs), len(series))
}

// thresholdColor is the color a stat panel shows for v: the last step whose value is at most v.
func thresholdColor(steps []struct {
	Color string   `json:"color"`
	Value *float64 `json:"value"`
}, v float64) string {
	color := ""
	for _, s := range steps {
		if s.Value == nil || *s.Value <= v {
			color = s.Color
		}
	}
	return color
}

// TestDashboardPanels: stat panels have thresholds (one failed gate is red), the time to
// first output and decode panels read an unrepeated run's series too, run status and version
// have panels, and the decode rate's unit says tokens per second.
func TestDashboardPanels(t *testing.T) {
	d := readDashboard(t)
	want := map[string]map[float64]string{
		"Replays not as expected":  {0: "green", 1: "red"},
		"Failed gates":             {0: "green", 1: "red"},
		"Regressions":              {0: "green", 1: "red"},
		"Runs not completed":       {0: "green", 1: "red"},
		"Hours since the last run": {12: "green", 30: "orange", 40: "red"},
		"Repetitions agree":        {0: "red", 1: "green"},
	}
	queries := map[string]string{}
	for _, p := range d.Panels {
		var exprs []string
		for _, tg := range p.Targets {
			exprs = append(exprs, tg.Expr)
		}
		queries[p.Title] = strings.Join(exprs, "\n")
		if p.Type != "stat" {
			continue
		}
		colors, ok := want[p.Title]
		if !ok {
			t.Errorf("stat panel %q: no threshold expectation in this test", p.Title)
			continue
		}
		delete(want, p.Title)
		th := p.FieldConfig.Defaults.Thresholds
		if th == nil {
			t.Errorf("stat panel %q has no thresholds", p.Title)
			continue
		}
		for v, c := range colors {
			if got := thresholdColor(th.Steps, v); got != c {
				t.Errorf("stat panel %q shows %v as %q, want %q", p.Title, v, got, c)
			}
		}
	}
	for title := range want {
		t.Errorf("no stat panel %q", title)
	}
	for title, reads := range map[string][]string{
		"Time to first output":              {"kvbench_repeats_time_to_first_output_seconds", "kvbench_step_time_to_first_output_seconds"},
		"Decode rate":                       {"kvbench_repeats_decode_tokens_per_second", "kvbench_step_decode_tokens_per_second"},
		"Run status":                        {"kvbench_run_status"},
		"kvbench version, model and engine": {"kvbench_run_info"},
	} {
		for _, name := range reads {
			if !regexp.MustCompile(`\b` + name + `\b`).MatchString(queries[title]) {
				t.Errorf("panel %q does not read %s: %q", title, name, queries[title])
			}
		}
	}
	for _, p := range d.Panels {
		if p.Title == "Decode rate" && !strings.Contains(p.FieldConfig.Defaults.Unit, "tokens/s") {
			t.Errorf("decode rate unit %q, want tokens/s", p.FieldConfig.Defaults.Unit)
		}
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

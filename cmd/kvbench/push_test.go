package main

import (
	"context"
	"encoding/json"
	"errors"
	"io"
	"io/fs"
	"net/http"
	"net/http/httptest"
	"os"
	"os/exec"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/internal/export"
	"github.com/anvil-serving/kvbench/sim"
)

func TestPushBadInput(t *testing.T) {
	run := filepath.Join("testdata", "compare", "baseline")
	cases := [][]string{
		{"push", run},                                            // no URL
		{"push", run, "ftp://gateway:9091"},                      // not http(s)
		{"push", run, "http://gw:9091/metrics/job/kvbench"},      // the group's path, not the base
		{"push", run, "http://gw:9091", "--push-label", "job=x"}, // kvbench sets job
		{"push", run, "http://gw:9091", "--push-label", "a=1", "--push-label", "a=2"},
		{"push", "testdata", "http://gw:9091"},     // not a run directory
		{"run", "smoke", "--push", "gateway:9091"}, // refused before the run
		{"run", "smoke", "--push", "http://gw:9091", "--push-timeout", "0s"},
	}
	for _, args := range cases {
		_, stderr, code := runCLI(t, args...)
		if code != cli.ExitUsage || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, want %d with one line: %q", args, code, cli.ExitUsage, stderr)
		}
	}
}

// gateway is a stand-in Pushgateway that answers every push with status and keeps what it
// was sent.
type gateway struct {
	mu     sync.Mutex
	status int
	paths  []string
	// queries, auths ("user:password", empty without basic auth) and bodies, one per push.
	queries, auths []string
	bodies         [][]*dto.MetricFamily
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	var fams []*dto.MetricFamily
	dec := expfmt.NewDecoder(r.Body, expfmt.ResponseFormat(r.Header))
	for {
		var f dto.MetricFamily
		if err := dec.Decode(&f); err != nil {
			break
		}
		fams = append(fams, &f)
	}
	io.Copy(io.Discard, r.Body)
	auth := ""
	if u, p, ok := r.BasicAuth(); ok {
		auth = u + ":" + p
	}
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paths = append(g.paths, r.Method+" "+r.URL.Path)
	g.queries = append(g.queries, r.URL.RawQuery)
	g.auths = append(g.auths, auth)
	g.bodies = append(g.bodies, fams)
	w.WriteHeader(g.status)
}

// pushed returns the pushes' queries, auths and bodies.
func (g *gateway) pushed() (queries, auths []string, bodies [][]*dto.MetricFamily) {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.queries...), append([]string{}, g.auths...), append([][]*dto.MetricFamily{}, g.bodies...)
}

// statusOf returns the status whose kvbench_run_status sample is 1 in a pushed body.
func statusOf(fams []*dto.MetricFamily) string {
	for _, f := range fams {
		if f.GetName() != "kvbench_run_status" {
			continue
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "status" && m.GetGauge().GetValue() == 1 {
					return l.GetValue()
				}
			}
		}
	}
	return ""
}

// fixtureWithStatus copies the compare baseline (a completed run) and rewrites its run.json's
// status and stop reason, as a run stopped by a signal (interrupted) or killed (running) left it.
func fixtureWithStatus(t *testing.T, status, reason string) string {
	t.Helper()
	dir := filepath.Join(t.TempDir(), "nightly-tiny-20260803T020000Z")
	if out, err := exec.Command("cp", "-r", filepath.Join("testdata", "compare", "baseline"), dir).CombinedOutput(); err != nil {
		t.Fatalf("cp: %v: %s", err, out)
	}
	path := filepath.Join(dir, "run.json")
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var rec map[string]any
	if err := json.Unmarshal(data, &rec); err != nil {
		t.Fatal(err)
	}
	rec["status"], rec["stop_reason"] = status, reason
	data, err = json.MarshalIndent(rec, "", "  ")
	if err != nil {
		t.Fatal(err)
	}
	if err := os.WriteFile(path, data, 0o600); err != nil {
		t.Fatal(err)
	}
	return dir
}

// TestPushRefusesUnfinishedRuns: a run a signal stopped (interrupted) or a kill left
// (incomplete) is refused by kvbench push as by run --push, in the same words, and nothing
// reaches the gateway; --allow-incomplete pushes it, its status series saying what it is.
func TestPushRefusesUnfinishedRuns(t *testing.T) {
	gw := &gateway{status: http.StatusOK}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	interrupted := fixtureWithStatus(t, "interrupted", "received SIGTERM")
	killed := fixtureWithStatus(t, "running", "")
	for dir, status := range map[string]string{interrupted: "interrupted", killed: "incomplete"} {
		_, stderr, code := runCLI(t, "push", dir, pg.URL)
		if code != cli.ExitUsage || strings.Count(stderr, "\n") != 1 || !strings.Contains(stderr, "not pushed: "+dir+" is "+status) {
			t.Errorf("push of an %s run: exit %d: %q", status, code, stderr)
		}
	}
	// One refused run refuses the whole push: nothing is sent.
	if _, _, code := runCLI(t, "push", filepath.Join("testdata", "compare", "baseline"), interrupted, pg.URL); code != cli.ExitUsage {
		t.Errorf("a complete and an interrupted run: exit %d", code)
	}
	if p := gw.pushes(); len(p) != 0 {
		t.Fatalf("refused runs reached the gateway: %v", p)
	}

	// run --push's path (its push sink at the run's end) refuses the same run with the same
	// words, though no signal came, and the run's own error stands.
	var stderr strings.Builder
	pusher := export.NewPusher(context.Background(), export.PushOptions{URL: pg.URL}, &stderr)
	if err := pusher.Handle(events.RunDone{Dir: interrupted}); err != nil || pusher.Err() != nil {
		t.Errorf("the push sink: %v, %v; want a refusal on stderr only", err, pusher.Err())
	}
	runErr := errors.New("interrupted: what was measured is in " + interrupted)
	if err := pushResult(pusher.Err(), runErr); err != runErr {
		t.Errorf("pushResult: %v, want the run's own error", err)
	}
	if !strings.Contains(stderr.String(), "not pushed: "+interrupted+" is interrupted") {
		t.Errorf("run --push of an interrupted run: %q", stderr.String())
	}
	if p := gw.pushes(); len(p) != 0 {
		t.Fatalf("run --push pushed an interrupted run: %v", p)
	}

	stdout, stderr2, code := runCLI(t, "push", interrupted, pg.URL, "--allow-incomplete")
	if code != cli.ExitOK || !strings.Contains(stdout, "pushed "+interrupted+" (marked interrupted)") {
		t.Fatalf("--allow-incomplete: exit %d: %s%s", code, stdout, stderr2)
	}
	if _, _, bodies := gw.pushed(); len(bodies) != 1 || statusOf(bodies[0]) != "interrupted" {
		t.Errorf("the pushed run's status series: %d pushes, status %q", len(bodies), statusOf(bodies[len(bodies)-1]))
	}
}

// TestPushURLWithQueryAndBasicAuthFromEnv: a push URL with a query string keeps the grouping
// path in the path and the query as the query; basic auth comes from the variables
// --push-user-env and --push-password-env name (a Kubernetes Secret's), and the password
// reaches neither the console nor a file of the run.
func TestPushURLWithQueryAndBasicAuthFromEnv(t *testing.T) {
	gw := &gateway{status: http.StatusOK}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	t.Setenv("KVBENCH_TEST_PUSH_USER", "ci")
	t.Setenv("KVBENCH_TEST_PUSH_PASSWORD", "hunter2")
	srv := startSim(t, sim.Options{Profile: "tiny"})
	out := t.TempDir()
	stdout, stderr, code := runCLI(t, "run", writeScenario(t, regressionScenario), "--endpoint", srv.URL()+"/v1", "--out", out, "--force",
		"--push", pg.URL+"/?tenant=eu1&token=t0ken", "--push-user-env", "KVBENCH_TEST_PUSH_USER", "--push-password-env", "KVBENCH_TEST_PUSH_PASSWORD")
	if code != cli.ExitOK {
		t.Fatalf("run --push: exit %d: %s", code, stderr)
	}
	paths := gw.pushes()
	queries, auths, _ := gw.pushed()
	if len(paths) != 1 || !strings.HasPrefix(paths[0], "PUT /metrics/job/kvbench/") || strings.Contains(paths[0], "token") {
		t.Errorf("pushes %v, want one PUT /metrics/job/kvbench/... without the query", paths)
	}
	if len(queries) != 1 || queries[0] != "tenant=eu1&token=t0ken" || auths[0] != "ci:hunter2" {
		t.Errorf("queries %q, auths %q", queries, auths)
	}
	for _, s := range []string{stdout, stderr} {
		if strings.Contains(s, "hunter2") || strings.Contains(s, "t0ken") {
			t.Errorf("console shows a credential: %s", s)
		}
	}
	filepath.WalkDir(out, func(path string, d fs.DirEntry, err error) error {
		if err == nil && !d.IsDir() {
			if data, _ := os.ReadFile(path); strings.Contains(string(data), "hunter2") {
				t.Errorf("%s holds the password", path)
			}
		}
		return nil
	})

	// Bad input, one line each, before anything runs.
	run := filepath.Join("testdata", "compare", "baseline")
	for _, args := range [][]string{
		{"push", run, pg.URL, "--push-password-env", "KVBENCH_TEST_PUSH_PASSWORD"},                                               // no user
		{"push", run, pg.URL, "--push-user-env", "KVBENCH_TEST_PUSH_USER", "--push-password-env", "KVBENCH_TEST_UNSET_VARIABLE"}, // unset
		{"push", run, strings.Replace(pg.URL, "http://", "http://a:b@", 1), "--push-user-env", "KVBENCH_TEST_PUSH_USER", "--push-password-env", "KVBENCH_TEST_PUSH_PASSWORD"},
	} {
		_, stderr, code := runCLI(t, args...)
		if code != cli.ExitUsage || strings.Count(stderr, "\n") != 1 || strings.Contains(stderr, "hunter2") {
			t.Errorf("%v: exit %d: %q", args[3:], code, stderr)
		}
	}
	if n := len(gw.pushes()); n != 1 {
		t.Errorf("bad input pushed: %d pushes", n)
	}
}

func (g *gateway) pushes() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string{}, g.paths...)
}

// TestRunPushFailureKeepsTheRun: a gateway that refuses the push costs the push, never the
// run: its records are on disk, the exit code is 5, the message says how to retry, and
// kvbench push sends the same run once the gateway answers.
func TestRunPushFailureKeepsTheRun(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	gw := &gateway{status: http.StatusServiceUnavailable}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	pushURL := strings.Replace(pg.URL, "http://", "http://ci:hunter2@", 1)
	out := t.TempDir()
	_, stderr, code := runCLI(t, "run", writeScenario(t, regressionScenario), "--endpoint", srv.URL()+"/v1",
		"--out", out, "--force", "--push", pushURL, "--push-label", "cluster=ci")
	if code != cli.ExitPushFailed {
		t.Fatalf("exit %d, want %d: %s", code, cli.ExitPushFailed, stderr)
	}
	if strings.Contains(stderr, "hunter2") || !strings.Contains(stderr, "kvbench push ") || !strings.Contains(stderr, "503") {
		t.Errorf("stderr should name the status and the retry, without the password: %s", stderr)
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	if _, err := runs.Load(dir); err != nil {
		t.Fatalf("the run's records: %v", err)
	}
	if p := gw.pushes(); len(p) != 1 || !strings.HasPrefix(p[0], "PUT /metrics/job/kvbench/") {
		t.Fatalf("pushes %v, want one PUT", p)
	}

	gw.mu.Lock()
	gw.status = http.StatusOK
	gw.mu.Unlock()
	stdout, stderr, code := runCLI(t, "push", dir, pushURL, "--push-label", "cluster=ci")
	if code != cli.ExitOK || !strings.Contains(stdout, "pushed "+dir) {
		t.Fatalf("retry: exit %d: %s%s", code, stdout, stderr)
	}
	p := gw.pushes()
	if len(p) != 2 || groupKey(p[0]) != groupKey(p[1]) {
		t.Errorf("the retry's group %v differs from the run's", p)
	}
	for _, part := range []string{"/scenario/nightly-tiny", "/cluster/ci", "/endpoint/127.0.0.1:"} {
		if !strings.Contains(p[1], part) {
			t.Errorf("group %s lacks %s", p[1], part)
		}
	}
}

// groupKey reads "PUT /metrics/job/kvbench/a/1/b/2" as its sorted label pairs: the push
// package writes the grouping labels in map order.
func groupKey(push string) string {
	parts := strings.Split(strings.TrimPrefix(push, "PUT /metrics/"), "/")
	var pairs []string
	for i := 0; i+1 < len(parts); i += 2 {
		pairs = append(pairs, parts[i]+"="+parts[i+1])
	}
	sort.Strings(pairs)
	return strings.Join(pairs, ",")
}

// gaugeValue returns the value of name's one sample in a pushed body, and whether it is there.
func gaugeValue(fams []*dto.MetricFamily, name string) (float64, bool) {
	for _, f := range fams {
		if f.GetName() == name && len(f.GetMetric()) == 1 {
			return f.GetMetric()[0].GetGauge().GetValue(), true
		}
	}
	return 0, false
}

// TestComparePushesItsResult: compare --push sends the comparison's series under its own job
// (kvbench_compare), grouped by the candidate's identity and the labels, so an alert can fire
// on the regression compare found; a regression's exit 4 outranks a failed push's 5.
func TestComparePushesItsResult(t *testing.T) {
	gw := &gateway{status: http.StatusOK}
	pg := httptest.NewServer(gw)
	defer pg.Close()
	base, cand := filepath.Join("testdata", "compare", "baseline"), filepath.Join("testdata", "compare", "candidate")
	_, stderr, code := runCLI(t, "compare", base, cand, "--push", pg.URL, "--push-label", "cluster=ci")
	if code != cli.ExitRegression {
		t.Fatalf("exit %d, want %d: %s", code, cli.ExitRegression, stderr)
	}
	paths := gw.pushes()
	_, _, bodies := gw.pushed()
	if len(paths) != 1 || !strings.HasPrefix(paths[0], "PUT /metrics/job/kvbench_compare/") {
		t.Fatalf("pushes %v, want one PUT to job kvbench_compare", paths)
	}
	for _, part := range []string{"/scenario/nightly-tiny", "/endpoint/127.0.0.1:37973", "/cluster/ci"} {
		if !strings.Contains(paths[0], part) {
			t.Errorf("group %s lacks %s", paths[0], part)
		}
	}
	if v, ok := gaugeValue(bodies[0], "kvbench_compare_regressions"); !ok || v < 1 {
		t.Errorf("kvbench_compare_regressions = %v (present %v), want the findings", v, ok)
	}
	if v, ok := gaugeValue(bodies[0], "kvbench_compare_timestamp_seconds"); !ok || v <= 0 {
		t.Errorf("kvbench_compare_timestamp_seconds = %v (present %v)", v, ok)
	}

	gw.mu.Lock()
	gw.status = http.StatusServiceUnavailable
	gw.mu.Unlock()
	if _, stderr, code := runCLI(t, "compare", base, cand, "--push", pg.URL); code != cli.ExitRegression || !strings.Contains(stderr, "push failed") {
		t.Errorf("regression and a failed push: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "compare", base, base, "--push", pg.URL); code != cli.ExitPushFailed || !strings.Contains(stderr, "503") {
		t.Errorf("no regression and a failed push: exit %d: %s", code, stderr)
	}
}

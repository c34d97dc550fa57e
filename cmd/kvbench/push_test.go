package main

import (
	"io"
	"net/http"
	"net/http/httptest"
	"path/filepath"
	"sort"
	"strings"
	"sync"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
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
		if code != exitUsage || strings.Count(stderr, "\n") != 1 {
			t.Errorf("%v: exit %d, want %d with one line: %q", args, code, exitUsage, stderr)
		}
	}
}

// gateway is a stand-in Pushgateway that answers every push with status and counts them.
type gateway struct {
	mu     sync.Mutex
	status int
	paths  []string
}

func (g *gateway) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	io.Copy(io.Discard, r.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.paths = append(g.paths, r.Method+" "+r.URL.Path)
	w.WriteHeader(g.status)
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
	if code != exitPushFailed {
		t.Fatalf("exit %d, want %d: %s", code, exitPushFailed, stderr)
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
	if code != exitOK || !strings.Contains(stdout, "pushed "+dir) {
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

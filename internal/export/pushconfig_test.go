package export

import (
	"context"
	"errors"
	"io"
	"net/http"
	"net/http/httptest"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
)

// env is a fixed environment for PushConfig.Options: the password is a Secret's.
func env(name string) string {
	return map[string]string{"PUSH_USER": "ci", "PUSH_PASSWORD": "hunter2"}[name]
}

func TestPushConfigOptions(t *testing.T) {
	good := PushConfig{URL: "http://gw:9091/?tenant=eu1", Labels: []string{"cluster=eu1", "rack=r2"}, Timeout: time.Second, UserEnv: "PUSH_USER", PasswordEnv: "PUSH_PASSWORD"}
	opts, err := good.Options(env)
	if err != nil {
		t.Fatal(err)
	}
	want := PushOptions{URL: good.URL, Labels: []Label{{"cluster", "eu1"}, {"rack", "r2"}}, Timeout: time.Second, Username: "ci", Password: "hunter2"}
	if opts.URL != want.URL || opts.Timeout != want.Timeout || opts.Username != want.Username || opts.Password != want.Password || len(opts.Labels) != 2 || opts.Labels[0] != want.Labels[0] || opts.Labels[1] != want.Labels[1] {
		t.Errorf("options %+v, want %+v", opts, want)
	}
	// Without --push (run, compare) the rest is still checked; without credentials none is read.
	if opts, err := (PushConfig{Timeout: time.Second}).Options(env); err != nil || opts.Password != "" {
		t.Errorf("no URL, no credentials: %+v, %v", opts, err)
	}

	cases := []struct {
		name   string
		edit   func(*PushConfig)
		inText string // the error names the place at fault
	}{
		{"not http", func(c *PushConfig) { c.URL = "ftp://gw:9091" }, "want the Pushgateway's http(s) base URL"},
		{"no scheme", func(c *PushConfig) { c.URL = "gateway:9091" }, "want the Pushgateway's http(s) base URL"},
		{"the group's path", func(c *PushConfig) { c.URL = "http://gw:9091/metrics/job/kvbench" }, "without /metrics/job/..."},
		{"no timeout", func(c *PushConfig) { c.Timeout = 0 }, "--push-timeout must be positive"},
		{"reserved label", func(c *PushConfig) { c.Labels = []string{"job=x"} }, "--push-label: "},
		{"label twice", func(c *PushConfig) { c.Labels = []string{"a=1", "a=2"} }, `--push-label: "a" given twice`},
		{"no user", func(c *PushConfig) { c.UserEnv = "" }, "--push-user-env and --push-password-env go together"},
		{"no password", func(c *PushConfig) { c.PasswordEnv = "" }, "--push-user-env and --push-password-env go together"},
		{"unset", func(c *PushConfig) { c.PasswordEnv = "UNSET" }, "--push-password-env: environment variable UNSET is unset or empty"},
		{"credentials twice", func(c *PushConfig) { c.URL = "http://a:s3cret@gw:9091" }, "has user info and --push-password-env names a password"},
	}
	for _, c := range cases {
		conf := good
		conf.Labels = append([]string(nil), good.Labels...)
		c.edit(&conf)
		_, err := conf.Options(env)
		if err == nil || !strings.Contains(err.Error(), c.inText) {
			t.Errorf("%s: %v, want an error with %q", c.name, err, c.inText)
			continue
		}
		if strings.Contains(err.Error(), "s3cret") || strings.Contains(err.Error(), "hunter2") {
			t.Errorf("%s: the error shows a credential: %v", c.name, err)
		}
	}
}

func TestParseLabels(t *testing.T) {
	got, err := ParseLabels("--label", []string{"cluster=eu1", "rack=r=2"})
	if err != nil || len(got) != 2 || got[0] != (Label{"cluster", "eu1"}) || got[1] != (Label{"rack", "r=2"}) {
		t.Errorf("labels %v, %v", got, err)
	}
	if got, err := ParseLabels("--label", nil); err != nil || got != nil {
		t.Errorf("no labels: %v, %v", got, err)
	}
	for _, bad := range [][]string{{"cluster"}, {"job=x"}, {"a=1", "b=2", "a=1"}} {
		if _, err := ParseLabels("--label", bad); err == nil || !strings.HasPrefix(err.Error(), "--label: ") {
			t.Errorf("%q: %v, want an error naming --label", bad, err)
		}
	}
}

// TestCheckPushable: a run a signal stopped (interrupted) or a kill left (incomplete) is
// refused in words that say why and how to push it anyway; a completed or failed run, or any
// run when allowed, is pushable.
func TestCheckPushable(t *testing.T) {
	r := load(t, singleRun)
	cases := []struct {
		status, reason string
		allow, refused bool
		inText         string
	}{
		{record.StatusCompleted, "", false, false, ""},
		{record.StatusFailed, "gate failed", false, false, ""},
		{record.StatusInterrupted, "received SIGTERM", false, true, "is interrupted (received SIGTERM); its push would replace the group's last complete run with part of one (kvbench push --allow-incomplete pushes it, marked interrupted)"},
		{record.StatusIncomplete, "", false, true, "is incomplete (no stop reason recorded)"},
		{record.StatusInterrupted, "received SIGTERM", true, false, ""},
	}
	for _, c := range cases {
		r.Status, r.StopReason = c.status, c.reason
		err := CheckPushable(r, c.allow)
		if !c.refused {
			if err != nil {
				t.Errorf("%s (allow %v): %v", c.status, c.allow, err)
			}
			continue
		}
		var ue *UnfinishedError
		if !errors.Is(err, ErrUnfinished) || !errors.As(err, &ue) || ue.Dir != r.Dir {
			t.Errorf("%s: %v, want an *UnfinishedError of %s", c.status, err, r.Dir)
			continue
		}
		if want := "not pushed: " + r.Dir + " " + c.inText; !strings.HasPrefix(err.Error(), "not pushed: "+r.Dir) || !strings.Contains(err.Error(), c.inText) {
			t.Errorf("%s: %q, want %q", c.status, err, want)
		}
	}
}

// recorder is a stand-in Pushgateway that answers status and keeps each push's method and path.
type recorder struct {
	mu     sync.Mutex
	status int
	pushes []string
}

func (g *recorder) ServeHTTP(w http.ResponseWriter, req *http.Request) {
	io.Copy(io.Discard, req.Body)
	g.mu.Lock()
	defer g.mu.Unlock()
	g.pushes = append(g.pushes, req.Method+" "+req.URL.Path)
	w.WriteHeader(g.status)
}

func (g *recorder) sent() []string {
	g.mu.Lock()
	defer g.mu.Unlock()
	return append([]string(nil), g.pushes...)
}

// TestPushRunsChecksEveryRunFirst: one unfinished run refuses the whole push, so nothing
// reaches the gateway; allowed, every run is pushed in order, and the line of one that did
// not complete names its status; a failed push is counted, the others still go.
func TestPushRunsChecksEveryRunFirst(t *testing.T) {
	gw := &recorder{status: http.StatusOK}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	done, stopped := load(t, repeatedRun), load(t, singleRun)
	stopped.Status, stopped.StopReason = record.StatusInterrupted, "received SIGINT"
	opts := PushOptions{URL: srv.URL, Timeout: 10 * time.Second}
	var out strings.Builder
	err := PushRuns(context.Background(), []*runs.Run{done, stopped}, nil, false, opts, &out)
	if !errors.Is(err, ErrUnfinished) || len(gw.sent()) != 0 || out.Len() != 0 {
		t.Fatalf("an interrupted run among two: %v, pushes %v, output %q", err, gw.sent(), out.String())
	}
	if err := PushRuns(context.Background(), []*runs.Run{done, stopped}, nil, true, opts, &out); err != nil {
		t.Fatal(err)
	}
	if want := "pushed " + done.Dir + "\npushed " + stopped.Dir + " (marked interrupted)\n"; out.String() != want {
		t.Errorf("output %q, want %q", out.String(), want)
	}
	if p := gw.sent(); len(p) != 2 || !strings.Contains(p[0], "/scenario/"+done.Scenario.Name) || !strings.Contains(p[1], "/scenario/"+stopped.Scenario.Name) {
		t.Errorf("pushes %v, want the two runs in order", p)
	}

	gw.mu.Lock()
	gw.status = http.StatusServiceUnavailable
	gw.mu.Unlock()
	out.Reset()
	err = PushRuns(context.Background(), []*runs.Run{done, stopped}, nil, true, opts, &out)
	if err == nil || !strings.HasPrefix(err.Error(), "2 of 2 push(es) failed: ") || !strings.Contains(err.Error(), "503") || out.Len() != 0 {
		t.Errorf("a refusing gateway: %v, output %q", err, out.String())
	}
	if n := len(gw.sent()); n != 4 {
		t.Errorf("%d pushes, want 4: a failed push does not stop the next", n)
	}
}

// TestPushComparisonGroup: a comparison goes to its own job, grouped by the candidate's
// identity and the options' labels, so it never replaces the candidate run's own group.
func TestPushComparisonGroup(t *testing.T) {
	gw := &recorder{status: http.StatusOK}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	base, cand := load(t, repeatedRun), load(t, "../../cmd/kvbench/testdata/compare/candidate")
	res, err := compare.Compare(base, cand, compare.Options{Tolerance: compare.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	if err := PushComparison(context.Background(), res, cand, PushOptions{URL: srv.URL, Labels: []Label{{"cluster", "eu1"}}}); err != nil {
		t.Fatal(err)
	}
	p := gw.sent()
	if len(p) != 1 || !strings.HasPrefix(p[0], "PUT /metrics/job/"+CompareJob+"/") {
		t.Fatalf("pushes %v, want one PUT to job %s", p, CompareJob)
	}
	for _, part := range []string{"/scenario/" + cand.Scenario.Name, "/cluster/eu1", "/endpoint/"} {
		if !strings.Contains(p[0], part) {
			t.Errorf("group %s lacks %s", p[0], part)
		}
	}
}

// TestOpenMetricsOfRuns: the text of two runs carries both, each with its identity and the
// extra labels; the same run twice is an ErrDuplicate, and nothing is returned.
func TestOpenMetricsOfRuns(t *testing.T) {
	a, b := load(t, repeatedRun), load(t, singleRun)
	text, err := OpenMetrics([]*runs.Run{a, b}, nil, []Label{{"cluster", "eu1"}}, false)
	if err != nil {
		t.Fatal(err)
	}
	if !strings.HasSuffix(string(text), "# EOF\n") {
		t.Errorf("the text does not end with # EOF:\n%s", text)
	}
	for _, r := range []*runs.Run{a, b} {
		found := false
		for _, line := range strings.Split(string(text), "\n") {
			found = found || strings.HasPrefix(line, "kvbench_run_timestamp_seconds{") && strings.Contains(line, `cluster="eu1"`) && strings.Contains(line, `scenario="`+r.Scenario.Name+`"`)
		}
		if !found {
			t.Errorf("the text lacks %s's timestamp with the extra label:\n%s", r.Scenario.Name, text)
		}
	}
	if text, err := OpenMetrics([]*runs.Run{a, a}, nil, nil, false); !errors.Is(err, ErrDuplicate) || text != nil {
		t.Errorf("the same run twice: %v (%d bytes), want ErrDuplicate and no text", err, len(text))
	}
}

// TestPushSweepGroup: a capacity sweep goes to its own job, grouped by its scenario, after
// the runs; an unfinished sweep refuses the whole push unless allowed.
func TestPushSweepGroup(t *testing.T) {
	gw := &recorder{status: http.StatusOK}
	srv := httptest.NewServer(gw)
	defer srv.Close()
	done := load(t, repeatedRun)
	sw := Sweep{Dir: "results/chat-capacity-sweep", Record: fixtureSweep()}
	opts := PushOptions{URL: srv.URL, Timeout: 10 * time.Second}
	var out strings.Builder
	if err := PushRuns(context.Background(), []*runs.Run{done}, []Sweep{sw}, false, opts, &out); err != nil {
		t.Fatal(err)
	}
	p := gw.sent()
	if len(p) != 2 || p[1] != "PUT /metrics/job/"+SweepJob+"/scenario/chat-capacity" {
		t.Fatalf("pushes %v, want the run's, then the sweep's group", p)
	}
	if !strings.HasSuffix(out.String(), "pushed sweep results/chat-capacity-sweep\n") {
		t.Errorf("output %q", out.String())
	}
	stopped := *sw.Record
	stopped.Status, stopped.StopReason = record.StatusInterrupted, "received SIGINT"
	err := PushRuns(context.Background(), nil, []Sweep{{Dir: sw.Dir, Record: &stopped}}, false, opts, &out)
	if !errors.Is(err, ErrUnfinished) || len(gw.sent()) != 2 {
		t.Errorf("an interrupted sweep: %v, pushes %v", err, gw.sent())
	}
}

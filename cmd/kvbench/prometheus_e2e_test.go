package main

import (
	"encoding/json"
	"fmt"
	"io"
	"math"
	"net"
	"net/http"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// prometheusBinaries finds Prometheus and the Pushgateway (Debian's packages by default, or
// KVBENCH_PROMETHEUS and KVBENCH_PUSHGATEWAY); without them the test skips, or fails when
// KVBENCH_REQUIRE_PROMETHEUS=1 (as .ci/run sets it).
func prometheusBinaries(t *testing.T) (prom, gateway string) {
	t.Helper()
	prom, gateway = os.Getenv("KVBENCH_PROMETHEUS"), os.Getenv("KVBENCH_PUSHGATEWAY")
	if prom == "" {
		prom = "/usr/bin/prometheus"
	}
	if gateway == "" {
		gateway = "/usr/bin/prometheus-pushgateway"
	}
	for _, bin := range []string{prom, gateway} {
		if _, err := os.Stat(bin); err != nil {
			msg := fmt.Sprintf("%s not found (apt-get install prometheus prometheus-pushgateway, or set KVBENCH_PROMETHEUS and KVBENCH_PUSHGATEWAY)", bin)
			if os.Getenv("KVBENCH_REQUIRE_PROMETHEUS") == "1" {
				t.Fatal(msg)
			}
			t.Skip(msg)
		}
	}
	return prom, gateway
}

func freePort(t *testing.T) string {
	t.Helper()
	l, err := net.Listen("tcp", "127.0.0.1:0")
	if err != nil {
		t.Fatal(err)
	}
	defer l.Close()
	return strconv.Itoa(l.Addr().(*net.TCPAddr).Port)
}

// startDaemon starts bin until the test ends and waits (up to 30 s) for readyURL to answer 200.
func startDaemon(t *testing.T, bin, readyURL string, args ...string) {
	t.Helper()
	logPath := filepath.Join(t.TempDir(), filepath.Base(bin)+".log")
	logf, err := os.Create(logPath)
	if err != nil {
		t.Fatal(err)
	}
	cmd := exec.Command(bin, args...)
	cmd.Stdout, cmd.Stderr = logf, logf
	if err := cmd.Start(); err != nil {
		t.Fatal(err)
	}
	exited := make(chan error, 1)
	go func() { exited <- cmd.Wait() }()
	t.Cleanup(func() {
		cmd.Process.Kill()
		<-exited
		logf.Close()
	})
	client := &http.Client{Timeout: 2 * time.Second}
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		select {
		case err := <-exited:
			exited <- err
			log, _ := os.ReadFile(logPath)
			t.Fatalf("%s exited (%v):\n%s", bin, err, log)
		default:
		}
		if resp, err := client.Get(readyURL); err == nil {
			resp.Body.Close()
			if resp.StatusCode == http.StatusOK {
				return
			}
		}
		time.Sleep(100 * time.Millisecond)
	}
	log, _ := os.ReadFile(logPath)
	t.Fatalf("%s not ready at %s after 30 s:\n%s", bin, readyURL, log)
}

// promSample is one series of a Prometheus instant query.
type promSample struct {
	Metric map[string]string `json:"metric"`
	Value  [2]any            `json:"value"`
}

func (s promSample) float(t *testing.T) float64 {
	t.Helper()
	str, _ := s.Value[1].(string)
	v, err := strconv.ParseFloat(str, 64)
	if err != nil {
		t.Fatalf("value %v: %v", s.Value, err)
	}
	return v
}

// query polls Prometheus's /api/v1/query (up to 30 s) until q returns want series.
func query(t *testing.T, base, q string, want int) []promSample {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var last string
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
		if err == nil {
			body, _ := io.ReadAll(resp.Body)
			resp.Body.Close()
			var r struct {
				Status string `json:"status"`
				Error  string `json:"error"`
				Data   struct {
					Result []promSample `json:"result"`
				} `json:"data"`
			}
			if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
				t.Fatalf("query %s: %s (%v)", q, body, err)
			}
			if len(r.Data.Result) == want {
				return r.Data.Result
			}
			last = string(body)
		} else {
			last = err.Error()
		}
		time.Sleep(250 * time.Millisecond)
	}
	t.Fatalf("query %s: no %d series after 30 s; last answer: %s", q, want, last)
	return nil
}

// queryAny polls q (up to 30 s) until it returns a series, and returns what it last got.
func queryAny(t *testing.T, base, q string) []promSample {
	t.Helper()
	client := &http.Client{Timeout: 5 * time.Second}
	var got []promSample
	deadline := time.Now().Add(30 * time.Second)
	for time.Now().Before(deadline) {
		resp, err := client.Get(base + "/api/v1/query?query=" + url.QueryEscape(q))
		if err != nil {
			time.Sleep(250 * time.Millisecond)
			continue
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		var r struct {
			Status string `json:"status"`
			Data   struct {
				Result []promSample `json:"result"`
			} `json:"data"`
		}
		if err := json.Unmarshal(body, &r); err != nil || r.Status != "success" {
			t.Fatalf("query %s: %s (%v)", q, body, err)
		}
		if got = r.Data.Result; len(got) > 0 {
			return got
		}
		time.Sleep(250 * time.Millisecond)
	}
	return got
}

// TestPushReachesPrometheus runs a repeated scenario on the embedded engine with --push to a
// real Pushgateway, scraped by a real Prometheus (honor_labels, 1 s interval), and reads the
// series back through Prometheus's query API: the labels are the grouping key, the values the
// run record's. Then kvbench push sends the same run under another label, as a retry would.
func TestPushReachesPrometheus(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	promBin, gatewayBin := prometheusBinaries(t)
	dir := t.TempDir()
	gwAddr, promAddr := "127.0.0.1:"+freePort(t), "127.0.0.1:"+freePort(t)
	startDaemon(t, gatewayBin, "http://"+gwAddr+"/-/ready",
		"--web.listen-address="+gwAddr, "--persistence.file="+filepath.Join(dir, "pushgateway.data"))
	config := filepath.Join(dir, "prometheus.yml")
	if err := os.WriteFile(config, []byte(`global:
  scrape_interval: 1s
  evaluation_interval: 1s
scrape_configs:
  - job_name: pushgateway
    honor_labels: true
    static_configs:
      - targets: ["`+gwAddr+`"]
`), 0o644); err != nil {
		t.Fatal(err)
	}
	startDaemon(t, promBin, "http://"+promAddr+"/-/ready",
		"--config.file="+config, "--storage.tsdb.path="+filepath.Join(dir, "tsdb"),
		"--web.listen-address="+promAddr)

	// 20 ms between tokens: the 8 tokens of a request arrive in several reads even on a
	// loaded machine, so every request has a decode rate for the dashboard's panel.
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.DecodeTokensPerSecond = 50 }})
	out := t.TempDir()
	// More than one output token per request, so the dashboard's decode-rate panel has data.
	_, stderr, code := runCLI(t, "run", writeScenario(t, strings.Replace(regressionScenario, "max_tokens = 1\n", "max_tokens = 8\n", 1)), "--endpoint", srv.URL()+"/v1",
		"--out", out, "--force", "--repeat", "2", "--push", "http://"+gwAddr, "--push-label", "ci=run")
	if code != cli.ExitOK {
		t.Fatalf("run --push: exit %d: %s", code, stderr)
	}
	r, err := runs.Load(filepath.Join(out, onlyEntry(t, out)))
	if err != nil {
		t.Fatal(err)
	}
	replay := r.Run.Replay("replay")
	endpoint := srv.URL()[len("http://"):]
	prom := "http://" + promAddr

	// The verdict series: one per known verdict, 1 for the record's; the labels are the
	// grouping key's (job, scenario, endpoint, ci) and the step's.
	got := query(t, prom, `kvbench_replay_verdict{ci="run"} == 1`, 1)[0]
	want := map[string]string{"job": "kvbench", "scenario": "nightly-tiny", "endpoint": endpoint, "ci": "run", "step": "replay", "verdict": string(replay.Verdict)}
	for k, v := range want {
		if got.Metric[k] != v {
			t.Errorf("verdict series label %s = %q, want %q (labels %v)", k, got.Metric[k], v, got.Metric)
		}
	}
	if _, ok := got.Metric["recipe"]; ok {
		t.Errorf("recipe label on a run without a recipe: %v", got.Metric)
	}
	if n := len(query(t, prom, `kvbench_replay_verdict{ci="run"} == 0`, 5)); n != 5 {
		t.Errorf("%d other verdicts at 0", n)
	}

	check := func(q string, want float64) {
		t.Helper()
		if v := query(t, prom, q, 1)[0].float(t); math.Abs(v-want) > 1e-9*math.Max(1, math.Abs(want)) {
			t.Errorf("%s = %v, record %v", q, v, want)
		}
	}
	check(`kvbench_cached_prompt_tokens_ratio{ci="run",step="replay"}`, *replay.CachedFraction)
	check(`kvbench_offload_load_bytes_per_token{ci="run"}`, *r.Cache.LoadBytesPerTokenMeasured)
	seq1 := r.Repetitions[0].Steps[0].Requests[1]
	check(`kvbench_step_time_to_first_output_seconds_count{ci="run",step="sequence"}`, float64(len(r.Repetitions[0].Steps[0].Requests)))
	if got := queryAny(t, prom, `kvbench_time_to_first_output_seconds{ci="run"}`); len(got) != 0 {
		t.Errorf("per-request series pushed without --per-request-series: %v", got)
	}
	at, _ := time.Parse(time.RFC3339, r.ObservedAt)
	check(`kvbench_run_timestamp_seconds{ci="run"}`, float64(at.Unix()))
	check(`kvbench_run_status{ci="run",status="completed"}`, 1)
	check(`kvbench_repeats_repetitions{ci="run"}`, 2)
	replayRequests := 0
	for _, st := range r.Repetitions[0].Steps {
		if st.Step == "replay" {
			replayRequests = len(st.Requests)
		}
	}
	// By default pooled over the step's requests and the 2 repetitions.
	check(`kvbench_repeats_time_to_first_output_seconds_count{ci="run",step="replay"}`, float64(2*replayRequests))

	// An unrepeated run of the same scenario, pushed under ci=single, and the repeated run
	// compared with itself, pushed under ci=run.
	single := t.TempDir()
	if _, stderr, code := runCLI(t, "run", writeScenario(t, strings.Replace(regressionScenario, "max_tokens = 1\n", "max_tokens = 8\n", 1)), "--endpoint", srv.URL()+"/v1",
		"--out", single, "--force", "--push", "http://"+gwAddr, "--push-label", "ci=single"); code != cli.ExitOK {
		t.Fatalf("unrepeated run --push: exit %d: %s", code, stderr)
	}
	if _, stderr, code := runCLI(t, "compare", r.Dir, r.Dir, "--push", "http://"+gwAddr, "--push-label", "ci=run"); code != cli.ExitOK {
		t.Fatalf("compare --push: exit %d: %s", code, stderr)
	}
	check(`kvbench_compare_regressions{ci="run",job="kvbench_compare"}`, 0)

	// Every dashboard query is valid PromQL and finds the pushed runs, the repeated and the
	// unrepeated, its variables matching everything but the run's ci label; what a run or a
	// comparison without gates, repeats, regressions or server changes has no series for
	// stays empty.
	panels, _ := dashboardQueries(t)
	// This scenario has no cold twin, no trace, cold caches and is no sweep: TestDeployQueriesFindSeriesARunExports
	// checks those panels' selectors against a record that has them.
	unmeasured := []string{"Offload gain over the cold twin", "Reload fidelity", "Tier shares, measured and ideal", "Warm caches", "Sweep capacity", "Sweep levels: TTFT p90 and threshold"}
	empty := map[string][]string{
		"run":    append([]string{"Gates", "Compare: relative change of regressed metrics", "Server changes against the baseline"}, unmeasured...),
		"single": append([]string{"Gates", "Compare: relative change of regressed metrics", "Server changes against the baseline", "Time to first output, spread of repetitions", "Repetitions agree"}, unmeasured...),
	}
	for ci, skip := range empty {
		only := strings.NewReplacer(`cluster=~"$cluster"`, `ci="`+ci+`"`, `"$scenario"`, `".*"`, `"$endpoint"`, `".*"`)
		for title, exprs := range panels {
			if slices.Contains(skip, title) {
				continue
			}
			for _, e := range exprs {
				if len(queryAny(t, prom, only.Replace(e))) == 0 {
					t.Errorf("dashboard panel %q finds nothing for the run pushed as ci=%s: %s", title, ci, only.Replace(e))
				}
			}
		}
	}

	// kvbench push, as a retry: the same run under another grouping key, per request too.
	if _, stderr, code := runCLI(t, "push", r.Dir, "http://"+gwAddr, "--push-label", "ci=retry", "--per-request-series"); code != cli.ExitOK {
		t.Fatalf("push: exit %d: %s", code, stderr)
	}
	check(`kvbench_cached_prompt_tokens_ratio{ci="retry",step="replay"}`, *replay.CachedFraction)
	check(`kvbench_time_to_first_output_seconds{ci="retry",step="sequence",request="1"}`, *seq1.Result.TimeToFirstOutputMS/1000)
	check(`kvbench_repeats_time_to_first_output_seconds_count{ci="retry",step="replay",request="0"}`, 2)
}

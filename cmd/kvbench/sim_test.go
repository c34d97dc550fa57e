package main

import (
	"bytes"
	"context"
	"errors"
	"io"
	"net/http"
	"regexp"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// syncBuffer lets the test read what a running command writes.
type syncBuffer struct {
	mu  sync.Mutex
	buf bytes.Buffer
}

func (b *syncBuffer) Write(p []byte) (int, error) {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.Write(p)
}

func (b *syncBuffer) String() string {
	b.mu.Lock()
	defer b.mu.Unlock()
	return b.buf.String()
}

// startSimCommand runs kvbench sim with args on a free port until the test ends, and
// returns its base URL and what it printed so far.
func startSimCommand(t *testing.T, args ...string) (string, *syncBuffer, func() error) {
	t.Helper()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	stdout := &syncBuffer{}
	done := make(chan error, 1)
	go func() {
		done <- run(ctx, append([]string{"sim", "--addr", "127.0.0.1:0"}, args...), stdout, io.Discard)
	}()
	urlPattern := regexp.MustCompile(`serving (http://127\.0\.0\.1:\d+)`)
	var url string
	for range 3000 { // up to 30 s for the server to print its address, on a loaded machine
		if m := urlPattern.FindStringSubmatch(stdout.String()); m != nil {
			url = m[1]
			break
		}
		select {
		case err := <-done:
			t.Fatalf("sim exited early: %v\n%s", err, stdout.String())
		case <-time.After(10 * time.Millisecond):
		}
	}
	if url == "" {
		t.Fatalf("no URL printed:\n%s", stdout.String())
	}
	stop := func() error {
		cancel()
		select {
		case err := <-done:
			return err
		case <-time.After(10 * time.Second):
			t.Fatal("sim did not stop after cancel")
			return nil
		}
	}
	return url, stdout, stop
}

func TestSimServesUntilCancelled(t *testing.T) {
	url, stdout, stop := startSimCommand(t, "--profile", "tiny")
	if !strings.Contains(stdout.String(), "tiny: model tiny-sim") {
		t.Errorf("no profile summary:\n%s", stdout.String())
	}
	if strings.Contains(stdout.String(), "faults:") {
		t.Errorf("faults listed without any:\n%s", stdout.String())
	}
	resp, err := http.Get(url + "/health")
	if err != nil || resp.StatusCode != http.StatusOK {
		t.Fatalf("/health: %v", err)
	}
	resp.Body.Close()
	if err := stop(); err != nil {
		t.Errorf("sim returned %v after cancel, want nil", err)
	}
}

// TestSimFaultFlags: the fault flags reach the engine (each fault's own behaviour is tested
// in package sim) and a hung request does not keep the command from stopping.
func TestSimFaultFlags(t *testing.T) {
	url, stdout, stop := startSimCommand(t, "--profile", "tiny", "--speed", "1000",
		"--fail-every", "2", "--hang", "/v1/models", "--omit-metric", "vllm:prefix_cache_hits_total",
		"--metric-value", "vllm:prompt_tokens_total=NaN", "--metric-value", "vllm:generation_tokens_total=+Inf",
		"--metrics-fault", "error", "--metrics-fault-after", "1")
	if !strings.Contains(stdout.String(), "faults: fail_every_nth_request = 2, ") {
		t.Errorf("faults not listed:\n%s", stdout.String())
	}
	chat := func() int {
		resp, err := http.Post(url+"/v1/chat/completions", "application/json",
			strings.NewReader(`{"model":"tiny-sim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`))
		if err != nil {
			t.Fatal(err)
		}
		resp.Body.Close()
		return resp.StatusCode
	}
	if a, b := chat(), chat(); a != 200 || b != 500 {
		t.Errorf("chat statuses %d, %d; want 200, 500", a, b)
	}
	get := func(path string) (int, string) {
		resp, err := http.Get(url + path)
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		body, _ := io.ReadAll(resp.Body)
		return resp.StatusCode, string(body)
	}
	status, body := get("/metrics")
	if status != 200 || strings.Contains(body, "vllm:prefix_cache_hits_total") ||
		!strings.Contains(body, `vllm:prompt_tokens_total{engine="0",model_name="tiny-sim"} NaN`) ||
		!strings.Contains(body, `vllm:generation_tokens_total{engine="0",model_name="tiny-sim"} +Inf`) {
		t.Errorf("first scrape: status %d\n%s", status, body)
	}
	if status, _ := get("/metrics"); status != 500 {
		t.Errorf("second scrape: status %d, want 500", status)
	}
	// /v1/models hangs until the client gives up (here after 200 ms) or the server stops.
	ctx, cancel := context.WithTimeout(context.Background(), 200*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, url+"/v1/models", nil)
	hung := make(chan error, 1)
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		hung <- err
	}()
	if err := <-hung; err == nil {
		t.Error("/v1/models answered")
	}
	if err := stop(); err != nil {
		t.Errorf("sim returned %v after cancel, want nil", err)
	}
}

func TestSimUsageErrors(t *testing.T) {
	t.Setenv("KVBENCH_TEST_EMPTY_KEY", "")
	for _, args := range [][]string{
		{"sim", "--addr", "0.0.0.0:8000"},
		{"sim", "--addr", ":8000"},
		{"sim", "--addr", "192.0.2.1:8000"},
		{"sim", "--profile", "no-such-profile", "--addr", "127.0.0.1:0"},
		{"sim", "--speed", "-1"},
		{"sim", "--api-key-env", "KVBENCH_TEST_EMPTY_KEY"},
		{"sim", "extra"},
		{"sim", "--fail-every", "-1"},
		{"sim", "--metrics-delay", "-1s"},
		{"sim", "--metric-value", "vllm:prompt_tokens_total"},
		{"sim", "--metric-value", "vllm:prompt_tokens_total=lots"},
		{"sim", "--metric-value", "vllm:no_such_metric=1"},
		{"sim", "--omit-metric", "vllm:no_such_metric"},
		{"sim", "--hang", "/v1/nothing"},
		{"sim", "--metrics-fault", "slow"},
		{"sim", "--data-parallel", "-1"},
		{"sim", "--data-parallel", "2", "--router", "random"},
		{"sim", "--profile-file", "testdata/no-such-profile.toml"},
		{"sim", "--profile", "tiny", "--profile-file", "testdata/no-such-profile.toml"},
	} {
		err := run(context.Background(), args, io.Discard, io.Discard)
		var ee *cli.ExitError
		if !errors.As(err, &ee) || ee.Code != cli.ExitUsage {
			t.Errorf("%v: err %v, want a usage error", args, err)
		}
	}
}

func TestSimHelpShowsExample(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"sim", "-h"}, &out, io.Discard)
	if !errors.Is(err, cli.ErrHelpShown) || !strings.Contains(out.String(), "Example:") || !strings.Contains(out.String(), "--allow-remote") ||
		!strings.Contains(out.String(), "--fail-every 5 --hang /tokenize") {
		t.Errorf("err %v, help:\n%s", err, out.String())
	}
}

// TestSimDataParallelFlags: --data-parallel and --router reach the server, which says how it
// routes and serves one engine label per replica.
func TestSimDataParallelFlags(t *testing.T) {
	url, stdout, stop := startSimCommand(t, "--profile", "tiny", "--speed", "1000", "--data-parallel", "3", "--router", "prefix-affinity")
	if !strings.Contains(stdout.String(), "3 data-parallel replicas, each with this GPU pool and CPU tier, routed prefix-affinity") {
		t.Errorf("summary does not say the replicas:\n%s", stdout.String())
	}
	resp, err := http.Get(url + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	body, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	if !strings.Contains(string(body), `vllm:prompt_tokens_total{engine="2",model_name="tiny-sim"} 0.0`) {
		t.Errorf("no third engine's series:\n%s", body)
	}
	if err := stop(); err != nil {
		t.Errorf("sim returned %v after cancel, want nil", err)
	}
}

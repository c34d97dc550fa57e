package sim

import (
	"context"
	"encoding/json"
	"io"
	"math"
	"net/http"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"
)

func TestFailEveryNthRequest(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.FailEveryNthRequest = 2 })
	body := `{"model":"tiny-sim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	for i, want := range []int{200, 500, 200, 500} {
		status, out := postJSON(t, s.URL()+"/v1/chat/completions", body)
		if status != want {
			t.Errorf("request %d: status %d, want %d", i+1, status, want)
		}
		if status == 500 && out["error"].(map[string]any)["type"] != "InternalServerError" {
			t.Errorf("request %d: body %v", i+1, out)
		}
	}
}

func TestCutStream(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.CutStreamAfterTokens = 3 })
	events, err := rawStream(t, s, chatBody("cut me off", 20))
	if err == nil {
		t.Error("stream ended cleanly, want a broken connection")
	}
	if len(events) != 4 { // role chunk + 3 tokens
		t.Errorf("%d events before the cut, want 4", len(events))
	}
	for _, ev := range events {
		if ev.raw == "[DONE]" || ev.Usage != nil {
			t.Errorf("cut stream carried %s", ev.raw)
		}
	}
	fams := metrics(t, s)
	if r, a := metricSum(fams, "vllm:num_requests_running"), metricSum(fams, "vllm:request_success_total", "finished_reason", "abort"); r != 0 || a != 1 {
		t.Errorf("after cut: running %g, aborted %g; want 0, 1", r, a)
	}
}

func TestMalformedSSELine(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.MalformedSSEAtToken = 2 })
	events, err := rawStream(t, s, chatBody("garble", 4))
	if err != nil {
		t.Fatal(err)
	}
	broken := 0
	for i, ev := range events {
		if ev.raw != "[DONE]" && !json.Valid([]byte(ev.raw)) {
			broken++
			if i != 2 { // role chunk, token 1, then the broken line before token 2
				t.Errorf("broken line at event %d", i)
			}
		}
	}
	if broken != 1 || events[len(events)-1].raw != "[DONE]" {
		t.Errorf("%d broken lines, last event %q; want 1 and [DONE]", broken, events[len(events)-1].raw)
	}
}

func TestRestartAtRequest(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.RestartAtRequest = 3 })
	chat(t, s, "first prompt", 2)
	chat(t, s, "second prompt", 2)
	before := metricSum(metrics(t, s), "vllm:prompt_tokens_total")
	u := chat(t, s, "first prompt", 2)
	after := metrics(t, s)
	if got := metricSum(after, "vllm:prompt_tokens_total"); got != float64(u.PromptTokens) || got >= before {
		t.Errorf("prompt tokens %g before, %g after the restart; want only the third request's %d", before, got, u.PromptTokens)
	}
	if u.PromptTokensDetails != nil || metricSum(after, "vllm:prefix_cache_hits_total") != 0 {
		t.Error("the restarted server still had the first prompt cached")
	}
}

func TestMetricsDelay(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.MetricsDelay = 10 * time.Second })
	ctx, cancel := context.WithTimeout(context.Background(), 100*time.Millisecond)
	defer cancel()
	req, _ := http.NewRequestWithContext(ctx, http.MethodGet, s.URL()+"/metrics", nil)
	if resp, err := http.DefaultClient.Do(req); err == nil {
		resp.Body.Close()
		t.Error("/metrics answered inside its 10 s delay")
	}
}

// pending is a request sent in the background whose answer has not been awaited.
type pending struct {
	cancel context.CancelFunc
	done   chan error // the client's outcome: nil for any HTTP answer
}

// sendHanging sends method path in the background and waits (bounded) until the server is
// handling it; it fails if an answer came back by the time a /health round trip completed.
func sendHanging(t *testing.T, s *Server, method, path, body string) pending {
	t.Helper()
	before := s.inFlight.Load()
	ctx, cancel := context.WithCancel(context.Background())
	t.Cleanup(cancel)
	req, _ := http.NewRequestWithContext(ctx, method, s.URL()+path, strings.NewReader(body))
	p := pending{cancel: cancel, done: make(chan error, 1)}
	go func() {
		resp, err := http.DefaultClient.Do(req)
		if err == nil {
			resp.Body.Close()
		}
		p.done <- err
	}()
	for i := 0; s.inFlight.Load() == before; i++ {
		if i == 1000 {
			t.Fatalf("%s %s never reached a handler in 10 s", method, path)
		}
		select {
		case err := <-p.done:
			t.Fatalf("%s %s answered at once (err %v), want a hang", method, path, err)
		case <-time.After(10 * time.Millisecond):
		}
	}
	resp, err := http.Get(s.URL() + "/health")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	select {
	case err := <-p.done:
		t.Fatalf("%s %s answered (err %v), want a hang", method, path, err)
	default:
	}
	return p
}

// waitIdle fails unless every handler returns within 10 s: a hang must end with its client.
func waitIdle(t *testing.T, s *Server) {
	t.Helper()
	for i := 0; s.inFlight.Load() != 0; i++ {
		if i == 1000 {
			t.Fatalf("%d handlers still running 10 s after their clients left", s.inFlight.Load())
		}
		time.Sleep(10 * time.Millisecond)
	}
}

// closeWithin closes s and fails unless Close returns within 10 s.
func closeWithin(t *testing.T, s *Server) {
	t.Helper()
	closed := make(chan error, 1)
	go func() { closed <- s.Close() }()
	select {
	case err := <-closed:
		if err != nil {
			t.Fatal(err)
		}
	case <-time.After(10 * time.Second):
		t.Fatal("Close still waiting for a hung handler after 10 s")
	}
}

func TestHangEveryNthRequest(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.HangEveryNthRequest = 2 })
	body := `{"model":"tiny-sim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`
	if status, out := postJSON(t, s.URL()+"/v1/chat/completions", body); status != 200 {
		t.Fatalf("request 1: status %d %v", status, out)
	}
	p := sendHanging(t, s, http.MethodPost, "/v1/chat/completions", body)
	if status, out := postJSON(t, s.URL()+"/v1/chat/completions", body); status != 200 {
		t.Fatalf("request 3 behind the hung one: status %d %v", status, out)
	}
	p.cancel()
	if err := <-p.done; err == nil {
		t.Error("the hung request got an answer")
	}
	waitIdle(t, s)
	if r := metricSum(metrics(t, s), "vllm:num_requests_running"); r != 0 {
		t.Errorf("running %g after the hang ended", r)
	}
}

func TestHangPaths(t *testing.T) {
	s, err := Start(Options{Profile: "tiny", Speed: 1000, Override: func(p *Profile) {
		p.HangPaths = []string{"/v1/models", "/tokenize"}
	}})
	if err != nil {
		t.Fatal(err)
	}
	// A client that gives up ends the hang.
	tok := sendHanging(t, s, http.MethodPost, "/tokenize", `{"prompt":"hello"}`)
	tok.cancel()
	<-tok.done
	waitIdle(t, s)
	// Other routes answer; a shutdown ends a hang that no client gave up on.
	if status, _ := postJSON(t, s.URL()+"/v1/chat/completions", `{"model":"tiny-sim","max_tokens":2,"messages":[{"role":"user","content":"hi"}]}`); status != 200 {
		t.Fatalf("chat status %d", status)
	}
	models := sendHanging(t, s, http.MethodGet, "/v1/models", "")
	closeWithin(t, s)
	if err := <-models.done; err == nil {
		t.Error("/v1/models got an answer")
	}
	if _, err := Start(Options{Profile: "tiny", Override: func(p *Profile) { p.HangPaths = []string{"/v1/model"} }}); err == nil ||
		!strings.Contains(err.Error(), `hang_paths: "/v1/model" is not a route`) {
		t.Errorf("a misspelt hang path: err %v", err)
	}
}

func TestMetricsFaultError(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.MetricsFault, p.MetricsFaultAfter = MetricsFaultError, 1 })
	metrics(t, s) // the one good scrape
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	resp.Body.Close()
	if resp.StatusCode != http.StatusInternalServerError {
		t.Errorf("second scrape: status %d, want 500", resp.StatusCode)
	}
}

func TestMetricsFaultHang(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.MetricsFault = MetricsFaultHang })
	p := sendHanging(t, s, http.MethodGet, "/metrics", "")
	p.cancel()
	if err := <-p.done; err == nil {
		t.Error("the dead /metrics answered")
	}
	waitIdle(t, s)
	// Shutdown ends a hung scrape too.
	sendHanging(t, s, http.MethodGet, "/metrics", "")
	closeWithin(t, s)
}

func TestOmitMetrics(t *testing.T) {
	s := startTiny(t, func(p *Profile) { p.OmitMetrics = []string{"vllm:prefix_cache_hits_total"} })
	chat(t, s, "some prompt", 2)
	fams := metrics(t, s)
	if _, ok := fams["vllm:prefix_cache_hits_total"]; ok {
		t.Error("the omitted GPU prefix-hit counter is exposed")
	}
	if q := metricSum(fams, "vllm:prefix_cache_queries_total"); q <= 0 {
		t.Errorf("prefix cache queries %g: the other families must stay", q)
	}
	// Legacy names expose the counter under its old name only.
	legacy := func(p *Profile) { p.LegacyNames, p.OmitMetrics = true, []string{"vllm:prefix_cache_hits_total"} }
	if _, err := Start(Options{Profile: "tiny", Override: legacy}); err == nil || !strings.Contains(err.Error(), "exposes no metric") {
		t.Errorf("omitting a family the profile lacks: err %v", err)
	}
}

func TestMetricValues(t *testing.T) {
	s := startTiny(t, func(p *Profile) {
		p.MetricValues = map[string]float64{"vllm:prefix_cache_hits_total": math.NaN(), "vllm:kv_offload_total_bytes_total": math.Inf(1)}
	})
	chat(t, s, "some prompt", 2)
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	raw, _ := io.ReadAll(resp.Body)
	resp.Body.Close()
	for _, line := range []string{
		`vllm:prefix_cache_hits_total{engine="0",model_name="tiny-sim"} NaN`,
		`vllm:kv_offload_total_bytes_total{engine="0",model_name="tiny-sim",transfer_type="GPU_to_CPU"} +Inf`,
		`vllm:kv_offload_total_bytes_total{engine="0",model_name="tiny-sim",transfer_type="CPU_to_GPU"} +Inf`,
	} {
		if !strings.Contains(string(raw), line+"\n") {
			t.Errorf("/metrics lacks %q", line)
		}
	}
	if q := metricSum(metrics(t, s), "vllm:prefix_cache_queries_total"); q <= 0 || math.IsNaN(q) {
		t.Errorf("prefix cache queries %g: only the pinned families change", q)
	}
}

// TestFaultProfileFile: every fault is a profile key, so a file can rehearse them; nan and
// inf are TOML floats.
func TestFaultProfileFile(t *testing.T) {
	data, err := profileFiles.ReadFile("profiles/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "faulty.toml")
	faults := `
fail_every_nth_request = 5
cut_stream_after_tokens = 4
restart_at_request = 7
metrics_delay = "2s"
malformed_sse_at_token = 3
hang_every_nth_request = 6
hang_paths = ["/tokenize"]
metrics_fault = "hang"
metrics_fault_after = 10
omit_metrics = ["vllm:prefix_cache_hits_total"]
metric_values = { "vllm:prompt_tokens_total" = nan, "vllm:generation_tokens_total" = inf }
`
	if err := os.WriteFile(file, append(data, faults...), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := LoadProfileFile(file)
	if err != nil {
		t.Fatal(err)
	}
	if p.Name != "faulty" || p.FailEveryNthRequest != 5 || p.CutStreamAfterTokens != 4 || p.RestartAtRequest != 7 ||
		p.MetricsDelay != 2*time.Second || p.MalformedSSEAtToken != 3 || p.HangEveryNthRequest != 6 ||
		len(p.HangPaths) != 1 || p.MetricsFault != "hang" || p.MetricsFaultAfter != 10 || len(p.OmitMetrics) != 1 ||
		!math.IsNaN(p.MetricValues["vllm:prompt_tokens_total"]) || !math.IsInf(p.MetricValues["vllm:generation_tokens_total"], 1) {
		t.Errorf("profile %+v", p)
	}
	s, err := Start(Options{ProfileFile: file, Speed: 1000})
	if err != nil {
		t.Fatal(err)
	}
	sendHanging(t, s, http.MethodPost, "/tokenize", `{"prompt":"x"}`)
	closeWithin(t, s)

	os.WriteFile(file, append(data, "metrics_fault = \"slow\"\n"...), 0o644)
	if _, err := LoadProfileFile(file); err == nil || !strings.Contains(err.Error(), file) || !strings.Contains(err.Error(), "metrics_fault") {
		t.Errorf("bad metrics_fault: err %v", err)
	}
}

package sim

import (
	"context"
	"encoding/json"
	"net/http"
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

package runner

import (
	"context"
	"fmt"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
)

const conversationScenario = `
name = "unit-chat"

[target]
endpoint = "http://127.0.0.1:1/v1"
model = "fake-model"

[prompt]
seed = 7
token_counting = "estimate"

[request]
max_tokens = 10

[[step]]
id = "chat"
kind = "conversation"
users = 3
turns = 4
turn_tokens = 30
system_prompt_tokens = 50
scrape_interval = "10ms"

[[gate]]
step = "chat"
max_time_to_first_output_ms = 1000
max_failed_requests = 0
`

// TestConversationCarriesAnswers: each turn resends the user's history with the previous
// answer, every turn is recorded with its user and turn, and a counter the server lacks
// (external hits) stays null in the tier shares.
func TestConversationCarriesAnswers(t *testing.T) {
	m := newFakeMetrics()
	delete(m.counters, metrics.ExternalPrefixHits)
	chat := &fakeChat{m: m, reply: func(n int, req client.ChatRequest, _ func(client.Progress)) client.Result {
		m.update(func(m *fakeMetrics) {
			m.counters[metrics.GPUPrefixQueries] += 100
			m.counters[metrics.GPUPrefixHits] += 60
		})
		res := okResult(100, nil)
		last := req.Messages[len(req.Messages)-1].Content
		res.Answer = "answer to " + last[:strings.Index(last, ".")] // "answer to Question N"
		return res
	}}
	out := run(t, context.Background(), newConfig(t, conversationScenario, chat, m))
	if out.Interrupted || len(out.Steps) != 1 {
		t.Fatalf("interrupted %v, %d artifacts", out.Interrupted, len(out.Steps))
	}
	art := out.Steps[0]
	if art.Kind != "conversation" || len(art.Requests) != 12 || art.DeltaScope != "step" {
		t.Fatalf("kind %s, %d requests, scope %s", art.Kind, len(art.Requests), art.DeltaScope)
	}
	for _, c := range chat.Calls() {
		msgs := c.Req.Messages
		turn := (len(msgs) - 2) / 2 // system, then question/answer pairs, then the question
		for k := 0; k < turn; k++ {
			a := msgs[2+2*k]
			if a.Role != "assistant" || a.Content != fmt.Sprintf("answer to Question %d", k+1) {
				t.Fatalf("turn %d's history holds %q at answer %d", turn, a.Content, k)
			}
		}
	}
	for i, q := range art.Requests {
		if q.Turn == nil || q.IndexInStep != i || q.Turn.User*4+q.Turn.Turn != i {
			t.Fatalf("request %d: turn %+v", i, q.Turn)
		}
	}
	cs := out.Record.Conversation("chat")
	if cs == nil || cs.Tiers.Source != "prefix_cache_queries_and_hits" {
		t.Fatalf("section %+v", cs)
	}
	if cs.Tiers.HostHitTokens != nil || cs.Tiers.Host != nil {
		t.Errorf("absent external hits became %v", *cs.Tiers.HostHitTokens)
	}
	if *cs.Tiers.PromptTokens != 1200 || *cs.Tiers.GPUHitTokens != 720 || *cs.Tiers.RecomputeTokens != 480 || *cs.Tiers.GPU != 0.6 {
		t.Errorf("tiers %+v", cs.Tiers)
	}
	if len(out.Gates) != 1 || !out.Gates[0].Passed || !strings.Contains(out.Gates[0].Reason, "TTFT p90 40.0 ms") {
		t.Errorf("gates %+v", out.Gates)
	}
}

// TestConversationStopsOnCancel: a cancelled run ends every user's conversation, keeps the
// turns that finished and says the step was interrupted.
func TestConversationStopsOnCancel(t *testing.T) {
	m := newFakeMetrics()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var n atomic.Int32
	chat := &fakeChat{m: m, reply: func(int, client.ChatRequest, func(client.Progress)) client.Result {
		if n.Add(1) == 5 {
			cancel()
		}
		return okResult(100, nil)
	}}
	out := run(t, ctx, newConfig(t, conversationScenario, chat, m))
	if !out.Interrupted || out.Record.Status != "interrupted" {
		t.Fatalf("interrupted %v, status %s", out.Interrupted, out.Record.Status)
	}
	got := len(out.Steps[0].Requests)
	if got < 5 || got >= 12 || !out.Steps[0].Interrupted {
		t.Fatalf("%d requests recorded after a cancel at the 5th of 12", got)
	}
}

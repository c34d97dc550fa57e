package runner

import (
	"bytes"
	"context"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// warmServer is a long-lived server whose CPU tier still holds last night's prompts: every
// request, the cold sequence's too, comes back from it all but its last block, and nothing is
// stored.
func warmServer(m *fakeMetrics) func(int, client.ChatRequest, func(client.Progress)) client.Result {
	return func(n int, _ client.ChatRequest, _ func(client.Progress)) client.Result {
		m.add(metrics.PromptTokens, 300)
		m.add(metrics.GPUPrefixQueries, 300)
		m.add(metrics.GPUPrefixHits, 64)
		m.add(metrics.ExternalPrefixHits, 224)
		m.add(metrics.LoadBytes, 224*1000)
		return okResult(300, intp(288))
	}
}

const warmGates = `
[[gate]]
step = "sequence"
require_store = true

[[gate]]
step = "replay"
verdict = "cpu_reload"
require_valid_setup = true
`

// TestRunWarmCachesInvalidateTheSetup: a cold sequence that comes back cached is marked warm
// in its section and on the console, the replay after it cannot prove a reload (warm caches,
// not the capacity math, is the reason), and both gates say warm caches.
func TestRunWarmCachesInvalidateTheSetup(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m, reply: warmServer(m)}
	cfg := newConfig(t, unitScenario+warmGates, chat, m)
	var console bytes.Buffer
	cfg.Sinks = append(cfg.Sinks, NewConsole(&console, false))
	out := run(t, context.Background(), cfg)

	w := out.Record.Sequence("sequence").WarmCaches
	if w == nil || w.Requests != 3 || w.Of != 3 || w.By != verdict.ByUsage {
		t.Fatalf("sequence section: warm caches %+v", w)
	}
	rp := out.Record.Replay("replay")
	if rp.Verdict != verdict.CPUReload || rp.SetupValid != capacity.No || !strings.HasPrefix(rp.SetupReason, "warm caches: step sequence is a cold sequence, yet 3 of its 3 requests came back 96.00% cached") {
		t.Fatalf("replay: %s, setup %s: %s", rp.Verdict, rp.SetupValid, rp.SetupReason)
	}
	if !strings.Contains(console.String(), "  WARM CACHES: warm caches: step sequence") {
		t.Errorf("console:\n%s", console.String())
	}
	for i, want := range []string{"store not proven: GPU->CPU 0 bytes; warm caches: step sequence", "setup cannot prove a reload (no): The replay was reloaded from the CPU tier. The setup cannot prove a reload: warm caches: "} {
		if g := out.Gates[i]; g.Passed || !strings.Contains(g.Reason, want) {
			t.Errorf("gate %d: passed %v, %q; want %q", i, g.Passed, g.Reason, want)
		}
	}
}

// TestSaltedRunSendsFreshBytes: a salted run sends other bytes than the unsalted run (the
// replay still its original's), records the salt, and on vLLM also sends it as cache_salt;
// on LMCache, whose V1 connector ignores the field, it does not.
func TestSaltedRunSendsFreshBytes(t *testing.T) {
	sent := func(backend, salt string) ([]fakeCall, *Outcome) {
		m := newFakeMetrics()
		chat := &fakeChat{m: m, reply: offloadServer(m)}
		src := strings.Replace(unitScenario, "[prompt]\n", "[prompt]\nsalt = \""+salt+"\"\n", 1)
		src = strings.Replace(src, "[target]\n", "[target]\nbackend = \""+backend+"\"\n", 1)
		out := run(t, context.Background(), newConfig(t, src, chat, m))
		return chat.Calls(), out
	}
	plain, _ := sent("vllm", "")
	calls, out := sent("vllm", "n1")
	if len(calls) != 4 || len(plain) != 4 {
		t.Fatalf("%d and %d requests", len(calls), len(plain))
	}
	for i := range calls {
		if calls[i].Req.Messages[1].Content == plain[i].Req.Messages[1].Content {
			t.Errorf("request %d: the salted run sent the unsalted bytes", i)
		}
		if calls[i].Req.ExtraBody["cache_salt"] != "n1" || plain[i].Req.ExtraBody["cache_salt"] != nil {
			t.Errorf("request %d: cache_salt %v (unsalted: %v)", i, calls[i].Req.ExtraBody["cache_salt"], plain[i].Req.ExtraBody["cache_salt"])
		}
	}
	if calls[3].Req.Messages[1].Content != calls[0].Req.Messages[1].Content {
		t.Error("the salted replay is not its original's bytes")
	}
	if out.Record.Scenario.Prompt.Salt != "n1" || runFile(t, out.Dir, "scenario").(map[string]any)["prompt"].(map[string]any)["salt"] != "n1" {
		t.Errorf("run.json does not record the salt")
	}
	seq := out.Steps[0].Requests[0].Prompt
	if seq.Shape == "" || seq.Shape != out.Steps[1].Requests[0].Prompt.Shape {
		t.Errorf("shapes %q (replay %q)", seq.Shape, out.Steps[1].Requests[0].Prompt.Shape)
	}
	lm, _ := sent("lmcache", "n1")
	if _, ok := lm[0].Req.ExtraBody["cache_salt"]; ok || lm[0].Req.Messages[1].Content != calls[0].Req.Messages[1].Content {
		t.Errorf("lmcache: extra body %v; the same salted bytes: %v", lm[0].Req.ExtraBody, lm[0].Req.Messages[1].Content == calls[0].Req.Messages[1].Content)
	}
}

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
	cfg.Console = NewConsole(&console, false)
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

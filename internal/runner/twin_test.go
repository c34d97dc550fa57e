package runner

import (
	"bytes"
	"context"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// twinScenario is unitScenario with the replay's cold twin on and a gate on its output.
var twinScenario = strings.Replace(unitScenario, "cold_twin = false\n", "", 1) + `
[[gate]]
step = "replay"
verdict = "cpu_reload"
require_identical_output = true
`

// twinServer is offloadServer that recomputes a request carrying a cache salt in full (no
// hit of any kind, a cold 400 ms to first output) and answers every request with token ids:
// replayIDs for the replay (call 3), the prompt's own otherwise.
func twinServer(m *fakeMetrics, replayIDs []int) func(int, client.ChatRequest, func(client.Progress)) client.Result {
	base := offloadServer(m)
	ids := []int{7, 8, 9, 10}
	return func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
		if _, salted := req.ExtraBody["cache_salt"]; salted {
			m.add(metrics.PromptTokens, 300)
			m.add(metrics.GPUPrefixQueries, 300)
			m.add(metrics.StoreBytes, 4000)
			res := okResult(300, nil)
			ttft := 400.0
			res.TimeToFirstOutputMS, res.OutputTokenIDs = &ttft, ids
			return res
		}
		res := base(n, req, p)
		if req.KeepOutput {
			res.OutputTokenIDs = ids
			if n == 3 {
				res.OutputTokenIDs = replayIDs
			}
		}
		return res
	}
}

func TestColdTwinFollowsTheReplay(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m, reply: twinServer(m, []int{7, 8, 9, 10})}
	cfg := newConfig(t, twinScenario, chat, m)
	var console bytes.Buffer
	cfg.Sinks = append(cfg.Sinks, NewConsole(&console, false))
	out := run(t, context.Background(), cfg)

	calls := chat.Calls()
	if len(calls) != 5 {
		t.Fatalf("%d requests sent, want 3 + the replay + its cold twin", len(calls))
	}
	// The original of the replay, the replay and the twin keep their output and ask vLLM for
	// token ids; the other requests do not.
	for i, c := range calls {
		keep := i == 0 || i == 3 || i == 4
		if c.Req.KeepOutput != keep || (c.Req.ExtraBody["return_token_ids"] == true) != keep {
			t.Errorf("call %d: keep output %v, body %v; want keep %v", i, c.Req.KeepOutput, c.Req.ExtraBody, keep)
		}
		if !c.Idle {
			t.Errorf("call %d was sent to a busy server", i)
		}
	}
	salt, _ := calls[4].Req.ExtraBody["cache_salt"].(string)
	if !strings.HasPrefix(salt, "kvbench-twin-") || !slices.Equal(calls[4].Req.Messages, calls[3].Req.Messages) {
		t.Fatalf("twin: salt %q, same messages as the replay %v", salt, slices.Equal(calls[4].Req.Messages, calls[3].Req.Messages))
	}

	rp := out.Steps[1]
	if len(rp.Requests) != 2 {
		t.Fatalf("replay step: %d requests, want the replay and its twin", len(rp.Requests))
	}
	replay, twin := rp.Requests[0], rp.Requests[1]
	if twin.ColdTwin == nil || twin.ColdTwin.Mechanism != "cache_salt" || twin.ColdTwin.Value != salt || twin.IndexInStep != 1 || twin.Replay || twin.Verdict != nil {
		t.Errorf("twin record %+v", twin)
	}
	// The twin was measured on its own: its scrapes, its isolation, none of the replay's hits.
	if d, _ := deltaOf(twin.Counters, metrics.ExternalPrefixHits); d != 0 || twin.Isolation == nil || !strings.HasPrefix(twin.Counters.Isolation, "clean") {
		t.Errorf("twin counters: external hits %v, isolation %+v %q", d, twin.Isolation, twin.Counters.Isolation)
	}
	if d, _ := deltaOf(replay.Counters, metrics.ExternalPrefixHits); d != 236 || replay.Verdict.Verdict != verdict.CPUReload || replay.ColdTwinSkipped != "" {
		t.Errorf("replay: external hits %v, verdict %v, skipped %q", d, replay.Verdict.Verdict, replay.ColdTwinSkipped)
	}
	sec := out.Record.Replay("replay")
	g, f := sec.OffloadGain, sec.ReloadFidelity
	if g == nil || *g.TTFTRatio != 10 || *g.PrefillSecondsSaved != 0.36 || g.TwinMissed != capacity.Yes || *g.TwinStoreBytes != 4000 {
		t.Errorf("offload gain %+v", g)
	}
	if f == nil || !*f.Identical || *f.ComparedTokens != 4 || f.Basis != "token_ids" || !*f.ColdTwinIdentical {
		t.Errorf("fidelity %+v", f)
	}
	if failed := out.GatesFailed(); len(failed) > 0 {
		t.Errorf("gates failed: %+v", failed)
	}
	for _, want := range []string{"[1] planned 300", "cold twin (cache_salt)", "reload fidelity: identical to the original's output (4 token ids compared; the cold twin's too)",
		"offload gain: cold twin (cache_salt) 400.0 ms vs replay 40.0 ms to first output: 10.00x, 0.360 s of prefill saved"} {
		if !strings.Contains(console.String(), want) {
			t.Errorf("console lacks %q:\n%s", want, console.String())
		}
	}
}

func TestDivergingReplayIsAFindingAndFailsItsGate(t *testing.T) {
	m := newFakeMetrics()
	chat := &fakeChat{m: m, reply: twinServer(m, []int{7, 8, 99, 10})}
	cfg := newConfig(t, twinScenario, chat, m)
	var console bytes.Buffer
	cfg.Sinks = append(cfg.Sinks, NewConsole(&console, false))
	out := run(t, context.Background(), cfg)
	failed := out.GatesFailed()
	if len(failed) != 1 || !strings.Contains(failed[0].Reason, "output not identical: the replay's output differs from its original's from token 2 on") ||
		!strings.Contains(failed[0].Reason, "the difference came with the reload") {
		t.Fatalf("failed gates %+v", failed)
	}
	if !strings.Contains(console.String(), "FINDING reload fidelity: the replay's output differs") {
		t.Errorf("console:\n%s", console.String())
	}
	// The verdict stands on the counters alone.
	if v := out.Record.Replay("replay").Verdict; v != verdict.CPUReload {
		t.Errorf("verdict %s", v)
	}
}

func TestColdTwinSkippedOrFailed(t *testing.T) {
	for _, tc := range []struct {
		name     string
		src      string
		twinFail bool
		calls    int
		skipped  string
	}{
		{"engine without a way", strings.Replace(twinScenario, "model = \"fake-model\"\n", "model = \"fake-model\"\nbackend = \"lmcache\"\n", 1), false, 4, "LMCache V1 keys its tier by tokens alone"},
		{"turned off", unitScenario, false, 4, "the scenario turned it off"},
		{"twin fails", twinScenario, true, 5, ""},
	} {
		t.Run(tc.name, func(t *testing.T) {
			m := newFakeMetrics()
			m.counters[metrics.ExternalPrefixQueries] = 0
			base := twinServer(m, []int{7, 8, 9, 10})
			chat := &fakeChat{m: m, reply: func(n int, req client.ChatRequest, p func(client.Progress)) client.Result {
				if _, salted := req.ExtraBody["cache_salt"]; salted && tc.twinFail {
					return client.Result{ErrorKind: client.ErrorKindHTTPStatus, HTTPStatus: 400, Error: "http status 400: cache_salt: Extra inputs are not permitted"}
				}
				return base(n, req, p)
			}}
			out := run(t, context.Background(), newConfig(t, tc.src, chat, m))
			if n := len(chat.Calls()); n != tc.calls {
				t.Fatalf("%d requests, want %d", n, tc.calls)
			}
			g := out.Record.Replay("replay").OffloadGain
			switch {
			case tc.skipped != "" && !strings.Contains(g.Skipped, tc.skipped):
				t.Errorf("skipped %q, want %q", g.Skipped, tc.skipped)
			case tc.twinFail && (g.TwinError == "" || g.TTFTRatio != nil):
				t.Errorf("failed twin: %+v", g)
			}
			// A twin's failure is the gain's, not the step's: no implicit gate fails the run.
			for _, gr := range out.Gates {
				if gr.Gate.Implicit {
					t.Errorf("implicit gate %+v", gr)
				}
			}
		})
	}
}

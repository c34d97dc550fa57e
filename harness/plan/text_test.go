package plan

import (
	"bytes"
	"context"
	"errors"
	"fmt"
	"os"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// squash collapses each line's runs of blanks to one space, so assertions read a tabwriter's
// columns without depending on their padding.
func squash(text string) string {
	lines := strings.Split(text, "\n")
	for i, l := range lines {
		lines[i] = strings.Join(strings.Fields(l), " ")
	}
	return strings.Join(lines, "\n")
}

// planText plans sc by the estimate and returns its text plan as printed and squashed.
func planText(t *testing.T, sc *scenarios.Scenario, counter prompts.TokenCounter) (*Plan, string, string) {
	t.Helper()
	p, err := Make(context.Background(), sc, Facts{Counter: counter})
	if err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := p.WriteText(&b); err != nil {
		t.Fatal(err)
	}
	return p, b.String(), squash(b.String())
}

// checkRows checks that the request table has exactly one row per planned request, in send
// order, each with its step, index, ordinal, planned and counted tokens and identity, and
// the replay note on replays.
func checkRows(t *testing.T, p *Plan, out string) {
	t.Helper()
	var rows []string
	for _, l := range strings.Split(out, "\n") {
		if f := strings.Fields(l); len(f) >= 7 && len(f[6]) == 64 {
			rows = append(rows, strings.Join(f, " "))
		}
	}
	var want []string
	for _, st := range p.Steps {
		for _, r := range st.Requests {
			row := fmt.Sprintf("%s %d %d %d %d %d %s", st.ID, r.IndexInStep, r.Ordinal, r.PlannedTokens, r.Prompt.Tokens, r.Prompt.CountCalls, r.Prompt.Identity)
			if r.Replay {
				row += fmt.Sprintf(" replay of %s[%d]", st.Step.Replay.Step, st.Step.Replay.Request)
			}
			want = append(want, row)
		}
	}
	if strings.Join(rows, "\n") != strings.Join(want, "\n") {
		t.Errorf("request rows:\n%s\nwant:\n%s", strings.Join(rows, "\n"), strings.Join(want, "\n"))
	}
}

// checkReplays checks each replay's capacity section: its heading, its verdict line and
// every finding.
func checkReplays(t *testing.T, p *Plan, out string) {
	t.Helper()
	for _, rp := range p.Replays {
		head := fmt.Sprintf("capacity for step %s (replay of %s request %d):", rp.Step, rp.Of.Step, rp.Of.Request)
		i := strings.Index(out, head)
		if i < 0 {
			t.Errorf("no %q in\n%s", head, out)
			continue
		}
		section := out[i:]
		if line := "can prove a reload " + string(rp.Assessment.CanProveReload); !strings.Contains(section, line) {
			t.Errorf("step %s: no %q", rp.Step, line)
		}
		if len(rp.Assessment.Findings) == 0 {
			t.Errorf("step %s: the assessment has no findings to print", rp.Step)
		}
		for _, f := range rp.Assessment.Findings {
			if !strings.Contains(section, "- "+strings.Join(strings.Fields(f), " ")) {
				t.Errorf("step %s: finding %q not printed", rp.Step, f)
			}
		}
	}
}

// TestWriteTextBuiltins: the text plan of each built-in scenario names its counting, its
// requests row by row and each replay's capacity math with the finding that matters.
func TestWriteTextBuiltins(t *testing.T) {
	trtllm, err := engine.ByName("trtllm")
	if err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		name    string
		rows    int // requests in the table
		want    []string
		notWant []string
	}{
		{
			name: "eviction-6x150k-replay",
			rows: 7,
			want: []string{
				"scenario eviction-6x150k-replay (builtin:eviction-6x150k-replay)",
				"token counting: estimate (4 bytes per token, no server calls); real tokenizers differ",
				"shared prefix: 8000 tokens planned, 8000 counted, sha256 ",
				"(mode shared-prefix, seed 0)",
				"STEP REQ PROMPT PLANNED TOKENS CALLS IDENTITY (sha256)",
				"GPU KV pool 506283 tokens (scenario) = 9.80 GiB at 20790 bytes/token",
				"CPU tier 16 GiB = 17179869184 bytes = about 826352 tokens",
				"eviction pressure yes",
				"tier > GPU pool yes",
				"tier holds sequence unknown",
				"can prove a reload unknown",
				"NOTE: whether this setup can prove a reload is decided at run time",
			},
			notWant: []string{"WARNING", "\ntier:", "slot context", "warning:"},
		},
		{
			name: "offload8-control",
			rows: 4,
			want: []string{
				"(mode nested, seed 0)",
				"eviction pressure no",
				"can prove a reload no",
				"WARNING: this setup cannot prove a reload from the CPU tier: the CPU tier is not larger than the GPU KV pool",
			},
			notWant: []string{"NOTE:"},
		},
		{
			name: "llamacpp-ram-replay",
			rows: 7,
			want: []string{
				"slots 1 (assumed until the server reports it)",
				"slot context 16384 tokens (scenario)",
				"host tier 512 MiB = 536870912 bytes = about 1026521 tokens",
				"saved prompt state ",
				"replayed prompt leaves slot yes",
				"tier > slot context yes",
				"tier holds saved state yes",
				"can prove a reload yes",
			},
			notWant: []string{"GPU KV pool", "CPU tier", "WARNING", "NOTE:"},
		},
		{
			name: "llamacpp-ram-control",
			rows: 7,
			want: []string{
				"host tier 0 MiB = 0 bytes\n",
				"can prove a reload no",
				"WARNING: this setup cannot prove a reload from the host tier: no host prompt cache is configured",
			},
			notWant: []string{"from the CPU tier", "NOTE:"},
		},
		{
			name: "trtllm-eviction-replay",
			rows: 7,
			want: []string{"\ntier: " + strings.Join(strings.Fields(trtllm.TierUnknown), " ") + "\n"},
		},
		{
			name:    "reload-curve", // its bounds come from the server: no requests yet
			want:    []string{"warning: a reload curve's sizes and eviction come from the server's max_model_len and GPU KV pool"},
			notWant: []string{"STEP", "shared prefix:", "capacity for step", "reload curve curve:"},
		},
		{
			name:    "chat-capacity-offload16",
			want:    []string{"conversation chat: 8 users x 5 turns, 800-token shared system prompt, 400 new tokens a turn, up to 48 max_tokens an answer"},
			notWant: []string{"STEP", "capacity for step"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, err := scenarios.Builtin(c.name)
			if err != nil {
				t.Fatal(err)
			}
			p, _, out := planText(t, sc, nil)
			if n := p.requestCount(); n != c.rows {
				t.Errorf("%d requests planned, want %d", n, c.rows)
			}
			checkRows(t, p, out)
			checkReplays(t, p, out)
			for _, w := range c.want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("%q in\n%s", w, out)
				}
			}
		})
	}
}

// TestWriteTextCurveFromScenario: a reload curve whose bounds the scenario states is planned
// point by point, and the plan says its sizes and the eviction that follows each.
func TestWriteTextCurveFromScenario(t *testing.T) {
	doc, err := os.ReadFile("../../scenarios/reload-curve.toml")
	if err != nil {
		t.Fatal(err)
	}
	text := strings.Replace(string(doc), `gpu_kv_tokens = "server"`, "gpu_kv_tokens = 20000", 1)
	text = strings.Replace(text, `max_model_len = "server"`, "max_model_len = 8192", 1)
	sc, err := scenarios.Parse([]byte(text), "/recipes/curve.toml")
	if err != nil {
		t.Fatal(err)
	}
	p, _, out := planText(t, sc, nil)
	if !sc.HasCurves() || len(sc.Curves) != 0 {
		t.Fatalf("planning changed the scenario: its curve step is gone or expanded (%+v)", sc.Curves)
	}
	if len(p.Scenario.Curves) != 1 || len(p.Scenario.Curves[0].Points) != 4 {
		t.Fatalf("curves %+v", p.Scenario.Curves)
	}
	c := p.Scenario.Curves[0]
	want := fmt.Sprintf("reload curve curve: prompts of 1,024, 2,048, 4,096, 8,112 tokens (to max_model_len 8,192, scenario); each is stored, evicted by %d prompts of ", c.EvictionRequests)
	if !strings.Contains(out, want) || !strings.Contains(out, "(the 20,000-token GPU pool, scenario, and a margin), replayed and recomputed by its cold twin") {
		t.Errorf("no curve line %q in\n%s", want, out)
	}
	if strings.Contains(out, "warning:") {
		t.Errorf("a curve the scenario bounds needs no warning:\n%s", out)
	}
	if len(p.Replays) != 4 {
		t.Fatalf("%d replays, want one per point", len(p.Replays))
	}
	checkRows(t, p, out)
	checkReplays(t, p, out)
}

// byteCounter counts a token per bytesPerToken content bytes, rounded up to a multiple of
// quantum: a stand-in for a server's /tokenize that needs no server.
type byteCounter struct {
	bytesPerToken, quantum int
	calls                  int
}

func (c *byteCounter) CountTokens(_ context.Context, msgs []prompts.Message) (int, error) {
	c.calls++
	n := 0
	for _, m := range msgs {
		n += len(m.Content)
	}
	tokens := (n + c.bytesPerToken - 1) / c.bytesPerToken
	return (tokens + c.quantum - 1) / c.quantum * c.quantum, nil
}

const countedScenario = `name = "counted"
description = "two prompts and a replay"
[target]
endpoint = "http://alice:s3cret@127.0.0.1:9/v1"
model = "tiny"
[prompt]
seed = 7
salt = "run-b"
shared_prefix_tokens = 200
[[step]]
id = "seq"
planned_context_tokens = [1500, 2500]
[[step]]
id = "again"
replay = { step = "seq", request = 1 }
`

// TestWriteTextServerCounting: a plan counted by the server names the tokenizer's URL
// without the credentials in it, the model and the calls the prefix took, the salt, and
// marks each prompt that landed off its plan.
func TestWriteTextServerCounting(t *testing.T) {
	for _, c := range []struct {
		name    string
		counter *byteCounter
		offPlan bool
	}{
		{"fine", &byteCounter{bytesPerToken: 3, quantum: 1}, false},
		{"coarse", &byteCounter{bytesPerToken: 3, quantum: 1000}, true}, // never within 16 of 1500
	} {
		t.Run(c.name, func(t *testing.T) {
			sc, err := scenarios.Parse([]byte(countedScenario), "/recipes/counted.toml")
			if err != nil {
				t.Fatal(err)
			}
			p, raw, out := planText(t, sc, c.counter)
			if c.counter.calls == 0 || p.PrefixCountCalls == 0 {
				t.Fatalf("the counter was not asked (%d calls, prefix %d)", c.counter.calls, p.PrefixCountCalls)
			}
			if strings.Contains(raw, "s3cret") || strings.Contains(raw, "alice") {
				t.Errorf("the endpoint's credentials reached the plan:\n%s", raw)
			}
			want := fmt.Sprintf("token counting: server /tokenize at http://REDACTED@127.0.0.1:9 (model tiny); prefix sized in %d calls\n", p.PrefixCountCalls)
			if !strings.Contains(out, want) {
				t.Errorf("no %q in\n%s", want, out)
			}
			if !strings.Contains(out, "(mode shared-prefix, seed 7, salt run-b)") {
				t.Errorf("no salt in\n%s", out)
			}
			var offPlan []string
			for _, l := range strings.Split(out, "\n") {
				if strings.HasSuffix(l, "off plan by more than 16 tokens") {
					offPlan = append(offPlan, strings.Fields(l)[0])
				}
			}
			// The replay is marked as a replay, not off plan, whatever its count.
			if want := []string{"seq", "seq"}; c.offPlan != (len(offPlan) > 0) || c.offPlan && strings.Join(offPlan, " ") != strings.Join(want, " ") {
				t.Errorf("rows off plan: %q (want them: %v)\n%s", offPlan, c.offPlan, out)
			}
			for _, st := range p.Steps {
				for _, r := range st.Requests {
					if r.Prompt.WithinTolerance == c.offPlan && !r.Replay {
						t.Errorf("%s[%d]: %d tokens for %d planned, within tolerance %v", st.ID, r.IndexInStep, r.Prompt.Tokens, r.PlannedTokens, r.Prompt.WithinTolerance)
					}
				}
			}
			checkReplays(t, p, out)
		})
	}
}

// TestReplayWriteText: the capacity section prints what is known of each setup, and says
// what is not known yet.
func TestReplayWriteText(t *testing.T) {
	seq := capacity.Sequence{Tokens: []int{4000, 4000, 4000}, Target: 0, SharedPrefix: 500, Counting: prompts.Estimated}
	cases := []struct {
		name    string
		setup   capacity.Setup
		want    []string
		notWant []string
	}{
		{
			name:    "pool unknown",
			setup:   capacity.Setup{Topology: capacity.SharedPool, CPUOffloadGiB: 8},
			want:    []string{"GPU KV pool unknown until the server reports it", "CPU tier 8 GiB = 8589934592 bytes\n", "unique tokens 11000 from the replayed request on"},
			notWant: []string{"about", "slots"},
		},
		{
			name: "host tier in tokens",
			setup: capacity.Setup{Topology: capacity.SharedPool, GPUKVTokens: 6000, GPUKVTokensSource: "scenario",
				HostTierTokens: 50000, HostTierTokensSource: "server (hicache)", StoreBytesPerToken: 1000, StoreBytesSource: "scenario"},
			want: []string{"GPU KV pool 6000 tokens (scenario) = 0.01 GiB at 1000 bytes/token", "CPU tier 50000 tokens (server (hicache))", "eviction pressure yes"},
		},
		{
			name: "several slots, no context known",
			setup: capacity.Setup{Topology: capacity.SingleSlot, Slots: 2, HostTierUnit: "MiB", CPUOffloadGiB: 0.5,
				StoreBytesPerToken: 512, StoreBytesSource: "scenario"},
			want:    []string{"slots 2\n", "host tier 512 MiB = 536870912 bytes = about 1048576 tokens", "saved prompt state 12000 tokens from the replayed request on"},
			notWant: []string{"\nslot context", "GPU KV pool", "(assumed"},
		},
		{
			name:    "one slot the server reports, no host tier",
			setup:   capacity.Setup{Topology: capacity.SingleSlot, Slots: 1, GPUKVTokens: 16384, GPUKVTokensSource: "server (/props)", HostTierUnit: "MiB"},
			want:    []string{"slots 1\n", "slot context 16384 tokens (server (/props))", "host tier 0 MiB = 0 bytes\n", "can prove a reload no"},
			notWant: []string{"(assumed", "about"},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			rp := Replay{Step: "again", Of: scenarios.ReplayRef{Step: "seq", Request: 0}, Assessment: capacity.Assess(c.setup, seq)}
			var b bytes.Buffer
			if err := rp.WriteText(&b); err != nil {
				t.Fatal(err)
			}
			out := squash(b.String())
			want := append([]string{"capacity for step again (replay of seq request 0):", "can prove a reload " + string(rp.Assessment.CanProveReload)}, c.want...)
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, out)
				}
			}
			for _, w := range c.notWant {
				if strings.Contains(out, w) {
					t.Errorf("%q in\n%s", w, out)
				}
			}
			for _, f := range rp.Assessment.Findings {
				if !strings.Contains(out, "- "+strings.Join(strings.Fields(f), " ")) {
					t.Errorf("finding %q not printed", f)
				}
			}
			switch rp.Assessment.CanProveReload {
			case capacity.No:
				if !strings.Contains(out, "WARNING: this setup cannot prove a reload from the "+tierName(c.setup)+": ") {
					t.Errorf("no warning naming the %s in\n%s", tierName(c.setup), out)
				}
			case capacity.Unknown:
				if !strings.Contains(out, "NOTE: whether this setup can prove a reload is decided at run time") {
					t.Errorf("no note in\n%s", out)
				}
				// A slot engine has no pool size or store counters for the run to read.
				if single := c.setup.Topology == capacity.SingleSlot; single == strings.Contains(out, "store counters") {
					t.Errorf("single slot %v, note in\n%s", single, out)
				}
			}
		})
	}
}

func TestTierName(t *testing.T) {
	for topology, want := range map[capacity.Topology]string{capacity.SingleSlot: "host tier", capacity.SharedPool: "CPU tier", "": "CPU tier"} {
		if got := tierName(capacity.Setup{Topology: topology}); got != want {
			t.Errorf("tierName(%q) = %q, want %q", topology, got, want)
		}
	}
}

// failingWriter fails every write, as a closed pipe or a full disk does.
type failingWriter struct{ writes int }

var errDiskFull = errors.New("no space left on device")

func (w *failingWriter) Write(p []byte) (int, error) {
	w.writes++
	return 0, errDiskFull
}

// TestWriteTextWriterFails: a writer's error comes back from WriteText, which writes once.
func TestWriteTextWriterFails(t *testing.T) {
	sc, err := scenarios.Builtin("eviction-6x150k-replay")
	if err != nil {
		t.Fatal(err)
	}
	p, err := Make(context.Background(), sc, Facts{})
	if err != nil {
		t.Fatal(err)
	}
	w := &failingWriter{}
	if err := p.WriteText(w); !errors.Is(err, errDiskFull) {
		t.Errorf("Plan.WriteText to a failing writer: %v, want %v", err, errDiskFull)
	}
	if err := p.Replays[0].WriteText(w); !errors.Is(err, errDiskFull) {
		t.Errorf("Replay.WriteText to a failing writer: %v, want %v", err, errDiskFull)
	}
	if w.writes != 2 {
		t.Errorf("%d writes for two reports, want one each", w.writes)
	}
}

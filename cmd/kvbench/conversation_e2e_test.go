package main

import (
	"bytes"
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

const chatScenarioTOML = `name = "chat-e2e"
[prompt]
seed = 5
token_counting = "estimate"
[request]
max_tokens = 12
[target]
sample_interval = "20ms"
[[step]]
id = "chat"
kind = "conversation"
users = 3
turns = 3
turn_tokens = 40
system_prompt_tokens = 200
think_time = "5ms"
scrape_interval = "20ms"
`

// TestRunConversation runs a small conversation on the embedded engine: every turn is
// journaled and recorded with its user and turn, later turns reuse the growing history
// (the shared system prompt and earlier turns come from the GPU cache), and the record
// carries the counter series and the tier shares.
func TestRunConversation(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 50})
	out := t.TempDir()
	file := filepath.Join(t.TempDir(), "chat.toml")
	if err := os.WriteFile(file, []byte(chatScenarioTOML), 0o644); err != nil {
		t.Fatal(err)
	}
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	c := section(t, rec, "chat")
	if num(t, c, "requests") != 9 || num(t, c, "failed_requests") != 0 {
		t.Fatalf("conversation section %v", c)
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	loaded, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	cs := loaded.Conversation("chat")
	if cs == nil {
		t.Fatalf("loaded record has no conversation section: %+v", loaded.Sections)
	}
	tiers := cs.Tiers
	if tiers.PromptTokens == nil || tiers.GPUHitTokens == nil || tiers.RecomputeTokens == nil || tiers.GPU == nil {
		t.Fatalf("tiers %+v", tiers)
	}
	// Turns 2 and 3 resend the whole history: far more than the system prompt comes from the GPU.
	if *tiers.GPUHitTokens < 3*200 || *tiers.GPU < 0.3 {
		t.Fatalf("GPU hits %v of %v prompt tokens: the history was not reused", *tiers.GPUHitTokens, *tiers.PromptTokens)
	}
	if sum := *tiers.GPUHitTokens + *tiers.RecomputeTokens + deref(tiers.HostHitTokens); sum != *tiers.PromptTokens {
		t.Fatalf("tiers do not add up: %+v", tiers)
	}
	if cs.TTFTMS.N != 9 || cs.TTFTMS.P90 == nil || len(cs.TTFTSeries) != 9 {
		t.Fatalf("ttft %+v, series %d", cs.TTFTMS, len(cs.TTFTSeries))
	}
	if len(cs.Series) == 0 {
		t.Fatal("no counter series")
	}
	var seriesPrompt float64
	for _, p := range cs.Series {
		seriesPrompt += deref(p.PromptTokens)
	}
	if seriesPrompt != *tiers.PromptTokens {
		t.Errorf("series prompt tokens add to %v, the step's delta is %v", seriesPrompt, *tiers.PromptTokens)
	}
	// Each turn carries the previous answer: the artifact's prompts grow per user.
	art := loaded.Repetitions[0].Steps[0]
	for _, q := range art.Requests {
		if q.Turn == nil {
			t.Fatalf("request %d has no turn", q.IndexInStep)
		}
		if q.Turn.Turn > 0 {
			prev := art.Requests[q.IndexInStep-1]
			if q.Result.PromptTokens == nil || *q.Result.PromptTokens <= *prev.Result.PromptTokens+*prev.Result.PromptTokens/10 {
				t.Errorf("user %d turn %d: prompt %v after %v", q.Turn.User, q.Turn.Turn, q.Result.PromptTokens, prev.Result.PromptTokens)
			}
		}
	}
	if _, err := os.Stat(filepath.Join(dir, "step-01-chat.partial.jsonl")); !os.IsNotExist(err) {
		t.Errorf("journal left behind: %v", err)
	}
	if !strings.Contains(stderr, "conversation, 3 users x 3 turns") {
		t.Errorf("console: %s", stderr)
	}

	// The report draws TTFT over time (one point per turn) and the tier shares per interval.
	page := filepath.Join(t.TempDir(), "report.html")
	var rout, rerr bytes.Buffer
	if code := cli.ExitCode(run(context.Background(), []string{"report", dir, "-o", page}, &rout, &rerr), &rerr); code != cli.ExitOK {
		t.Fatalf("report exit %d: %s", code, rerr.String())
	}
	html, err := os.ReadFile(page)
	if err != nil {
		t.Fatal(err)
	}
	ttftChart := chartSVG(t, string(html), "conv-0-0-ttft")
	if n := strings.Count(ttftChart, `class="pt"`); n != 9 {
		t.Errorf("TTFT chart has %d points, want 9", n)
	}
	tierChart := chartSVG(t, string(html), "conv-0-0-tiers")
	for _, series := range []string{"GPU", "host tier", "recomputed"} {
		if !strings.Contains(tierChart, `data-series="`+series+`"`) {
			t.Errorf("tier chart has no %s points", series)
		}
	}
}

// chartSVG cuts the svg element with id out of a report page.
func chartSVG(t *testing.T, page, id string) string {
	t.Helper()
	i := strings.Index(page, `<svg id="`+id+`"`)
	if i < 0 {
		t.Fatalf("no chart %s in the report", id)
	}
	j := strings.Index(page[i:], "</svg>")
	return page[i : i+j]
}

func deref(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

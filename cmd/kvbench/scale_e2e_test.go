package main

import (
	"context"
	"os"
	"path/filepath"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// TestManyStreamsAllRecorded opens 256 streams at once on the embedded engine with
// ignore_eos: every request lands in the record with exactly max_tokens output tokens,
// the step artifact says what was sent, and the client had all 256 streams open together
// (each was sent before any finished, with a one-second time to first token as margin).
func TestManyStreamsAllRecorded(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) {
		p.Speed = 1
		p.NumGPUBlocks = 8192
		p.RequestOverhead = time.Second
		p.DecodeTokensPerSecond = 1000
		p.AnswerTokensMin, p.AnswerTokensMax = 4, 8 // a natural stop long before max_tokens
	}})
	file := filepath.Join(t.TempDir(), "streams.toml")
	if err := os.WriteFile(file, []byte(`name = "streams"
[server]
gpu_kv_tokens = "server"
[prompt]
shared_prefix_tokens = 48
token_counting = "estimate"
[request]
max_tokens = 16
ignore_eos = true
timeout = "1m"
extra_body = { top_k = 1 }
[[step]]
id = "wide"
requests = 256
planned_context_tokens = [96]
concurrency = 256
`), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	ctx, cancel := context.WithTimeout(context.Background(), 2*time.Minute)
	defer cancel()
	_, stderr, code := runJSON(t, ctx, "run", file, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-01-wide.json")
	sent, _ := art["sent"].(map[string]any)
	if sent["ignore_eos"] != true || sent["max_tokens"] != float64(16) || sent["top_k"] != float64(1) ||
		sent["stream_options"].(map[string]any)["include_usage"] != true {
		t.Errorf("step artifact says %v was sent", sent)
	}
	reqs := art["requests"].([]any)
	if len(reqs) != 256 {
		t.Fatalf("%d requests in the record, want 256", len(reqs))
	}
	var lastStart, firstEnd time.Time
	for i, q := range reqs {
		res := q.(map[string]any)["result"].(map[string]any)
		if res["error_kind"] != "" || res["output_tokens"] != float64(16) || res["output_tokens_source"] != "usage" || res["finish_reason"] != "length" {
			t.Fatalf("request %d: %v %v, %v output tokens (%v), finish %v; want 16 from usage, length",
				i, res["error_kind"], res["error"], res["output_tokens"], res["output_tokens_source"], res["finish_reason"])
		}
		start, err := time.Parse(time.RFC3339Nano, res["started_at"].(string))
		if err != nil {
			t.Fatal(err)
		}
		end := start.Add(time.Duration(res["stream_ms"].(float64) * float64(time.Millisecond)))
		if start.After(lastStart) {
			lastStart = start
		}
		if firstEnd.IsZero() || end.Before(firstEnd) {
			firstEnd = end
		}
	}
	if !lastStart.Before(firstEnd) {
		t.Errorf("the last stream opened %v after the first one ended: the client did not hold 256 streams at once",
			lastStart.Sub(firstEnd))
	}
}

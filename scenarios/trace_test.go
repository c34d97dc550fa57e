package scenarios

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"testing"
	"time"
)

const traceScenario = `name = "replay"
[[step]]
id = "load"
kind = "trace"
file = "traces/conv.jsonl"
start = "10m"
duration = "5m"
time_scale = 0.1
max_input_tokens = 32768
`

func TestTraceStepParses(t *testing.T) {
	sc, err := Parse([]byte(traceScenario), "/data/recipes/replay.toml")
	if err != nil {
		t.Fatal(err)
	}
	st := &sc.Steps[0]
	if !st.IsTrace() || st.ClosedLoop() || st.BlockTokens != 512 || st.TimeScale != 0.1 || st.PromptForm != PromptFormAuto {
		t.Fatalf("step = %+v", st)
	}
	if st.Start.Duration != 10*time.Minute || st.Duration.Duration != 5*time.Minute || st.MaxInputTokens != 32768 || st.Requests != 0 {
		t.Fatalf("window = %+v", st.TraceStep)
	}
	if got := st.Source.Name(); got != "/data/recipes/traces/conv.jsonl" {
		t.Errorf("the trace resolves to %q, want it beside the scenario", got)
	}
	if st.ScrapeInterval.Duration != sc.Target.SampleInterval.Duration {
		t.Errorf("scrape interval %s, want the sample interval", st.ScrapeInterval)
	}
	if got := sc.StepRequests(st); got != nil {
		t.Errorf("a trace step plans no requests up front, got %d", len(got))
	}
	sc.UseTrace("/elsewhere/t.jsonl")
	if st.Source.Name() != "/elsewhere/t.jsonl" || !st.Source.NamedByUser() {
		t.Errorf("--trace: %+v", st.Source)
	}

	if st.Format != "auto" {
		t.Errorf("format %q, want auto", st.Format)
	}
	sc.UseTraceFormat("bailian")
	if st.Format != "bailian" || st.BlockTokens != 16 {
		t.Errorf("--trace-format bailian: format %q, block_tokens %d (want Bailian's 16: the scenario leaves it unset)", st.Format, st.BlockTokens)
	}
	for _, tc := range []struct {
		extra string
		block int
	}{{"format = \"bailian\"\n", 16}, {"format = \"bailian\"\nblock_tokens = 32\n", 32}, {"format = \"burstgpt\"\n", 512}} {
		sc, err := Parse([]byte(traceScenario+tc.extra), "r.toml")
		if err != nil {
			t.Fatal(err)
		}
		if st := sc.Steps[0]; st.BlockTokens != tc.block {
			t.Errorf("%q: block_tokens %d, want %d", tc.extra, st.BlockTokens, tc.block)
		}
		if tc.block == 32 {
			sc.UseTraceFormat("bailian")
			if sc.Steps[0].BlockTokens != 32 {
				t.Errorf("--trace-format overrode the block_tokens the scenario wrote")
			}
		}
	}

	closed, err := Parse([]byte(strings.Replace(traceScenario, "duration = \"5m\"\ntime_scale = 0.1\n", "concurrency = 4\nrequests = 100\n", 1)), "r.toml")
	if err != nil {
		t.Fatal(err)
	}
	if st := closed.Steps[0]; !st.ClosedLoop() || st.Concurrency != 4 || st.Requests != 100 || st.TimeScale != 1 {
		t.Fatalf("closed loop: %+v", st)
	}
}

// TestTraceStepRejects: each bad field is named with its line.
func TestTraceStepRejects(t *testing.T) {
	const fileLine = `file = "traces/conv.jsonl"` + "\n"
	const kindLine = "kind = \"trace\"\n"
	cases := []struct{ from, to, want string }{
		{fileLine, "", "r.toml:2: step[0].file: missing: the trace to replay"},
		{kindLine, kindLine + "format = \"sharegpt\"\n", `r.toml:5: step[0].format: "sharegpt" is not one of auto, mooncake, bailian, burstgpt, azure`},
		{"time_scale = 0.1\n", "time_scale = 0.0001\n", "step[0].time_scale: must be between 0.001 and 1000 (got 0.0001)"},
		{"time_scale = 0.1\n", "time_scale = 5000\n", "step[0].time_scale: must be between 0.001 and 1000 (got 5000)"},
		{"duration = \"5m\"\n", "duration = \"5m\"\nrequests = 10\n", "step[0].duration: a window has a duration or a request count (requests), not both"},
		{"start = \"10m\"\n", "start = \"-1s\"\n", "step[0].start: must not be negative (got -1s)"},
		{"max_input_tokens = 32768\n", "max_input_tokens = -5\n", "step[0].max_input_tokens: must be between 0 and 10000000 (got -5)"},
		{kindLine, kindLine + "block_tokens = 70000\n", "step[0].block_tokens: must be between 1 and 65536 (got 70000)"},
		{kindLine, kindLine + "prompt_form = \"ids\"\n", `step[0].prompt_form: "ids" is not one of auto, token_ids, text`},
		{kindLine, kindLine + "max_tokens = 64\n", "step[0].max_tokens: a trace step asks each request for its trace's output_length tokens"},
		{kindLine, kindLine + "users = 3\n", "step[0].users: users, turns, turn_tokens, system_prompt_tokens, think_time, arrival and ramp belong to conversation steps"},
		{kindLine, kindLine + "concurrency = -1\n", "step[0].concurrency: must be between 1 and 4096 for a closed loop"},
		{kindLine, kindLine + "concurrency = 2\n", "step[0].time_scale: a closed loop (concurrency set) sends in trace order"},
		// Zero is refused, not read as unset (x1, an open loop, the whole window).
		{"time_scale = 0.1\n", "time_scale = 0.0\n", "step[0].time_scale: must be between 0.001 and 1000 (got 0)"},
		{"time_scale = 0.1\n", "time_scale = nan\n", "step[0].time_scale: must be between 0.001 and 1000 (got NaN)"},
		{"time_scale = 0.1\n", "concurrency = 0\n", "step[0].concurrency: must be between 1 and 4096 for a closed loop, or unset for an open loop at the trace's timestamps (got 0)"},
		{"duration = \"5m\"\n", "requests = 0\n", "step[0].requests: must be between 1 and 10000000, or unset for the whole window (got 0)"},
		{kindLine, kindLine + "planned_context_tokens = [100]\n", "step[0].kind: a trace step builds its prompts from the trace: drop planned_context_tokens and replay"},
		{kindLine, "planned_context_tokens = [1000]\n", `step[0].file: file, format, block_tokens, start, duration, time_scale, max_input_tokens and prompt_form need kind = "trace"`},
		{kindLine, "kind = \"conversation\"\nusers = 1\nturns = 1\nturn_tokens = 10\n", `step[0].file: file, format, block_tokens, start, duration, time_scale, max_input_tokens and prompt_form need kind = "trace"`},
	}
	for _, c := range cases {
		doc := strings.Replace(traceScenario, c.from, c.to, 1)
		_, err := Parse([]byte(doc), "r.toml")
		if !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%q -> %q: %v\nwant %s", c.from, c.to, err, c.want)
		}
	}
	// require_on_time needs an open-loop trace step; it is taken on one.
	onTime := "[[gate]]\nstep = \"load\"\nrequire_on_time = true\n"
	if _, err := Parse([]byte(traceScenario+onTime), "r.toml"); err != nil {
		t.Errorf("require_on_time on an open loop: %v", err)
	}
	closed := strings.Replace(traceScenario, "duration = \"5m\"\ntime_scale = 0.1\n", "concurrency = 4\nrequests = 100\n", 1)
	if _, err := Parse([]byte(closed+onTime), "r.toml"); !errors.Is(err, ErrInvalid) || !strings.Contains(err.Error(), "gate[0].require_on_time: applies to an open-loop trace step") {
		t.Errorf("require_on_time on a closed loop: %v", err)
	}
	// A replay of a trace step has no prompt to resend.
	doc := traceScenario + "[[step]]\nid = \"again\"\nreplay = { step = \"load\", request = 0 }\n"
	if _, err := Parse([]byte(doc), "r.toml"); err == nil || !strings.Contains(err.Error(), `"load" is a trace step`) {
		t.Errorf("replay of a trace step: %v", err)
	}
}

// TestTraceSourceOpen: a scenario's trace opens only inside its directory (no "..", no
// absolute path, no symbolic link leading out), and only as a regular file; the user's
// --trace opens anywhere.
func TestTraceSourceOpen(t *testing.T) {
	dir := t.TempDir()
	outside := t.TempDir()
	write := func(path, text string) {
		t.Helper()
		if err := os.MkdirAll(filepath.Dir(path), 0o755); err != nil {
			t.Fatal(err)
		}
		if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	write(filepath.Join(dir, "traces", "ok.jsonl"), "{}\n")
	write(filepath.Join(outside, "secret.jsonl"), "secret\n")
	if err := os.Symlink(filepath.Join(outside, "secret.jsonl"), filepath.Join(dir, "link.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := os.Symlink("traces/ok.jsonl", filepath.Join(dir, "inner.jsonl")); err != nil {
		t.Fatal(err)
	}
	if err := syscall.Mkfifo(filepath.Join(dir, "fifo.jsonl"), 0o600); err != nil {
		t.Fatal(err)
	}
	cases := []struct {
		src  TraceSource
		want string // "" opens
	}{
		{TraceSource{Dir: dir, File: "traces/ok.jsonl"}, ""},
		{TraceSource{Dir: dir, File: "inner.jsonl"}, ""},
		{TraceSource{Dir: dir, File: "link.jsonl"}, "outside the scenario file's directory"},
		{TraceSource{Dir: dir, File: "../" + filepath.Base(outside) + "/secret.jsonl"}, `is outside the scenario file's directory: a scenario may name only a trace beside it or below it; name any other trace yourself with --trace FILE`},
		{TraceSource{Dir: dir, File: filepath.Join(outside, "secret.jsonl")}, "outside the scenario file's directory"},
		{TraceSource{Dir: dir, File: "traces/../../x"}, "outside the scenario file's directory"},
		{TraceSource{Dir: dir, File: "fifo.jsonl"}, "not a regular file"},
		{TraceSource{Dir: dir, File: "traces"}, "not a regular file"},
		{TraceSource{Dir: dir, File: "missing.jsonl"}, filepath.Join(dir, "missing.jsonl") + ": no such file"},
		{TraceSource{Dir: filepath.Join(dir, "gone"), File: "t.jsonl"}, filepath.Join(dir, "gone", "t.jsonl") + ": no such file"},
		// The system walks into adir before "..": say adir is missing, not ok.jsonl.
		{TraceSource{Dir: dir, File: "traces/adir/../ok.jsonl"}, filepath.Join(dir, "traces") + "/adir/../ok.jsonl: no such file (the directory " + filepath.Join(dir, "traces", "adir") + " on the way does not exist)"},
		{TraceSource{UserPath: filepath.Join(dir, "traces") + "/adir/../ok.jsonl"}, "(the directory " + filepath.Join(dir, "traces", "adir") + " on the way does not exist)"},
		{TraceSource{File: "t.jsonl"}, "a built-in scenario's trace is named with --trace FILE"},
		{TraceSource{Dir: dir}, "names no file"},
		{TraceSource{Dir: dir, File: "link.jsonl", UserPath: filepath.Join(outside, "secret.jsonl")}, ""},
	}
	for _, c := range cases {
		f, err := c.src.Open()
		switch {
		case c.want == "" && err != nil:
			t.Errorf("%+v: %v", c.src, err)
		case c.want != "" && (err == nil || !strings.Contains(err.Error(), c.want)):
			t.Errorf("%+v: %v, want %q", c.src, err, c.want)
		}
		if f != nil {
			f.Close()
		}
	}
}

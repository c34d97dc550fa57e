package main

import (
	"bytes"
	"compress/gzip"
	"context"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/sim"
)

// TestTraceStepFormats replays a trace of each kind on the embedded engine: a BurstGPT CSV
// (lengths and arrivals: prompts that share nothing, no ideal, the finding says why, the
// lengths still an accounting row), a gzip-compressed Bailian trace (16-token blocks, an
// ideal), and an AIPerf-style line whose text_input is sent as given.
func TestTraceStepFormats(t *testing.T) {
	srv, gpuTokens, _ := traceSim(t, 50)
	const text = "tell me a story about a small boat on a wide river at night"
	const messages = `[{"role": "system", "content": "answer in one word"}, {"role": "user", "content": "the colour of the sky"}]`
	cases := []struct {
		name, file string
		data       func(t *testing.T) []byte
		format     string
		prefix     bool
		requests   int
	}{
		{"burstgpt", "burst.csv", func(*testing.T) []byte {
			return []byte("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n" +
				"0,ChatGPT,120,4,124,Conversation log\n1,GPT-4,0,0,0,Conversation log\n1,ChatGPT,120,2,122,API log\n3,GPT-4,64,3,67,API log\n")
		}, "burstgpt", false, 3},
		{"bailian.gz", "bailian.jsonl.gz", func(t *testing.T) []byte {
			plain, err := os.ReadFile(filepath.Join("..", "..", "harness", "trace", "testdata", "bailian.jsonl"))
			if err != nil {
				t.Fatal(err)
			}
			var b bytes.Buffer
			zw := gzip.NewWriter(&b)
			zw.Write(plain)
			zw.Close()
			return b.Bytes()
		}, "bailian", true, 3},
		{"aiperf text_input", "aiperf.jsonl", func(*testing.T) []byte {
			return []byte(`{"session_id": "s1", "timestamp": 0, "input_length": 40, "output_length": 3, "hash_ids": [1, 2, 3]}` + "\n" +
				`{"session_id": "s1", "delay": 20, "text_input": "` + text + `", "input_length": 14, "output_length": 2}` + "\n" +
				`{"session_id": "s2", "timestamp": 30, "messages": ` + messages + `, "input_length": 12, "output_length": 2}` + "\n")
		}, "mooncake", true, 3},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			dir := t.TempDir()
			if err := os.WriteFile(filepath.Join(dir, tc.file), tc.data(t), 0o600); err != nil {
				t.Fatal(err)
			}
			sc := traceScenario(t, dir, tc.file, "concurrency = 1")
			out := t.TempDir()
			rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", out)
			if code != cli.ExitOK {
				t.Fatalf("run exit %d:\n%s", code, stderr)
			}
			var ts record.TraceSection
			raw, _ := json.Marshal(section(t, rec, "load"))
			if err := json.Unmarshal(raw, &ts); err != nil {
				t.Fatal(err)
			}
			f := ts.Format
			if f == nil || f.Format != tc.format || !f.Detected || f.PrefixInformation != tc.prefix || len(f.Fields) == 0 || ts.Requests != tc.requests || ts.FailedRequests != 0 {
				t.Fatalf("section: format %+v, %d requests (%d failed)", f, ts.Requests, ts.FailedRequests)
			}
			if f.Gzip != strings.HasSuffix(tc.file, ".gz") {
				t.Errorf("gzip %v for %s", f.Gzip, tc.file)
			}
			if tc.prefix {
				if ts.Ideal == nil {
					t.Errorf("no ideal: %s", ts.IdealUnavailable)
				}
			} else {
				if ts.Ideal != nil || !strings.HasPrefix(ts.IdealUnavailable, record.NoPrefixInformation) ||
					!strings.Contains(ts.Finding, "no prefix information: the ideal is unknown") {
					t.Errorf("ideal %+v, unavailable %q, finding %q", ts.Ideal, ts.IdealUnavailable, ts.Finding)
				}
				// Prompts that share nothing: the GPU prefix cache served nothing.
				if ts.Tiers.GPUHitTokens == nil || *ts.Tiers.GPUHitTokens != 0 {
					t.Errorf("GPU hit tokens %v, want 0: the prompts share nothing", ts.Tiers.GPUHitTokens)
				}
			}
			runDir := filepath.Join(out, onlyEntry(t, out))
			r, err := runs.Load(runDir)
			if err != nil {
				t.Fatal(err)
			}
			st := r.Repetitions[0].Steps[0]
			if st.Trace == nil || st.Trace.Format == nil || st.Trace.Format.Format != tc.format {
				t.Fatalf("artifact trace format: %+v", st.Trace)
			}
			if tc.format == "mooncake" {
				sum := sha256.Sum256([]byte(text))
				if q := st.Requests[1]; q.Prompt.Identity != hex.EncodeToString(sum[:]) || q.Trace.TraceTimeMS != 20 {
					t.Errorf("the text_input line went out as %s at %g ms, want the text as given at 20 ms", q.Prompt.Identity, q.Trace.TraceTimeMS)
				}
				var sent []prompts.Message
				json.Unmarshal([]byte(messages), &sent)
				b, _ := json.Marshal(sent)
				sum = sha256.Sum256(b)
				if q := st.Requests[2]; q.Prompt.Identity != hex.EncodeToString(sum[:]) || q.Result.PromptTokens == nil || *q.Result.PromptTokens == 0 || q.Result.Failed() {
					t.Errorf("the messages line went out as %s, prompt tokens %v, error %q; want the chat as given", q.Prompt.Identity, q.Result.PromptTokens, q.Result.Error)
				}
			}
			if tc.format != "burstgpt" {
				return
			}
			// The lengths still make a kv-accounting-summary/v1 row.
			stdout, stderr, code := runCLI(t, "accounting", runDir, "--pool-bytes-per-gpu", fmt.Sprint(gpuTokens*2048))
			if code != cli.ExitOK {
				t.Fatalf("accounting: exit %d: %s", code, stderr)
			}
			var acc struct {
				Rows []struct {
					Population string  `json:"population"`
					PromptP50  float64 `json:"actual_prompt_tokens_p50"`
				} `json:"rows"`
			}
			if err := json.Unmarshal([]byte(stdout), &acc); err != nil {
				t.Fatal(err)
			}
			if len(acc.Rows) != 1 || acc.Rows[0].PromptP50 != 120 {
				t.Errorf("accounting rows %+v", acc.Rows)
			}
		})
	}
}

// TestTraceFormatErrors: a bad trace of each format, through the command line, is one line
// naming the file and line, exit 2, and writes nothing.
func TestTraceFormatErrors(t *testing.T) {
	dir := t.TempDir()
	write := func(name string, data []byte) string {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, data, 0o600); err != nil {
			t.Fatal(err)
		}
		return path
	}
	var z bytes.Buffer
	zw := gzip.NewWriter(&z)
	for i := range 500 {
		fmt.Fprintf(zw, `{"timestamp": %d, "input_length": 600, "output_length": 5, "hash_ids": [%d, 1]}`+"\n", i, i)
	}
	zw.Close()
	cut := write("cut.jsonl.gz", z.Bytes()[:z.Len()/2])
	noColumn := write("nocol.csv", []byte("Timestamp,Model,Request tokens,Total tokens,Log Type\n1,ChatGPT,5,6,API log\n"))
	badDate := write("azure.csv", []byte("TIMESTAMP,ContextTokens,GeneratedTokens\n2023-11-11 10:00:00,5,1\n11/11/2023 10:00,5,1\n"))
	noIDs := write("bailian.jsonl", []byte(`{"chat_id": 1, "parent_chat_id": -1, "timestamp": 1, "input_length": 40, "output_length": 3, "type": "text", "turn": 1}`+"\n"))
	cases := []struct {
		args []string
		msg  string
	}{
		{[]string{"trace", "analyze", cut}, cut + ":"},
		{[]string{"trace", "analyze", noColumn}, noColumn + `:1: missing field: column "Response tokens"`},
		{[]string{"trace", "analyze", badDate}, badDate + `:3: bad value: TIMESTAMP "11/11/2023 10:00" is not a date and time`},
		{[]string{"trace", "analyze", noIDs}, noIDs + ":1: missing field: hash_ids"},
		{[]string{"trace", "analyze", noIDs, "--trace-format", "mooncake"}, noIDs + ":1: missing field: hash_ids"},
		{[]string{"trace", "analyze", noIDs, "--trace-format", "csv"}, `--trace-format: "csv" is not a trace format`},
		{[]string{"trace", "analyze", noIDs, "--block-tokens", "512"}, "a Bailian trace's hash ids name blocks of 16 tokens, not 512"},
	}
	for _, c := range cases {
		stdout, errOut, code := runCLI(t, c.args...)
		if code != cli.ExitUsage || !strings.Contains(errOut, c.msg) || strings.Count(errOut, "\n") != 1 || stdout != "" {
			t.Errorf("kvbench %s: exit %d %q %q, want exit 2 and one line with %q", strings.Join(c.args, " "), code, stdout, errOut, c.msg)
		}
	}
	if _, errOut, _ := runCLI(t, "trace", "analyze", cut); !strings.Contains(errOut, "bad gzip stream: the compressed file is cut short") {
		t.Errorf("cut gzip: %q", errOut)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 4 {
		t.Errorf("files written beside the traces: %v", entries)
	}

	// A trace step stops before anything is sent, naming the scenario's line and the trace's.
	sc := traceScenario(t, t.TempDir(), "../"+filepath.Base(dir)+"/nocol.csv", "concurrency = 1")
	stdout, errOut, code := runCLI(t, "plan", sc, "--trace", noColumn, "--trace-format", "burstgpt")
	if code != cli.ExitUsage || !strings.Contains(errOut, "trace.toml:") || !strings.Contains(errOut, noColumn+`:1: missing field: column "Response tokens"`) {
		t.Errorf("plan: exit %d %q %q", code, stdout, errOut)
	}
	// run stops there too, before it sends or writes anything.
	srv := startSim(t, sim.Options{Profile: "tiny"})
	out := t.TempDir()
	for _, bad := range []string{noColumn, badDate, noIDs, cut} {
		_, errOut, code = runCLI(t, "run", sc, "--trace", bad, "--endpoint", srv.URL()+"/v1", "--out", out)
		if code != cli.ExitUsage || !strings.Contains(errOut, bad+":") {
			t.Errorf("run --trace %s: exit %d %q", bad, code, errOut)
		}
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("run wrote %v for bad traces", entries)
	}
}

// TestSweepBurstGPT: the rate sweep runs on a trace of lengths and arrivals: each level
// offers its rate and measures its TTFT, and none has an ideal host share to set beside it.
func TestSweepBurstGPT(t *testing.T) {
	srv, _, _ := traceSim(t, 50)
	dir := t.TempDir()
	var b strings.Builder
	b.WriteString("Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n")
	for i := range 20 {
		fmt.Fprintf(&b, "%d,ChatGPT,%d,%d,0,API log\n", i/4, 40+i*7, 1+i%3)
	}
	if err := os.WriteFile(filepath.Join(dir, "burst.csv"), []byte(b.String()), 0o600); err != nil {
		t.Fatal(err)
	}
	sc := traceScenario(t, dir, "burst.csv", "")
	s, _ := sweepJSON(t, sc, "--endpoint", srv.URL()+"/v1", "--time-scales", "0.5,0.25", "--ttft-p90-ms", "60000", "--out", t.TempDir())
	if s.Status != record.StatusCompleted || s.Load != record.SweepRequestRate || len(s.Levels) != 2 {
		t.Fatalf("status %s, load %s, %d levels", s.Status, s.Load, len(s.Levels))
	}
	for _, l := range s.Levels {
		if l.Requests != 20 || l.FailedRequests != 0 || l.RequestsPerSecond == nil || l.TTFTMS.P90 == nil || l.IdealHostShare != nil {
			t.Errorf("level %v: %d requests (%d failed), rate %v, TTFT p90 %v, ideal host share %v", l.TimeScale, l.Requests, l.FailedRequests, l.RequestsPerSecond, l.TTFTMS.P90, l.IdealHostShare)
		}
	}
	if s.CapacityRequestsPerSecond == nil {
		t.Errorf("no capacity: %s", s.CapacityReason)
	}
}

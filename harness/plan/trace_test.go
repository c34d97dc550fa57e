package plan

import (
	"bytes"
	"compress/gzip"
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/scenarios"
)

// testTrace is four requests over 3 s of trace time. The third is the longest (10,000
// tokens, 20 hash ids) and the second asks for no output (which counts as 1).
const testTrace = `{"timestamp": 0, "input_length": 1000, "output_length": 10, "hash_ids": [1, 2]}
{"timestamp": 500, "input_length": 600, "output_length": 0, "hash_ids": [2, 3]}

{"timestamp": 1500, "input_length": 10000, "output_length": 20, "hash_ids": [4, 5, 6, 7, 8, 9, 10, 11, 12, 13, 14, 15, 16, 17, 18, 19, 20, 21, 22, 23]}
{"timestamp": 3000, "input_length": 300, "output_length": 5, "hash_ids": [24]}
`

// traceScenarioDoc has a planned step, then trace step 1 on t.jsonl; fields go into the trace
// step's table (the trace step starts on line 8).
func traceScenarioDoc(fields string) string {
	return `name = "trace-plan"
[prompt]
shared_prefix_tokens = 0
[[step]]
id = "warm"
planned_context_tokens = [500]

[[step]]
id = "load"
kind = "trace"
file = "t.jsonl"
` + fields
}

// traceFileLine is the line of the trace step's file key in traceScenarioDoc.
const traceFileLine = 11

// writeTraceScenario writes the trace (unless it is nil) and parses the scenario beside it.
func writeTraceScenario(t *testing.T, traceText *string, fields string) (*scenarios.Scenario, string) {
	t.Helper()
	dir := t.TempDir()
	if traceText != nil {
		if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte(*traceText), 0o600); err != nil {
			t.Fatal(err)
		}
	}
	sc, err := scenarios.Parse([]byte(traceScenarioDoc(fields)), filepath.Join(dir, "s.toml"))
	if err != nil {
		t.Fatal(err)
	}
	return sc, dir
}

func sum(text string) string {
	s := sha256.Sum256([]byte(text))
	return hex.EncodeToString(s[:])
}

func ptr(s string) *string { return &s }

func vllm(t *testing.T) *engine.Definition {
	t.Helper()
	def, err := engine.ByName("vllm")
	if err != nil {
		t.Fatal(err)
	}
	return def
}

// TestScanTraceWindows: the plan of a trace step counts exactly the requests its window
// keeps, their tokens and span, and hashes the whole file whatever the window.
func TestScanTraceWindows(t *testing.T) {
	cases := []struct {
		name     string
		fields   string
		requests int
		dropped  int
		prompt   int64
		output   int64
		longest  int
		span     float64
	}{
		{"whole trace", "", 4, 0, 11900, 36, 10020, 3},
		{"from a start", "start = \"1s\"\n", 2, 0, 10300, 25, 10020, 1.5},
		{"a duration", "duration = \"1s\"\n", 2, 0, 1600, 11, 1010, 0.5},
		{"the end of a duration is outside", "duration = \"1500ms\"\n", 2, 0, 1600, 11, 1010, 0.5},
		{"a request count", "requests = 3\n", 3, 0, 11600, 31, 10020, 1.5},
		{"a request count stops the file early", "requests = 1\n", 1, 0, 1000, 10, 1010, 0},
		{"max_input_tokens drops", "max_input_tokens = 5000\n", 3, 1, 1900, 16, 1010, 3},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, dir := writeTraceScenario(t, ptr(testTrace), c.fields)
			p, err := ScanTrace(sc, 1, vllm(t))
			if err != nil {
				t.Fatal(err)
			}
			if p.Requests != c.requests || p.Dropped != c.dropped || p.PromptTokens != c.prompt || p.OutputTokens != c.output ||
				p.LongestRequestTokens != c.longest || p.SpanSeconds != c.span {
				t.Errorf("plan %+v\nwant %d requests, %d dropped, %d prompt and %d output tokens, longest %d, span %g s",
					p, c.requests, c.dropped, c.prompt, c.output, c.longest, c.span)
			}
			if p.SHA256 != sum(testTrace) {
				t.Errorf("sha256 %s, want the whole file's %s", p.SHA256, sum(testTrace))
			}
			if want := filepath.Join(dir, "t.jsonl"); p.File != want || p.NamedBy != "scenario" {
				t.Errorf("file %q named by %q, want %q by the scenario", p.File, p.NamedBy, want)
			}
			if p.BlockTokens != 512 || p.PromptForm != scenarios.PromptFormTokenIDs || p.Window != TraceWindow(&sc.Steps[1]) {
				t.Errorf("block tokens %d, prompt form %s, window %+v", p.BlockTokens, p.PromptForm, p.Window)
			}
		})
	}
}

// TestScanTraceSampleIDs: the sample blocks are the window's first 16 distinct hash ids, in
// order.
func TestScanTraceSampleIDs(t *testing.T) {
	sc, _ := writeTraceScenario(t, ptr(testTrace), "")
	p, err := ScanTrace(sc, 1, vllm(t))
	if err != nil {
		t.Fatal(err)
	}
	var want []uint64
	for id := uint64(1); id <= sampleBlocks; id++ {
		want = append(want, id)
	}
	if !slices.Equal(p.SampleIDs, want) {
		t.Errorf("sample ids %v, want %v", p.SampleIDs, want)
	}

	sc, _ = writeTraceScenario(t, ptr(testTrace), "start = \"1s\"\n")
	if p, err = ScanTrace(sc, 1, vllm(t)); err != nil {
		t.Fatal(err)
	}
	if len(p.SampleIDs) != sampleBlocks || p.SampleIDs[0] != 4 {
		t.Errorf("from 1s the sample ids are %v, want 16 from id 4", p.SampleIDs)
	}
}

// TestScanTraceNamedByUser: a trace the user names with --trace is read from there and the
// plan says who named it.
func TestScanTraceNamedByUser(t *testing.T) {
	sc, _ := writeTraceScenario(t, nil, "") // the scenario's own t.jsonl is absent
	other := filepath.Join(t.TempDir(), "mine.jsonl")
	if err := os.WriteFile(other, []byte(testTrace), 0o600); err != nil {
		t.Fatal(err)
	}
	sc.UseTrace(other)
	p, err := ScanTrace(sc, 1, vllm(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.File != other || p.NamedBy != "command line" || p.Requests != 4 {
		t.Errorf("plan %+v, want the 4 requests of %s named on the command line", p, other)
	}
}

// TestScanTraceErrors: a trace that cannot be replayed is a *ScenarioError naming the
// scenario's line and key, wrapping the trace's own error with its file and line.
func TestScanTraceErrors(t *testing.T) {
	cases := []struct {
		name   string
		trace  *string
		fields string
		is     error
		want   string // in the error, after the scenario's position and key
	}{
		{"missing", nil, "", os.ErrNotExist, "t.jsonl"},
		{"empty", ptr(""), "", trace.ErrEmpty, "t.jsonl: empty trace: no requests"},
		{"not JSON on line 2", ptr(strings.Replace(testTrace, `{"timestamp": 500`, `{timestamp: 500`, 1)), "", trace.ErrNotJSON, "t.jsonl:2: not a JSON object"},
		{"a field missing on line 4", ptr(strings.Replace(testTrace, `, "output_length": 20`, "", 1)), "", trace.ErrMissingField, "t.jsonl:4: missing field"},
		{"time goes back", ptr(strings.Replace(testTrace, `"timestamp": 3000`, `"timestamp": 100`, 1)), "", trace.ErrNotMonotonic, "t.jsonl:5: timestamp goes back"},
		{"too many blocks", ptr(strings.Replace(testTrace, `"hash_ids": [24]`, `"hash_ids": [24, 25]`, 1)), "", trace.ErrTooManyBlocks, "t.jsonl:5: more hash ids than the input length spans"},
		{"a window that keeps nothing", ptr(testTrace), "start = \"1m\"\n", trace.ErrEmptyWindow, "the window keeps no request"},
		{"every request dropped", ptr(testTrace), "max_input_tokens = 100\n", trace.ErrEmptyWindow, "4 dropped over max_input_tokens"},
		{"not a regular file", nil, "", nil, "not a regular file"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, dir := writeTraceScenario(t, c.trace, c.fields)
			if c.name == "not a regular file" {
				if err := os.Mkdir(filepath.Join(dir, "t.jsonl"), 0o755); err != nil {
					t.Fatal(err)
				}
			}
			p, err := ScanTrace(sc, 1, vllm(t))
			var te *ScenarioError
			if !errors.As(err, &te) {
				t.Fatalf("plan %+v, err %v: want a *ScenarioError", p, err)
			}
			if te.Key != "step[1].file" || te.Position != fmt.Sprintf("%s:%d", sc.Path, traceFileLine) {
				t.Errorf("position %q key %q, want %s:%d step[1].file", te.Position, te.Key, sc.Path, traceFileLine)
			}
			prefix := fmt.Sprintf("%s:%d: step[1].file: ", sc.Path, traceFileLine)
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || !strings.Contains(msg[len(prefix):], c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q\nwant %q then %q, on one line", msg, prefix, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
			if !errors.Is(err, te.Err) || errors.Unwrap(err) != te.Err {
				t.Errorf("the ScenarioError does not unwrap to its cause %v", te.Err)
			}
			var fe *trace.FormatError
			if errors.Is(err, trace.ErrNotJSON) && (!errors.As(err, &fe) || fe.File != filepath.Join(dir, "t.jsonl") || fe.Line != 2) {
				t.Errorf("format error %+v, want t.jsonl line 2", fe)
			}
		})
	}
}

// TestScanTraceBrokenPastWindow: a line past the window is never parsed, so it does not stop
// the run, but the plan's sha256 covers it.
func TestScanTraceBrokenPastWindow(t *testing.T) {
	text := testTrace + "not a trace line\n"
	sc, _ := writeTraceScenario(t, &text, "requests = 2\n")
	p, err := ScanTrace(sc, 1, vllm(t))
	if err != nil {
		t.Fatal(err)
	}
	if p.Requests != 2 || p.SHA256 != sum(text) {
		t.Errorf("%d requests, sha256 %s; want 2 and %s", p.Requests, p.SHA256, sum(text))
	}
}

// TestOpenTrace: the selection hands out the window's requests; sum, called after, hashes the
// whole file, and the file closes.
func TestOpenTrace(t *testing.T) {
	sc, _ := writeTraceScenario(t, ptr(testTrace), "start = \"500ms\"\nrequests = 2\n")
	sel, closeFile, hash, err := OpenTrace(&sc.Steps[1])
	if err != nil {
		t.Fatal(err)
	}
	var got []int
	for range 10 { // bounded: the window holds 2
		var req trace.Request
		err := sel.Next(&req)
		if errors.Is(err, io.EOF) {
			break
		}
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, req.Line)
	}
	if !slices.Equal(got, []int{2, 4}) || sel.Kept() != 2 {
		t.Errorf("lines %v (kept %d), want 2 and 4 (the blank line 3 skipped)", got, sel.Kept())
	}
	s, err := hash()
	if err != nil || s != sum(testTrace) {
		t.Errorf("sum %s, %v; want %s", s, err, sum(testTrace))
	}
	if err := closeFile(); err != nil {
		t.Errorf("close: %v", err)
	}
	if err := closeFile(); err == nil {
		t.Error("the file was not closed: closing it again succeeded")
	}

	missing, _ := writeTraceScenario(t, nil, "")
	if sel, closeFile, hash, err := OpenTrace(&missing.Steps[1]); !errors.Is(err, os.ErrNotExist) || sel != nil || closeFile != nil || hash != nil {
		t.Errorf("a missing trace: %v (selection %v)", err, sel)
	}
}

func TestTraceWindow(t *testing.T) {
	cases := []struct {
		fields string
		want   trace.Window
	}{
		{"", trace.Window{}},
		{"start = \"10m\"\nduration = \"5m\"\nmax_input_tokens = 32768\n", trace.Window{Start: 10 * time.Minute, Duration: 5 * time.Minute, MaxInputTokens: 32768}},
		{"start = \"2s\"\nrequests = 100\n", trace.Window{Start: 2 * time.Second, Requests: 100}},
	}
	for _, c := range cases {
		sc, err := scenarios.Parse([]byte(traceScenarioDoc(c.fields)), "/recipes/s.toml")
		if err != nil {
			t.Fatal(err)
		}
		if got := TraceWindow(&sc.Steps[1]); got != c.want {
			t.Errorf("%q: window %+v, want %+v", c.fields, got, c.want)
		}
	}
}

func TestOutputTokens(t *testing.T) {
	for out, want := range map[int]int{0: 1, 1: 1, 37: 37} {
		if got := OutputTokens(&trace.Request{InputLength: 10, OutputLength: out}); got != want {
			t.Errorf("output_length %d: %d tokens asked, want %d", out, got, want)
		}
	}
}

func TestPromptForm(t *testing.T) {
	ids := &engine.Definition{Name: "ids"}
	textOnly := &engine.Definition{Name: "text-only", TextPromptsOnly: true}
	cases := []struct {
		form string
		def  *engine.Definition
		want string
	}{
		{scenarios.PromptFormAuto, ids, scenarios.PromptFormTokenIDs},
		{scenarios.PromptFormAuto, textOnly, scenarios.PromptFormText},
		{scenarios.PromptFormText, ids, scenarios.PromptFormText},
		{scenarios.PromptFormTokenIDs, textOnly, scenarios.PromptFormTokenIDs}, // the step's choice stands
	}
	for _, c := range cases {
		st := &scenarios.Step{TraceStep: scenarios.TraceStep{PromptForm: c.form}}
		if got := PromptForm(st, c.def); got != c.want {
			t.Errorf("%s on %s: %s, want %s", c.form, c.def.Name, got, c.want)
		}
	}
}

// TestMakeTracePlanText: Make plans a trace step from its file, builds none of its requests
// up front, and the text plan says what the step will send and how.
func TestMakeTracePlanText(t *testing.T) {
	cases := []struct {
		name, fields string
		loop         string
	}{
		{"open loop", "time_scale = 0.5\n", "open loop: at the trace's timestamps x 0.5, 3.0 s of trace time in 1.5 s"},
		{"closed loop", "concurrency = 3\n", "closed loop: in trace order, 3 in flight"},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, dir := writeTraceScenario(t, ptr(testTrace), c.fields+"max_input_tokens = 9000\n")
			p, raw, out := planText(t, sc, nil)
			tp := p.Steps[1].Trace
			if tp == nil || len(p.Steps[1].Requests) != 0 || p.requestCount() != 1 {
				t.Fatalf("trace step planned as %+v with %d requests; %d in all, want the warm step's 1", tp, len(p.Steps[1].Requests), p.requestCount())
			}
			want := []string{
				fmt.Sprintf("trace load: 3 requests from %s (named by the scenario, sha256 %s), from 0s to the end, input <= 9000 tokens; 1 dropped over max_input_tokens",
					filepath.Join(dir, "t.jsonl"), sum(testTrace)),
				"1900 prompt tokens in blocks of 512, 16 output tokens asked (output_length, at least 1 each), the longest request 1010 tokens; prompts as token_ids",
				c.loop,
			}
			for _, w := range want {
				if !strings.Contains(out, w) {
					t.Errorf("no %q in\n%s", w, raw)
				}
			}
			// The trace section alone, as the runner prints it.
			var b bytes.Buffer
			tp.WriteText(&b, p.Steps[1])
			if !strings.Contains(raw, b.String()) {
				t.Errorf("the plan does not hold the trace section %q", b.String())
			}
		})
	}
}

// TestScanTraceFormats: a trace step reads every format, told from the content or named,
// and its plan says which format and fields the trace carried; a gzip file is read through.
func TestScanTraceFormats(t *testing.T) {
	const burst = "Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type\n0,ChatGPT,400,20,420,API log\n2,GPT-4,0,0,0,API log\n3,GPT-4,900,0,900,Conversation log\n"
	const bailian = `{"chat_id": 5, "parent_chat_id": -1, "timestamp": 1.5, "input_length": 40, "output_length": 4, "type": "text", "turn": 1, "hash_ids": [77, 12, 3]}` + "\n"
	var zipped bytes.Buffer
	zw := gzip.NewWriter(&zipped)
	zw.Write([]byte(testTrace))
	zw.Close()
	cases := []struct {
		name, text, fields string
		format             string
		detected, prefix   bool
		block, requests    int
		prompt             int64
	}{
		{"burstgpt told", burst, "", "burstgpt", true, false, 512, 2, 1300},
		{"burstgpt named", burst, "format = \"burstgpt\"\n", "burstgpt", false, false, 512, 2, 1300},
		{"bailian named", bailian, "format = \"bailian\"\n", "bailian", false, true, 16, 1, 40},
		{"mooncake gzip", zipped.String(), "", "mooncake", true, true, 512, 4, 11900},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			sc, _ := writeTraceScenario(t, &tc.text, tc.fields)
			p, err := ScanTrace(sc, 1, vllm(t))
			if err != nil {
				t.Fatal(err)
			}
			f := p.Format
			if f == nil || f.Format != tc.format || f.Detected != tc.detected || f.PrefixInformation != tc.prefix || len(f.Fields) == 0 ||
				p.BlockTokens != tc.block || p.Requests != tc.requests || p.PromptTokens != tc.prompt || p.SHA256 != sum(tc.text) {
				t.Errorf("plan %+v format %+v", p, f)
			}
			if tc.format == "burstgpt" && f.SkippedRows != 1 {
				t.Errorf("skipped rows %d, want 1", f.SkippedRows)
			}
		})
	}
	// A Bailian trace told from its content at the default 512-token blocks is refused with
	// the way out, naming the scenario's line.
	sc, _ := writeTraceScenario(t, ptr(bailian), "")
	if _, err := ScanTrace(sc, 1, vllm(t)); err == nil || !strings.Contains(err.Error(), fmt.Sprintf("s.toml:%d: step[1].file: ", traceFileLine)) ||
		!strings.Contains(err.Error(), "a Bailian trace's hash ids name blocks of 16 tokens, not 512 (set block_tokens = 16") {
		t.Errorf("bailian at 512: %v", err)
	}
	// A CSV missing a column stops the plan at the CSV's line.
	sc, _ = writeTraceScenario(t, ptr("Timestamp,Model,Request tokens\n1,ChatGPT,5\n"), "format = \"burstgpt\"\n")
	if _, err := ScanTrace(sc, 1, vllm(t)); err == nil || !strings.Contains(err.Error(), `t.jsonl:1: missing field: column "Response tokens"`) {
		t.Errorf("a CSV without Response tokens: %v", err)
	}
}

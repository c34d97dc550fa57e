package main

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"net/http/httputil"
	"net/url"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/traceimport"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// importSystem is the system prompt the logged requests share: words no trace may hold.
var importSystem = "You are the support assistant of Zephyrine Corporation. " + strings.Repeat("Answer politely and follow the refund policy. ", 12)

// chatLogLine is one logged chat request at ms, its user turn user.
func chatLogLine(ms int, user string, extra string) string {
	b, _ := json.Marshal(map[string]any{"model": "gpt-4o", "timestamp": ms, "messages": []map[string]string{
		{"role": "system", "content": importSystem}, {"role": "user", "content": user}}})
	return strings.TrimSuffix(string(b), "}") + extra + "}\n"
}

func writeLog(t *testing.T, dir, text string) string {
	t.Helper()
	path := filepath.Join(dir, "requests.jsonl")
	if err := os.WriteFile(path, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	return path
}

// TestTraceImportRoundTrip: a log of the user's own requests, imported through the embedded
// engine's /tokenize, analyzed and replayed there. Requests sharing the system prompt share
// leading ids, the same prompt twice gives the same ids, the report's unbounded hit rate is
// trace analyze's, and nothing of the log's text is in the trace.
func TestTraceImportRoundTrip(t *testing.T) {
	srv, _, _ := traceSim(t, 50)
	dir := t.TempDir()
	log := writeLog(t, dir,
		chatLogLine(0, "My order number is QX-4471 and it never arrived.", `, "max_tokens": 40`)+
			chatLogLine(1200, "How do I change the shipping address on my account?", "")+
			chatLogLine(2500, "My order number is QX-4471 and it never arrived.", `, "usage": {"completion_tokens": 12}`)+
			`{"custom_id": "b1", "method": "POST", "url": "/v1/completions", "timestamp": 4000, "body": {"model": "gpt-4o", "prompt": "Summarise the ticket history of Mrs Ottoline Quibble", "max_tokens": 8}}`+"\n")
	out := filepath.Join(dir, "my-traffic.jsonl")
	stdout, stderr, code := runCLI(t, "trace", "import", log, "--endpoint", srv.URL()+"/v1", "--model", "tiny-sim", "--block-tokens", "16", "-o", out, "--format", "json")
	if code != cli.ExitOK {
		t.Fatalf("import exit %d: %s", code, stderr)
	}
	var rep traceimport.Report
	if err := json.Unmarshal([]byte(stdout), &rep); err != nil {
		t.Fatalf("%v: %s", err, stdout)
	}
	if rep.Requests != 4 || rep.SharingRequests != 2 || rep.UnboundedHitRate <= 0 || rep.Trace != out || rep.Arrivals != "logged" {
		t.Fatalf("report %+v", rep)
	}
	raw, err := os.ReadFile(out)
	if err != nil {
		t.Fatal(err)
	}
	for _, word := range []string{"Zephyrine", "refund", "QX-4471", "shipping", "Ottoline", "Quibble", "gpt-4o", "b1"} {
		if strings.Contains(string(raw), word) {
			t.Errorf("the trace holds %q", word)
		}
	}
	reqs, err := trace.ReadAll(trace.NewReader(strings.NewReader(string(raw)), out, 16))
	if err != nil {
		t.Fatal(err)
	}
	shared := len(strings.Fields(importSystem)) / 16 // whole blocks of the system prompt alone, at least
	if shared < 2 || !slices.Equal(reqs[0].HashIDs[:shared], reqs[1].HashIDs[:shared]) || slices.Equal(reqs[0].HashIDs, reqs[1].HashIDs) {
		t.Errorf("one system prompt: want %d shared leading ids, then apart: %v and %v", shared, reqs[0].HashIDs, reqs[1].HashIDs)
	}
	if !slices.Equal(reqs[0].HashIDs, reqs[2].HashIDs) || reqs[0].OutputLength != 40 || reqs[2].OutputLength != 12 || reqs[2].Timestamp.Milliseconds() != 2500 {
		t.Errorf("the same prompt twice: %+v and %+v", reqs[0], reqs[2])
	}

	var a trace.Analysis
	stdout, stderr, code = runCLI(t, "trace", "analyze", out, "--block-tokens", "16", "--format", "json")
	if code != cli.ExitOK || json.Unmarshal([]byte(stdout), &a) != nil {
		t.Fatalf("analyze exit %d: %s", code, stderr)
	}
	if a.Requests != 4 || a.MaxHitRate != rep.UnboundedHitRate || a.PromptTokens != rep.PromptTokens {
		t.Errorf("analyze: %d requests, unbounded %.4f of %d tokens; the import said %.4f of %d", a.Requests, a.MaxHitRate, a.PromptTokens, rep.UnboundedHitRate, rep.PromptTokens)
	}

	sc := traceScenario(t, dir, filepath.Base(out), "concurrency = 1")
	rec, stderr, code := runJSON(t, context.Background(), "run", sc, "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("replay exit %d: %s", code, stderr)
	}
	var ts record.TraceSection
	b, _ := json.Marshal(section(t, rec, "load"))
	if err := json.Unmarshal(b, &ts); err != nil {
		t.Fatal(err)
	}
	if ts.Requests != 4 || ts.FailedRequests != 0 || ts.Tiers.PromptTokens == nil || int64(*ts.Tiers.PromptTokens) != rep.PromptTokens {
		t.Fatalf("replay: %d requests, %d failed, prompt tokens %v (the trace has %d)", ts.Requests, ts.FailedRequests, ts.Tiers.PromptTokens, rep.PromptTokens)
	}
	// The shared ids became shared tokens on the server: its prefix cache served what the
	// import said an unbounded cache would (the four prompts fit its GPU pool).
	if g := ts.Tiers.GPUHitTokens; g == nil || int64(*g) != rep.UnboundedHitTokens || rep.UnboundedHitTokens == 0 {
		t.Errorf("replay: GPU prefix hits %v tokens, the import's unbounded hit %d", g, rep.UnboundedHitTokens)
	}
}

// TestTraceImportBadInputWritesNothing: a line that is not an OpenAI request, a timestamp
// that does not parse and a tokenizer that fails each exit 2 with one line naming the file
// and line, leave no file behind, and never print the API key.
func TestTraceImportBadInputWritesNothing(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	t.Setenv("KVBENCH_IMPORT_TEST_KEY", "sk-never-printed-7731")
	good := chatLogLine(0, "hello", "")
	for _, c := range []struct{ name, log, model, where, want string }{
		{"not a request", good + `{"input": "embed me"}` + "\n", "tiny-sim", ":2:", "not an OpenAI request"},
		{"bad timestamp", good + strings.Replace(good, `"timestamp":0`, `"timestamp":"last tuesday"`, 1), "tiny-sim", ":2:", "bad timestamp"},
		{"tokenizer fails", good, "no-such-model", ":1:", "tokenizing the prompt"},
	} {
		t.Run(c.name, func(t *testing.T) {
			dir := t.TempDir()
			log := writeLog(t, dir, c.log)
			out := filepath.Join(dir, "trace.jsonl")
			stdout, stderr, code := runCLI(t, "trace", "import", log, "--endpoint", srv.URL()+"/v1", "--model", c.model, "--api-key-env", "KVBENCH_IMPORT_TEST_KEY", "-o", out)
			msg := strings.TrimSpace(stderr)
			if code != cli.ExitUsage || !strings.Contains(msg, log+c.where) || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("exit %d, want 2 and one line naming %s%s (%s): %q", code, log, c.where, c.want, stderr)
			}
			if strings.Contains(stdout+stderr, "sk-never-printed") {
				t.Errorf("the API key was printed: %s%s", stdout, stderr)
			}
			if entries, _ := os.ReadDir(dir); len(entries) != 1 {
				t.Errorf("files left: %v", entries)
			}
		})
	}
	// The flags are checked before anything is read or sent.
	_, stderr, code := runCLI(t, "trace", "import", "requests.jsonl", "-o", filepath.Join(t.TempDir(), "t.jsonl"))
	if code != cli.ExitUsage || !strings.Contains(stderr, "--endpoint URL or --tokenizer URL") {
		t.Errorf("no tokenizer: exit %d: %s", code, stderr)
	}
}

// TestTraceImportEachDialect: the same log through each engine's tokenize dialect (vLLM's
// and SGLang's /tokenize of messages, llama.cpp's /apply-template then /tokenize) and
// through --tokenizer at the tokenize URL itself gives the same trace, byte for byte: the
// embedded engine tokenizes by one rule in every dialect, and the ids never depend on the
// import's random key.
func TestTraceImportEachDialect(t *testing.T) {
	log := writeLog(t, t.TempDir(), chatLogLine(0, "first question", "")+chatLogLine(700, "second question", `, "max_tokens": 9`)+
		`{"model": "gpt-4o", "prompt": "a plain completion prompt", "timestamp": 900}`+"\n")
	var want string
	for _, c := range []struct{ backend, dialect string }{{"vllm", ""}, {"sglang", "sglang"}, {"llamacpp", "llamacpp"}, {"tokenizer", ""}} {
		opts := sim.Options{Profile: "tiny"}
		if c.dialect != "" {
			opts.Override = dialect(c.dialect, nil)
		}
		srv := startSim(t, opts)
		out := filepath.Join(t.TempDir(), "trace.jsonl")
		args := []string{"trace", "import", log, "--model", "tiny-sim", "--block-tokens", "4", "-o", out}
		if c.backend == "tokenizer" {
			// A sidecar at a path of its own, under a /v1 that must not be cut.
			target, _ := url.Parse(srv.URL())
			proxy := httputil.NewSingleHostReverseProxy(target)
			side := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
				if r.URL.Path != "/v1/sidecar/tokenize" || r.URL.RawQuery != "v=2" {
					http.NotFound(w, r)
					return
				}
				r.URL.Path, r.URL.RawQuery = "/tokenize", ""
				proxy.ServeHTTP(w, r)
			}))
			t.Cleanup(side.Close)
			args = append(args, "--tokenizer", side.URL+"/v1/sidecar/tokenize?v=2")
		} else {
			args = append(args, "--endpoint", srv.URL()+"/v1", "--backend", c.backend)
		}
		if _, stderr, code := runCLI(t, args...); code != cli.ExitOK {
			t.Fatalf("%s: exit %d: %s", c.backend, code, stderr)
		}
		raw, err := os.ReadFile(out)
		if err != nil {
			t.Fatal(err)
		}
		if want == "" {
			want = string(raw)
		} else if string(raw) != want {
			t.Errorf("%s gives another trace:\n%s\nthan vllm's:\n%s", c.backend, raw, want)
		}
	}
}

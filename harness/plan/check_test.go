package plan

import (
	"context"
	"errors"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync/atomic"
	"testing"

	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// TestCheckBuiltins: every scenario kvbench ships passes Check.
func TestCheckBuiltins(t *testing.T) {
	names := scenarios.BuiltinNames()
	if len(names) == 0 {
		t.Fatal("no built-in scenarios")
	}
	for _, name := range names {
		sc, err := scenarios.Builtin(name)
		if err != nil {
			t.Fatal(err)
		}
		if err := Check(context.Background(), sc); err != nil {
			t.Errorf("%s: %v", name, err)
		}
	}
}

// TestCheckRefuses: what Check finds without a server, each error on one line naming the
// scenario's file (and the line where the key has one) and the key.
func TestCheckRefuses(t *testing.T) {
	cases := []struct {
		name   string
		doc    string
		prefix string // the error starts with the scenario's path and this
		want   string
		is     error
	}{
		{
			name:   "unknown backend",
			doc:    "name = \"x\"\n[target]\nbackend = \"nope\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n",
			prefix: ":3: target.backend: ",
			want:   `unknown backend "nope"`,
		},
		{
			name: "a reload curve starting below its fixed text",
			doc:  "name = \"x\"\n[server]\ngpu_kv_tokens = 100000\nmax_model_len = 4096\n[[step]]\nid = \"curve\"\nkind = \"reload-curve\"\nfrom_tokens = 8\nto_tokens = 64\nfactor = 2\n",
			// No planned_context_tokens: the step's own line.
			prefix: ":5: step[0]: ",
			want:   "step curve_8: request 0: planned tokens too small: 8 tokens planned",
			is:     prompts.ErrTooSmall,
		},
		{
			name:   "shared prefix smaller than its fixed text",
			doc:    "name = \"x\"\n[prompt]\nshared_prefix_tokens = 3\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n",
			prefix: ":3: prompt.shared_prefix_tokens: ",
			want:   "shared prefix: planned tokens too small: 3 tokens planned",
			is:     prompts.ErrTooSmall,
		},
		{
			name: "a request smaller than its fixed text",
			doc:  "name = \"x\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000]\n[[step]]\nid = \"b\"\nplanned_context_tokens = [10]\n",
			// The second step's sizes, on line 7, and the step by its id.
			prefix: ":7: step[1].planned_context_tokens: ",
			want:   "step b: request 1: planned tokens too small: 10 tokens planned",
			is:     prompts.ErrTooSmall,
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			path := filepath.Join("/recipes", "bad.toml")
			sc, err := scenarios.Parse([]byte(c.doc), path)
			if err != nil {
				t.Fatalf("the scenario should parse (Check finds what Parse cannot): %v", err)
			}
			err = Check(context.Background(), sc)
			if err == nil {
				t.Fatal("Check accepted it")
			}
			msg := err.Error()
			if !strings.HasPrefix(msg, path+c.prefix) || !strings.Contains(msg, c.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q\nwant %q then %q, on one line", msg, path+c.prefix, c.want)
			}
			if c.is != nil && !errors.Is(err, c.is) {
				t.Errorf("error %v is not %v", err, c.is)
			}
		})
	}
}

// TestCheckTrace: Check reads a trace step's file through its window, refusing a missing or
// broken trace with the scenario's line and the trace's, and accepting a good one, without
// a request to the server.
func TestCheckTrace(t *testing.T) {
	var hits atomic.Int64
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		hits.Add(1)
		http.Error(w, "Check sent a request", http.StatusTeapot)
	}))
	defer srv.Close()
	// The scenario counts tokens on the server, at srv: Check must plan by the estimate.
	fields := "concurrency = 2\n"
	cases := []struct {
		name  string
		trace *string
		want  string // "" accepted
		is    error
	}{
		{"good", ptr(testTrace), "", nil},
		{"missing", nil, "t.jsonl: no such file", os.ErrNotExist},
		{"broken line", ptr(testTrace + "{\"timestamp\": 4000}\n"), "t.jsonl:6: missing field: input_length", trace.ErrMissingField},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			sc, _ := writeTraceScenario(t, c.trace, fields)
			sc.Target.Endpoint = srv.URL + "/v1"
			if sc.Prompt.TokenCounting != "server" {
				t.Fatalf("token counting %q, want the server's", sc.Prompt.TokenCounting)
			}
			err := Check(context.Background(), sc)
			if c.want == "" {
				if err != nil {
					t.Fatalf("Check refused a good trace: %v", err)
				}
				return
			}
			if err == nil {
				t.Fatal("Check accepted it")
			}
			var te *ScenarioError
			if !errors.As(err, &te) || !errors.Is(err, c.is) {
				t.Errorf("error %v: want a *ScenarioError that is %v", err, c.is)
			}
			// Once: Check passes the trace's error on without naming the scenario again.
			prefix := sc.Position("step[1].file") + ": step[1].file: "
			if msg := err.Error(); !strings.HasPrefix(msg, prefix) || strings.Count(msg, sc.Path) != 1 || !strings.Contains(msg, c.want) {
				t.Errorf("error %q\nwant %q once, then %q", msg, prefix, c.want)
			}
		})
	}
	if n := hits.Load(); n != 0 {
		t.Errorf("Check sent %d requests to the server", n)
	}
}

package engine

import (
	"context"
	"encoding/json"
	"net/http"
	"net/http/httptest"
	"os"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/prompts"
)

func TestRegistry(t *testing.T) {
	got := Names()
	slices.Sort(got[1:])
	if strings.Join(got, " ") != "vllm kvbm llamacpp lmcache sglang trtllm" {
		t.Fatalf("names %q", got)
	}
	if Names()[0] != Default {
		t.Fatalf("default %s not first in %v", Default, Names())
	}
	if d, err := ByName(""); err != nil || d.Name != "vllm" {
		t.Fatalf(`ByName("") = %v, %v`, d, err)
	}
	if _, err := ByName("tgi"); err == nil || !strings.Contains(err.Error(), "tgi") || !strings.Contains(err.Error(), "llamacpp") {
		t.Fatalf("unknown engine error %v", err)
	}
}

// TestDefinitionsComplete holds every definition to the same contract: a profile of its own
// name that lists every counter (nil: absent on purpose), a topology, a tokenize dialect, an
// attribution and the verdicts it supports.
func TestDefinitionsComplete(t *testing.T) {
	for _, d := range All() {
		t.Run(d.Name, func(t *testing.T) {
			p := d.Profile()
			if p.Name != d.Name {
				t.Errorf("profile named %s", p.Name)
			}
			for _, c := range metrics.Counters() {
				if _, ok := p.Counters[c]; !ok {
					t.Errorf("profile does not list %s", c)
				}
			}
			if d.Topology != capacity.SharedPool && d.Topology != capacity.SingleSlot {
				t.Errorf("topology %q", d.Topology)
			}
			if d.Tokenize == "" || d.Attribution == "" || len(d.Verdicts) == 0 || d.Proves == "" || d.Sizes == "" || d.HostTierUnit == "" {
				t.Errorf("incomplete definition %+v", d)
			}
			// A fresh copy each time: overrides of one run never leak into the next.
			had := p.Counters[metrics.PromptTokensCached] != nil
			p.Counters[metrics.PromptTokensCached] = nil
			if q := d.Profile(); had && q.Counters[metrics.PromptTokensCached] == nil {
				t.Errorf("Profile returned a shared map")
			}
		})
	}
}

// TestTokenizeDialects counts one prompt on a fake of each dialect: vLLM answers a count,
// llama.cpp token ids after rendering its chat template.
func TestTokenizeDialects(t *testing.T) {
	var paths []string
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		paths = append(paths, r.URL.Path)
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		switch {
		case r.URL.Path == "/apply-template":
			_, _ = w.Write([]byte(`{"prompt":"<s>user: hi"}`))
		case r.URL.Path == "/tokenize" && body["content"] != nil:
			_, _ = w.Write([]byte(`{"tokens":[1,2,3,4,5,6,7]}`))
		case r.URL.Path == "/tokenize":
			_, _ = w.Write([]byte(`{"count":11,"max_model_len":4096}`))
		case r.URL.Path == "/props":
			_, _ = w.Write([]byte(`{"total_slots":2,"default_generation_settings":{"n_ctx":8192}}`))
		default:
			http.NotFound(w, r)
		}
	}))
	defer srv.Close()
	ctx, cancel := context.WithTimeout(context.Background(), 10*time.Second)
	defer cancel()
	chat := client.New(client.Config{BaseURL: srv.URL + "/v1"})
	msgs := []prompts.Message{{Role: "user", Content: "hi"}}
	cases := []struct {
		def        *Definition
		want       int
		ids, slots bool
	}{{VLLM, 11, false, false}, {LMCache, 11, false, false}, {LlamaCpp, 7, true, true}}
	for _, c := range cases {
		s := c.def.Connect(chat, 5*time.Second)
		n, err := s.TokenCounter("m").CountTokens(ctx, msgs)
		if err != nil || n != c.want {
			t.Errorf("%s: count %d, %v; want %d", c.def.Name, n, err, c.want)
		}
		if got := s.TokenIDs() != nil; got != c.ids {
			t.Errorf("%s: token ids available %v", c.def.Name, got)
		}
		z, ok, err := s.Sizes(ctx)
		if ok != c.slots || (ok && (err != nil || z.Slots != 2 || z.SlotContext != 8192)) {
			t.Errorf("%s: sizes %+v, %v, %v", c.def.Name, z, ok, err)
		}
	}
	if !strings.Contains(strings.Join(paths, " "), "/apply-template") {
		t.Errorf("llama.cpp counting did not render the chat template: %v", paths)
	}
}

func TestCapacitySetup(t *testing.T) {
	s := LlamaCpp.Resolve(capacity.Figures{Source: "scenario", GPUKVTokens: 16384, CPUOffloadGiB: 0.5})
	if s.Topology != capacity.SingleSlot || s.HostTierUnit != "MiB" || s.GPUKVTokens != 16384 || s.GPUKVTokensSource != "scenario" {
		t.Fatalf("llama.cpp setup %+v", s)
	}
	if s := VLLM.Resolve(); s.Topology != capacity.SharedPool {
		t.Fatalf("vLLM setup %+v", s)
	}
	if !VLLM.Needs(metrics.ExternalPrefixHits) || LlamaCpp.Needs(metrics.ExternalPrefixHits) {
		t.Fatal("only counter-attributed engines need the hit counters")
	}
}

// TestEnginesDocListsEveryEngine: docs/engines.md's table has a row per definition.
func TestEnginesDocListsEveryEngine(t *testing.T) {
	data, err := os.ReadFile("../../docs/engines.md")
	if err != nil {
		t.Fatal(err)
	}
	for _, d := range All() {
		if !strings.Contains(string(data), "\n| `"+d.Name+"`") {
			t.Errorf("docs/engines.md's table has no row for %s", d.Name)
		}
	}
}

// TestIsolationFields: a value goes in the engine's isolation field only where the field
// keeps every tier apart (vLLM's cache_salt); an engine whose field leaks a tier (LMCache's
// V1 connector ignores the salt) or that has none gets no field, and says why in Leaks.
func TestIsolationFields(t *testing.T) {
	want := map[string]string{"vllm": "cache_salt"}
	for _, d := range All() {
		got := d.IsolationFields("s1")
		if field := want[d.Name]; field != "" {
			if len(got) != 1 || got[field] != "s1" {
				t.Errorf("%s: %v, want %s = s1", d.Name, got, field)
			}
		} else if got != nil {
			t.Errorf("%s: %v, want no field", d.Name, got)
		}
		if d.IsolationFields("") != nil {
			t.Errorf("%s: a field for no value", d.Name)
		}
		if i := d.Isolation; i != nil && (i.Field == "" || i.Isolates == "" || got == nil && i.Leaks == "") {
			t.Errorf("%s: incomplete isolation %+v", d.Name, i)
		}
	}
	if l := LMCache.Isolation; l == nil || !strings.Contains(l.Leaks, "#2878") {
		t.Errorf("lmcache: %+v", l)
	}
}

// TestTokenIDsNeedTheIDs: a count-dialect /tokenize whose tokens do not match its count
// cannot say which prompts share a prefix, so its ids are refused; a full answer is taken,
// for a chat (the messages sent) and for a plain prompt.
func TestTokenIDsNeedTheIDs(t *testing.T) {
	answer := `{"count": 3, "tokens": [7, 8, 9]}`
	var got []map[string]any
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		var body map[string]any
		_ = json.NewDecoder(r.Body).Decode(&body)
		got = append(got, body)
		w.Write([]byte(answer))
	}))
	defer srv.Close()
	def, _ := ByName("vllm")
	s := def.Connect(client.New(client.Config{BaseURL: srv.URL + "/v1"}), time.Second)
	ids, err := s.ChatTokenIDs(context.Background(), "m", []prompts.Message{{Role: "user", Content: "hi"}})
	if err != nil || !slices.Equal(ids, []int{7, 8, 9}) || got[0]["messages"] == nil || got[0]["model"] != "m" {
		t.Fatalf("chat: %v %v (sent %v)", ids, err, got[0])
	}
	ids, err = s.TextTokenIDs(context.Background(), "m", "hi")
	if err != nil || len(ids) != 3 || got[1]["prompt"] != "hi" {
		t.Fatalf("text: %v %v (sent %v)", ids, err, got[1])
	}
	answer = `{"count": 3}`
	if _, err := s.TextTokenIDs(context.Background(), "m", "hi"); err == nil || !strings.Contains(err.Error(), "0 token ids for a count of 3") {
		t.Errorf("a count without ids: %v", err)
	}
}

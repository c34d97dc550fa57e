package main

import (
	"context"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// pinned is a dialect at version whose families are pinned to fixed values (the sim's
// metric_values fault): their counters never move, whatever the requests do.
func pinned(name, version string, families ...string) func(*sim.Profile) {
	return versioned(name, version, func(p *sim.Profile) {
		p.MetricValues = map[string]float64{}
		for _, f := range families {
			p.MetricValues[f] = 1000
		}
	})
}

// TestConservationPerEngine: in each engine family's normal replay the tier split adds up;
// where a counter sticks, the parts no longer make the prompt and the verdict gets a
// counters_disagree finding naming both sides with their numbers, while the split stays in
// the record.
func TestConservationPerEngine(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	for _, tc := range []struct {
		backend string
		profile func(*sim.Profile)
		// sides are words both sides of the disagreement name.
		sides []string
	}{
		// The GPU hit counter and the prompt tokens by source stick: usage's cached tokens
		// have no third source, and GPU 0 + host + recomputed 0 falls short of the prompt.
		{"vllm", pinned(sim.DialectVLLM, "", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_by_source_total"),
			[]string{"recomputed 0 (the computed-prompt-token counter)", "usage's 1500 prompt tokens"}},
		{"lmcache", pinned(sim.DialectLMCache, "", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_by_source_total"),
			[]string{"GPU 0 + host", "usage's 1500 prompt tokens"}},
		{"kvbm", pinned(sim.DialectKVBM, "", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_by_source_total"),
			[]string{"GPU 0 + host", "usage's 1500 prompt tokens"}},
		// The prompt-token counter sticks: the recomputed tokens read as minus the cached.
		{"sglang", pinned(sim.DialectSGLang, "", "sglang:prompt_tokens_total"),
			[]string{"(the prompt-token counter less the cached-token counter)", "usage's 1500 prompt tokens"}},
		{"trtllm", pinned(sim.DialectTRTLLM, sim.TRTLLMTierSplit, "trtllm_prompt_cached_tokens_total"),
			[]string{"recomputed 1500 (the prompt-token counter less the cached-token counter)", "usage's 1500 prompt tokens"}},
		// No host cache: the replay recomputes all but the common prefix, and the computed
		// prompt tokens counter sticks.
		{"llamacpp", withoutHostCache(pinned(sim.DialectLlamaCpp, "", "llamacpp:prompt_tokens_total")),
			[]string{"recomputed 0 (the computed-prompt-token counter)", "usage's 1500 prompt tokens"}},
	} {
		t.Run(tc.backend, func(t *testing.T) {
			_, clean, _ := engineRun(t, tc.backend, versioned(tc.backend, versionOf(tc.backend), nil), nil)
			if split := tierSplitOf(t, clean); split["adds_up"] != true {
				t.Fatalf("a clean replay's tiers do not add up: %v", split)
			}
			if d := diagnosesOf(clean, "counters_disagree"); len(d) > 0 {
				t.Fatalf("a clean replay has counters_disagree: %v", d)
			}

			_, req, _ := engineRun(t, tc.backend, tc.profile, nil)
			split := tierSplitOf(t, req)
			if split["adds_up"] != false {
				t.Fatalf("stuck counters' tiers %v: want them not to add up", split)
			}
			d := diagnosesOf(req, "counters_disagree")
			if len(d) == 0 {
				v, why := verdictOf(t, req)
				t.Fatalf("no counters_disagree finding (verdict %s: %s)", v, why)
			}
			for _, s := range tc.sides {
				if !strings.Contains(d[0], s) {
					t.Errorf("finding %q does not name %q", d[0], s)
				}
			}
			if c := crossChecks(req)["tiers_vs_prompt_tokens"]; c == nil || c["agrees"] != false {
				t.Errorf("cross-check %v", c)
			}
		})
	}
}

// withoutHostCache is more with llama-server's host-RAM prompt cache off (--cache-ram 0).
func withoutHostCache(more func(*sim.Profile)) func(*sim.Profile) {
	return func(p *sim.Profile) {
		more(p)
		p.CPUOffloadGiB = 0
	}
}

// versionOf is the sim version of backend's dialect (named as the backend) that
// TestConservationPerEngine runs: the default, but TensorRT-LLM's with tier counters.
func versionOf(backend string) string {
	if backend == "trtllm" {
		return sim.TRTLLMTierSplit
	}
	return ""
}

// tierSplitOf is the replay verdict's tier split.
func tierSplitOf(t *testing.T, req map[string]any) map[string]any {
	t.Helper()
	s, ok := req["verdict"].(map[string]any)["tier_split"].(map[string]any)
	if !ok {
		t.Fatalf("the replay's verdict has no tier_split: %v", req["verdict"])
	}
	return s
}

// diagnosesOf are the details of the replay verdict's diagnosis entries of cause.
func diagnosesOf(req map[string]any, cause string) []string {
	var out []string
	list, _ := req["verdict"].(map[string]any)["diagnosis"].([]any)
	for _, d := range list {
		if m := d.(map[string]any); m["cause"] == cause {
			out = append(out, m["detail"].(string))
		}
	}
	return out
}

// TestConservationOnConsole: the console shows the replay's tier split as a table, and
// says so when its parts do not add up, with the finding.
func TestConservationOnConsole(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: pinned(sim.DialectVLLM, "", "vllm:prefix_cache_hits_total", "vllm:prompt_tokens_by_source_total")})
	_, stderr, code := runJSON(t, context.Background(), "run", engineScenario(t, "vllm"), "--endpoint", srv.URL()+"/v1", "--out", t.TempDir())
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	i := strings.Index(stderr, "  tier split ")
	if i < 0 {
		t.Fatalf("no tier split table:\n%s", stderr)
	}
	table := strings.SplitN(stderr[i:], "\n", 3)
	if strings.Join(strings.Fields(table[0]), " ") != "tier split gpu host disk remote recomputed sum prompt" ||
		!strings.HasPrefix(strings.Join(strings.Fields(table[1]), " "), "tokens 0 1232 absent absent 0 1232 1500 DOES NOT ADD UP") {
		t.Fatalf("table:\n%s\n%s", table[0], table[1])
	}
	if !strings.Contains(stderr, "diagnosis counters_disagree: tiers_vs_prompt_tokens: GPU 0 + host 1232") {
		t.Fatalf("no finding on the console:\n%s", stderr)
	}
}

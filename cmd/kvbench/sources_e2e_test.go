package main

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// The tests below cover issue 30 items 4, 5 and 7 end to end: vLLM's tiering spec serving a
// reload from its fs tier through the CPU tier, the five sources of cached tokens by source,
// and a label value kvbench's model does not know.

// sourcesRun is engineRun that also returns the console (stderr) and the replay's counters.
func sourcesRun(t *testing.T, backend string, extra func(*sim.Profile)) (req map[string]any, console string) {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: extra})
	out := t.TempDir()
	args := []string{"run", engineScenario(t, backend), "--endpoint", srv.URL() + "/v1", "--out", out}
	for _, u := range srv.MetricsURLs() {
		args = append(args, "--metrics", u)
	}
	_, stderr, code := runJSON(t, context.Background(), args...)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-02-replay.json")
	return art["requests"].([]any)[0].(map[string]any), stderr
}

// absentCounter fails unless the replay recorded counter name with no reading on either side.
func absentCounter(t *testing.T, req map[string]any, name string) {
	t.Helper()
	c, _ := req["counters"].(map[string]any)["counters"].(map[string]any)[name].(map[string]any)
	if c != nil && (c["before"] != nil || c["after"] != nil || c["delta"] != nil) {
		t.Errorf("%s = %v, want absent (null), never 0", name, c)
	}
}

// Item 4. A reload the fs tier served, promoted into the CPU tier on its way to the GPU, is
// a reload whose disk share is named from the tiering read bytes.
func TestEngineVLLMTieredDiskThroughHost(t *testing.T) {
	_, req, warnings := engineRun(t, "vllm", versioned(sim.DialectVLLM, sim.VLLMTiered, nil), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "bytes came from the disk tier, staged through the host tier") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	staged, src, _ := counterOf(t, req, "disk_to_host_bytes")
	load, _, _ := counterOf(t, req, "load_bytes")
	if staged == nil || staged.(float64) <= 0 || staged != load || !strings.Contains(src, "vllm:kv_offload_tiering_read_bytes_total") {
		t.Fatalf("disk->host bytes %v from %q, load bytes %v", staged, src, load)
	}
	if !strings.Contains(warnings, "tiering spec serves its secondary tiers through the CPU tier") {
		t.Fatalf("warnings: %s", warnings)
	}
	absentCounter(t, req, "prompt_tokens_cached_host") // the fs tier's hits are disk, not a host 0
}

// Item 5. LMCache names no tier: its hits are external_unspecified, the host source is never
// served, and no note says the host moved by 0.
func TestEngineLMCacheBySourceUnspecified(t *testing.T) {
	for _, offset := range []int64{0, 1000} {
		bySource := versioned(sim.DialectLMCache, sim.LMCacheBySource, func(p *sim.Profile) { p.CounterOffset = offset })
		_, req, _ := engineRun(t, "lmcache", bySource, nil)
		v, why := verdictOf(t, req)
		if v != "cpu_reload" || strings.Contains(why, "moved by") {
			t.Fatalf("offset %d: verdict %s: %s", offset, v, why)
		}
		absentCounter(t, req, "prompt_tokens_cached_host")
		absentCounter(t, req, "prompt_tokens_cached_disk")
		if offset > 0 && !strings.Contains(why, "external tokens came from a connector that does not say which of its tiers served them") {
			t.Errorf("a server that has run a while has the source's series before the replay: %s", why)
		}
	}
}

// Item 7. A source kvbench's model does not know is recorded as unattributed with its
// value named, said on the console, and calls no tier 0.
func TestEngineVLLMUnknownSource(t *testing.T) {
	req, console := sourcesRun(t, "vllm", versioned(sim.DialectVLLM, sim.VLLMNewSource, nil))
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	list, _ := req["counters"].(map[string]any)["unattributed"].([]any)
	if len(list) != 1 {
		t.Fatalf("unattributed %v", list)
	}
	u := list[0].(map[string]any)
	ext, _, _ := counterOf(t, req, "external_prefix_hits")
	if u["family"] != "vllm:prompt_tokens_cached_by_source_total" || u["label"] != "source" || u["value"] != "cxl" || u["unit"] != "tokens" ||
		u["delta"] == nil || u["delta"] != ext || u["before"] != nil {
		t.Fatalf("unattributed %v (external hits %v)", u, ext)
	}
	want := "unattributed: vllm:prompt_tokens_cached_by_source_total source `cxl`: "
	if !strings.Contains(console, want) || !strings.Contains(console, "tokens, a source kvbench's model of vllm does not know") {
		t.Fatalf("console lacks %q:\n%s", want, console)
	}
	absentCounter(t, req, "prompt_tokens_cached_host")

	// On a server that has run a while the series exists at preflight, which names it.
	_, _, warnings := engineRun(t, "vllm", versioned(sim.DialectVLLM, sim.VLLMNewSource, func(p *sim.Profile) { p.CounterOffset = 1000 }), nil)
	if !strings.Contains(warnings, `vllm:prompt_tokens_cached_by_source_total{source="cxl"} (1000 tokens so far): a source kvbench's model of vllm does not know`) {
		t.Fatalf("preflight warnings: %s", warnings)
	}
}

// `kvbench counters` on expositions written from upstream code: the fs tier's promotions,
// the five sources, and the values the model does not know.
func TestCountersSourcesAndTiers(t *testing.T) {
	dir := "../../harness/engine/testdata/dialects/"
	for _, tc := range []struct {
		file, backend string
		present       map[string]float64
		absent        []string
		unattributed  []string
	}{
		{"vllm-tiered-fs.prom", "vllm", map[string]float64{"disk_to_host_bytes": 253755392, "disk_store_bytes": 259522560, "prompt_tokens_cached_disk": 11264},
			[]string{"prompt_tokens_cached_host", "prompt_tokens_cached_p2p", "prompt_tokens_cached_external_unspecified"}, nil},
		{"lmcache-by-source.prom", "lmcache", map[string]float64{"prompt_tokens_cached_external_unspecified": 11264, "prompt_tokens_cached_device": 256},
			[]string{"prompt_tokens_cached_host", "prompt_tokens_cached_disk"}, nil},
		{"vllm-new-source.prom", "vllm", map[string]float64{"prompt_tokens_cached_device": 256},
			[]string{"prompt_tokens_cached_host", "load_bytes", "store_bytes"}, []string{"transfer_type=CPU_to_CXL 4096 bytes", "source=cxl 11264 tokens"}},
	} {
		t.Run(tc.file, func(t *testing.T) {
			var out, errb strings.Builder
			if err := run(context.Background(), []string{"counters", dir + tc.file, "--backend", tc.backend}, &out, &errb); err != nil {
				t.Fatalf("%v: %s", err, errb.String())
			}
			var got struct {
				counterReadings
				Unattributed []struct {
					Label, Value, Unit string
					Amount             float64
				} `json:"unattributed"`
			}
			if err := json.Unmarshal([]byte(out.String()), &got); err != nil {
				t.Fatalf("output is not JSON: %v", err)
			}
			for name, v := range tc.present {
				if r := got.Counters[name]; !r.Present || r.Value == nil || *r.Value != v {
					t.Errorf("%s = %+v, want %v", name, r, v)
				}
			}
			for _, name := range tc.absent {
				if r := got.Counters[name]; r.Present || r.Value != nil {
					t.Errorf("%s = %+v, want absent (null)", name, r)
				}
			}
			var seen []string
			for _, u := range got.Unattributed {
				seen = append(seen, fmt.Sprintf("%s=%s %g %s", u.Label, u.Value, u.Amount, u.Unit))
			}
			if strings.Join(seen, "; ") != strings.Join(tc.unattributed, "; ") {
				t.Errorf("unattributed %v, want %v", seen, tc.unattributed)
			}
		})
	}
}

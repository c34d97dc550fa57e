package sim

import (
	"bytes"
	"encoding/json"
	"io"
	"net/http"
	"slices"
	"strings"
	"testing"
)

// TestDialectFamilies: each dialect serves its engine's families and none of another's, from
// the same counters.
func TestDialectFamilies(t *testing.T) {
	p, err := LoadProfile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	c := newCounters()
	c.PromptTokens, c.PromptTokensLocalCacheHit, c.PromptTokensExternalKVTransfer, c.PromptTokensCached = 6000, 256, 1232, 1488
	c.ExternalPrefixCacheHits, c.ExternalPrefixCacheQueries, c.GPUToCPUBytes = 1232, 5744, 4000*2048
	cases := []struct {
		dialect   string
		want, not []string
	}{
		{DialectVLLM, []string{"vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"}, []string{"lmcache:", "sglang:", "trtllm_"}},
		{DialectLMCache, []string{`lmcache:num_hit_tokens_total{model_name="tiny-sim",role="worker",worker_id="1"} 1232.0`, "vllm:external_prefix_cache_hits_total"}, []string{"sglang:"}},
		{DialectSGLang, []string{`sglang:cached_tokens_total{cache_source="host",model_name="tiny-sim"} 1232.0`, "sglang:load_back_tokens_total{model_name=\"tiny-sim\"} 1232.0", "sglang:evicted_tokens_total{model_name=\"tiny-sim\"} 4000.0"}, []string{"vllm:", "engine="}},
		{DialectTRTLLM, []string{"trtllm_prompt_cached_tokens_total{engine_type=\"trtllm\",model_name=\"tiny-sim\"} 1488.0"}, []string{"vllm:", "sglang:", "host"}},
		{DialectKVBM, []string{"vllm:external_prefix_cache_hits_total"}, []string{"kvbm_", "kv_offloading_backend=\"native\""}},
	}
	for _, tc := range cases {
		q := p
		q.Dialect, q.TensorParallelSize = tc.dialect, 2
		if tc.dialect != DialectVLLM {
			q.FlatOffloadMetrics, q.LabelledOffloadMetrics = false, false
		}
		var b bytes.Buffer
		if err := WriteMetrics(&b, q, c); err != nil {
			t.Fatal(err)
		}
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: missing %s", tc.dialect, w)
			}
		}
		for _, n := range tc.not {
			if strings.Contains(b.String(), n) {
				t.Errorf("%s: serves %s", tc.dialect, n)
			}
		}
	}
	// KVBM's own URL counts blocks: 4000 stored tokens / 16 = 250 blocks.
	var b bytes.Buffer
	_ = WriteKVBMMetrics(&b, p, c)
	for _, w := range []string{"kvbm_offload_blocks_d2h 250.0", "kvbm_onboard_blocks_h2d 77.0", "kvbm_matched_tokens 1232.0", "kvbm_offload_blocks_h2d 0.0"} {
		if !strings.Contains(b.String(), w) {
			t.Errorf("kvbm: missing %s in\n%s", w, b.String())
		}
	}
	q := p
	q.Dialect = "tgi"
	if err := q.Validate(); err == nil || !strings.Contains(err.Error(), `dialect "tgi"`) {
		t.Errorf("unknown dialect accepted: %v", err)
	}
	if !slices.Contains(ProfileNames(), "sglang-hicache") || !slices.Contains(ProfileNames(), "kvbm") {
		t.Errorf("engine profiles missing: %v", ProfileNames())
	}
}

// TestSGLangDetailsOnlyWhenAsked: sglext.cached_tokens_details comes with the usage chunk of
// a request that asks, and never otherwise.
func TestSGLangDetailsOnlyWhenAsked(t *testing.T) {
	srv, err := Start(Options{Profile: "tiny", Override: func(p *Profile) { p.Dialect = DialectSGLang }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	prompt := strings.Repeat("the same words again and again ", 80)
	send := func(ask bool) string {
		body, _ := json.Marshal(map[string]any{"model": "tiny-sim", "stream": true, "max_tokens": 2,
			"stream_options":               map[string]bool{"include_usage": true},
			"messages":                     []map[string]string{{"role": "user", "content": prompt}},
			"return_cached_tokens_details": ask})
		resp, err := http.Post(srv.URL()+"/v1/chat/completions", "application/json", bytes.NewReader(body))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		out, _ := io.ReadAll(resp.Body)
		return string(out)
	}
	send(false)
	if out := send(false); strings.Contains(out, "sglext") {
		t.Fatalf("unasked details: %s", out)
	}
	out := send(true)
	if !strings.Contains(out, `"sglext":{"cached_tokens_details":{"device":`) || !strings.Contains(out, `"host":0`) {
		t.Fatalf("asked, got %s", out)
	}
}

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
	c.GPUEvictedBlocks = 250
	cases := []struct {
		dialect   string
		want, not []string
	}{
		{DialectVLLM, []string{"vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"}, []string{"lmcache:", "sglang:", "trtllm_"}},
		{DialectLMCache, []string{`lmcache:num_hit_tokens_total{model_name="kvbench/tiny-sim",role="worker",served_model_name="tiny-sim",worker_id="1"} 1232.0`, "vllm:external_prefix_cache_hits_total"}, []string{"sglang:"}},
		// At TP 2 the unlabelled radix families are both ranks' equal counts summed.
		{DialectSGLang, []string{`sglang:cached_tokens_total{cache_source="host",engine_type="unified",model_name="tiny-sim"} 1232.0`,
			`sglang:load_back_tokens_total{cache_type="HiRadixCache",pool="kv"} 2464.0`, `sglang:evicted_tokens_total{cache_type="HiRadixCache"} 8000.0`,
			`sglang:hicache_backup_tokens_total{cache_type="HiRadixCache",pool="kv"} 8000.0`},
			[]string{"vllm:", "engine=", "sglang:cache_config_info", `cache_source="total"`}},
		{DialectTRTLLM, []string{`trtllm_prompt_cached_tokens_total{engine_type="pytorch",model_name="tiny-sim"} 1488.0`, "trtllm_num_requests_running"}, []string{"vllm:", "sglang:", "cache_tier", "trtllm_generation_tokens_total"}},
		{DialectKVBM, []string{"vllm:external_prefix_cache_hits_total"}, []string{"kvbm_", "kv_offloading_backend=\"native\""}},
		{DialectLlamaCpp, []string{"llamacpp:prompt_tokens_total 0\n", "llamacpp:prompt_tokens_cached_total 1488\n"}, []string{"vllm:", "kv_cache_usage_ratio", "{"}},
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
				t.Errorf("%s: missing %s in\n%s", tc.dialect, w, b.String())
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
	if !strings.Contains(out, `"sglext":{"cached_tokens_details":{"device":`) || !strings.Contains(out, `"host":0}`) {
		t.Fatalf("asked, got %s", out) // no storage keys without a storage tier
	}
}

// versionOutput writes the exposition of dialect at version with the counters c.
func versionOutput(t *testing.T, dialect, version string, c Counters, more func(*Profile)) string {
	t.Helper()
	p, err := LoadProfile("tiny")
	if err != nil {
		t.Fatal(err)
	}
	p.Dialect, p.DialectVersion = dialect, version
	if dialect != DialectVLLM {
		p.FlatOffloadMetrics, p.LabelledOffloadMetrics = false, false
	}
	if more != nil {
		more(&p)
	}
	if err := p.Validate(); err != nil {
		t.Fatal(err)
	}
	var b bytes.Buffer
	if err := WriteMetrics(&b, p, c); err != nil {
		t.Fatal(err)
	}
	return b.String()
}

// TestDialectVersions: each version writes its upstream shape, and lazy families are
// declared without series (single process) or not at all (multiprocess) until first use.
func TestDialectVersions(t *testing.T) {
	fresh := newCounters()
	stored := newCounters()
	stored.GPUToCPUBytes, stored.GPUToCPUSize.Count, stored.PromptTokens, stored.PromptTokensCached = 4096, 1, 6000, 256
	multi := func(p *Profile) { p.MultiprocessExposition = true }
	cases := []struct {
		name, dialect, version string
		c                      Counters
		more                   func(*Profile)
		want, not              []string
	}{
		{"before metrics", DialectVLLM, VLLMBeforeMetrics, stored, nil, []string{`kv_offloading_backend="native"`}, []string{"vllm:kv_offload_"}},
		{"simple connector", DialectVLLM, VLLMSimpleOffload, stored, nil, []string{"vllm:external_prefix_cache_hits_total", `kv_offloading_size="0.015625"`}, []string{"vllm:kv_offload_"}},
		{"labelled, first store", DialectVLLM, VLLMLabelled, stored, nil,
			[]string{`transfer_type="GPU_to_CPU"`, "# TYPE vllm:kv_offload_total_bytes_total counter"}, []string{`transfer_type="CPU_to_GPU"`, "vllm:kv_offload_store_bytes_total", "recomputed"}},
		{"labelled, multiprocess, no transfer", DialectVLLM, VLLMLabelled, fresh, multi, []string{"vllm:prefix_cache_hits_total"}, []string{"vllm:kv_offload_"}},
		{"recomputed", DialectVLLM, VLLMRecomputed, stored, nil, []string{"vllm:prompt_tokens_recomputed_total{engine=\"0\",model_name=\"tiny-sim\"} 0.0"}, nil},
		{"flat eager", DialectVLLM, VLLMFlatEager, fresh, nil, []string{"vllm:kv_offload_load_bytes_total{engine=\"0\",model_name=\"tiny-sim\"} 0.0", `transfer_type="CPU_to_GPU"`}, []string{"allocation_failure"}},
		{"flat lazy, single process", DialectVLLM, VLLMFlatLazy, stored, nil,
			[]string{"vllm:kv_offload_store_bytes_total{", "# TYPE vllm:kv_offload_load_bytes_total counter", `transfer_type="CPU_to_GPU"`}, []string{"vllm:kv_offload_load_bytes_total{"}},
		{"flat lazy, multiprocess", DialectVLLM, VLLMFlatLazy, stored, multi,
			[]string{"vllm:kv_offload_store_bytes_total{", `vllm:kv_offload_total_bytes_total{engine="0",model_name="tiny-sim",transfer_type="CPU_to_GPU"} 0.0`}, []string{"vllm:kv_offload_load_bytes_total"}},
		{"diagnostics", DialectVLLM, VLLMDiagnostics, stored, multi, []string{"vllm:kv_offload_store_bytes_total{"}, []string{"allocation_failure", "lookup_sync"}},
		{"lmcache no role", DialectLMCache, LMCacheNoRole, stored, nil, []string{`lmcache:num_hit_tokens_total{model_name="tiny-sim",worker_id="0"}`}, []string{"role="}},
		{"lmcache both roles", DialectLMCache, LMCacheBothRoles, stored, func(p *Profile) { p.TensorParallelSize = 2 },
			[]string{`role="scheduler",served_model_name="tiny-sim",worker_id="0"`, `role="worker",served_model_name="tiny-sim",worker_id="1"`}, nil},
		{"lmcache multi-process", DialectLMCache, LMCacheMultiProcess, stored, nil,
			[]string{`kv_offloading_backend="lmcache"`, `kv_offloading_size="0.015625"`, "vllm:lmcache_mp_lookup_duration_seconds"}, []string{"lmcache:"}},
		{"sglang unlabelled", DialectSGLang, SGLangUnlabelled, stored, nil,
			[]string{`sglang:cached_tokens_total{model_name="tiny-sim"} 256.0`, `sglang:prompt_tokens_total{model_name="tiny-sim"}`}, []string{"cache_source", "hicache_", "engine_type=\"unified\",model_name=\"tiny-sim\"} 6000", "# TYPE sglang:load_back"}},
		{"sglang HiCache off", DialectSGLang, SGLangCacheSource, stored, func(p *Profile) { p.CPUOffloadGiB = 0 },
			[]string{`cache_source="total"`, "sglang:cache_config_info{"}, []string{`cache_source="device"`, "load_back", "HiRadixCache"}},
		{"sglang storage and swa", DialectSGLang, "", stored, func(p *Profile) { p.StorageBackend, p.SlidingWindowPool = "HiCacheFile", true },
			[]string{`sglang:backuped_tokens_total{`, `storage_backend="HiCacheFile"`, `pool="swa"`, `sglang:prefill_effective_tokens_total{engine_type="unified",mode="storage_hit",model_name="tiny-sim"} 0.0`}, nil},
		{"trtllm tier split", DialectTRTLLM, TRTLLMTierSplit, stored, nil,
			[]string{`trtllm_prompt_cache_hit_tokens_total{cache_level="0",cache_tier="gpu",engine_type="pytorch",model_name="tiny-sim"} 0.0`, `cache_tier="host"`}, nil},
		{"trtllm before the first request", DialectTRTLLM, TRTLLMTierSplit, fresh, nil, []string{"trtllm_prompt_cached_tokens_total{"}, []string{"cache_tier", "trtllm_prompt_tokens_total"}},
		{"llama.cpp before the cached counter", DialectLlamaCpp, LlamaCppNoCachedCounter, stored, nil, []string{"llamacpp:prompt_tokens_total"}, []string{"prompt_tokens_cached", "kv_cache"}},
		{"llama.cpp with KV gauges", DialectLlamaCpp, LlamaCppKVGauges, stored, nil, []string{"llamacpp:kv_cache_usage_ratio 0\n"}, []string{"prompt_tokens_cached"}},
		{"llama.cpp after long uptime", DialectLlamaCpp, "", stored, func(p *Profile) { p.CounterOffset = 1234561 },
			[]string{"llamacpp:prompt_tokens_cached_total 1.23482e+06\n", "llamacpp:prompt_tokens_total 1.23456e+06\n", "llamacpp:requests_processing 0\n"}, nil},
	}
	for _, tc := range cases {
		t.Run(tc.name, func(t *testing.T) {
			out := versionOutput(t, tc.dialect, tc.version, tc.c, tc.more)
			for _, w := range tc.want {
				if !strings.Contains(out, w) {
					t.Errorf("missing %s in\n%s", w, out)
				}
			}
			for _, n := range tc.not {
				if strings.Contains(out, n) {
					t.Errorf("serves %s in\n%s", n, out)
				}
			}
			// Multiprocess: every declared family has a series.
			if tc.dialect == DialectSGLang || tc.dialect == DialectTRTLLM || tc.more != nil && strings.Contains(tc.name, "multiprocess") {
				for _, f := range familyNames([]byte(out)) {
					if !strings.Contains(out, "\n"+f+"{") && !strings.Contains(out, "\n"+f+"_") && !strings.Contains(out, "\n"+f+" ") {
						t.Errorf("%s declared without a series", f)
					}
				}
			}
		})
	}
	if _, err := ParseProfile("x.toml", []byte("model = \"m\"\nmax_model_len = 16\nnum_gpu_blocks = 4\nprefill_tokens_per_second = 1\ndecode_tokens_per_second = 1\ndialect = \"sglang\"\ndialect_version = \"d3\"\n")); err == nil || !strings.Contains(err.Error(), "dialect_version") {
		t.Errorf("bad version accepted: %v", err)
	}
}

// TestKVBMDiskTier: the tier as KVBM's disk tier: v1 onboards disk->GPU, v2 stages
// disk->host->GPU and counts both.
func TestKVBMDiskTier(t *testing.T) {
	c := newCounters()
	c.ExternalPrefixCacheHits, c.GPUToCPUBytes = 1600, 4000*2048
	for _, tc := range []struct {
		version   string
		want, not []string
	}{
		{KVBMv1, []string{"kvbm_onboard_blocks_d2d 100.0", "kvbm_onboard_blocks_h2d 0.0", "kvbm_offload_blocks_h2d 250.0"}, []string{"onboard_blocks_d2h"}},
		{KVBMv2, []string{"kvbm_onboard_blocks_d2h 100.0", "kvbm_onboard_blocks_h2d 100.0", "kvbm_onboard_blocks_d2d 0.0"}, nil},
	} {
		p, _ := LoadProfile("tiny")
		p.Dialect, p.DialectVersion, p.KVBMTier = DialectKVBM, tc.version, KVBMTierDisk
		var b bytes.Buffer
		_ = WriteKVBMMetrics(&b, p, c)
		for _, w := range tc.want {
			if !strings.Contains(b.String(), w) {
				t.Errorf("%s: missing %s in\n%s", tc.version, w, b.String())
			}
		}
		for _, n := range tc.not {
			if strings.Contains(b.String(), n) {
				t.Errorf("%s: serves %s", tc.version, n)
			}
		}
	}
}

// TestTRTLLMRoutes: trtllm-serve answers Prometheus text on /prometheus/metrics and JSON
// iteration stats on /metrics.
func TestTRTLLMRoutes(t *testing.T) {
	srv, err := Start(Options{Profile: "tiny", Override: func(p *Profile) { p.Dialect = DialectTRTLLM }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	if got := srv.MetricsURLs(); len(got) != 1 || !strings.HasSuffix(got[0], "/prometheus/metrics") {
		t.Fatalf("metrics URLs %v", got)
	}
	for path, want := range map[string]string{"/prometheus/metrics": "# TYPE trtllm_kv_cache_max_blocks gauge", "/metrics": `"kvCacheStats":{`} {
		resp, err := http.Get(srv.URL() + path)
		if err != nil {
			t.Fatal(err)
		}
		body, _ := io.ReadAll(resp.Body)
		resp.Body.Close()
		if !strings.Contains(string(body), want) {
			t.Errorf("%s: %s", path, body)
		}
	}
}

// TestLlamaCppRoutes: llama-server's token routes: /apply-template renders the chat and
// /tokenize {content} counts it as the chat endpoint does; /props has one slot.
func TestLlamaCppRoutes(t *testing.T) {
	srv, err := Start(Options{Profile: "tiny", Override: func(p *Profile) { p.Dialect = DialectLlamaCpp }})
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	post := func(path string, in any, out any) {
		b, _ := json.Marshal(in)
		resp, err := http.Post(srv.URL()+path, "application/json", bytes.NewReader(b))
		if err != nil {
			t.Fatal(err)
		}
		defer resp.Body.Close()
		if err := json.NewDecoder(resp.Body).Decode(out); err != nil {
			t.Fatal(err)
		}
	}
	msgs := []map[string]string{{"role": "user", "content": "hello there, how are you"}}
	var tmpl struct{ Prompt string }
	post("/apply-template", map[string]any{"messages": msgs}, &tmpl)
	var ids struct{ Tokens []int }
	post("/tokenize", map[string]any{"content": tmpl.Prompt, "add_special": true}, &ids)
	var counted struct{ Count int }
	post("/tokenize", map[string]any{"messages": msgs}, &counted)
	if len(ids.Tokens) == 0 || len(ids.Tokens) != counted.Count {
		t.Fatalf("template %q: %d ids, chat counts %d", tmpl.Prompt, len(ids.Tokens), counted.Count)
	}
	resp, err := http.Get(srv.URL() + "/props")
	if err != nil {
		t.Fatal(err)
	}
	var props struct {
		TotalSlots int `json:"total_slots"`
	}
	_ = json.NewDecoder(resp.Body).Decode(&props)
	resp.Body.Close()
	if props.TotalSlots != 1 {
		t.Fatalf("props %+v", props)
	}
}

// TestSGLangRadixRanks: every tensor-parallel rank's tree writes the radix families. The
// newest collector labels each rank's series (the same tokens, bytes a shard each) and counts
// storage hits as the literal "storage"; before it the ranks' counts land in one series that
// the multiprocess registry sums, so a token count reads TP x.
func TestSGLangRadixRanks(t *testing.T) {
	c := newCounters()
	c.ExternalPrefixCacheHits, c.PromptTokensExternalKVTransfer, c.GPUEvictedBlocks = 1024, 1024, 300
	c.CPUToGPUBytes, c.CPUToGPUSize.Count, c.CPUToGPUSeconds = 2000, 1, 0.5
	tp2 := func(p *Profile) { p.TensorParallelSize, p.StorageBackend = 2, "HiCacheFile" }
	out := versionOutput(t, DialectSGLang, SGLangRankLabels, c, tp2)
	for _, w := range []string{
		`sglang:load_back_tokens_total{cache_type="UnifiedRadixCache",dp_rank="0",pool="kv",pp_rank="0",tp_rank="0"} 1024.0`,
		`sglang:load_back_tokens_total{cache_type="UnifiedRadixCache",dp_rank="0",pool="kv",pp_rank="0",tp_rank="1"} 1024.0`,
		`sglang:load_back_bytes_total{cache_type="UnifiedRadixCache",dp_rank="0",pp_rank="0",tp_rank="1"} 1000.0`,
		`sglang:evicted_tokens_total{cache_type="UnifiedRadixCache",dp_rank="0",pp_rank="0",tp_rank="0"}`,
		`sglang:load_back_duration_seconds_count{cache_type="UnifiedRadixCache",dp_rank="0",pp_rank="0",tp_rank="1"} 1.0`,
		`cache_source="storage",`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("rank-labels: missing %s in\n%s", w, out)
		}
	}
	if strings.Contains(out, "storage_HiCacheFile") {
		t.Errorf("rank-labels counts storage hits as the literal storage:\n%s", out)
	}
	out = versionOutput(t, DialectSGLang, SGLangPoolSplit, c, tp2)
	for _, w := range []string{
		`sglang:load_back_tokens_total{cache_type="HiRadixCache",pool="kv"} 2048.0`,
		`sglang:load_back_bytes_total{cache_type="HiRadixCache"} 2000.0`,
		`cache_source="storage_HiCacheFile"`,
	} {
		if !strings.Contains(out, w) {
			t.Errorf("pool-split at TP 2: missing %s in\n%s", w, out)
		}
	}
}

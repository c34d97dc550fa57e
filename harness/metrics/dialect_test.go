package metrics_test

import (
	"strings"
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// TestRegexSelector: =~ matches whole label values (anchored), sums every matching series,
// and a label matcher of "" selects the series without the label.
func TestRegexSelector(t *testing.T) {
	text := `# TYPE sglang:cached_tokens_total counter
sglang:cached_tokens_total{cache_source="device",model_name="m"} 100
sglang:cached_tokens_total{cache_source="storage_HiCacheFile",model_name="m"} 30
sglang:cached_tokens_total{cache_source="storage_MooncakeStore",model_name="m"} 12
sglang:cached_tokens_total{cache_source="xstorage_y",model_name="m"} 1000
# TYPE sglang:load_back_tokens_total counter
sglang:load_back_tokens_total{cache_type="HiRadixCache",pool="kv"} 42
sglang:load_back_tokens_total{cache_type="HiRadixCache",pool="swa"} 7
`
	exp := mustParse(t, text, "regex")
	p := Profile{Name: "t", Counters: map[Counter][]Selector{
		CachedFromDisk: MustSelectors(`sglang:cached_tokens_total{cache_source=~"storage_.*"}`),
		ReloadTokens:   MustSelectors(`sglang:load_back_tokens_total{pool="kv"}`, `sglang:load_back_tokens_total{pool=""}`),
		CachedFromHost: MustSelectors(`sglang:load_back_tokens_total{pool=""}`),
	}}
	s := p.Snapshot(exp)
	if r := s.Counters[CachedFromDisk]; r.Value != 42 || r.Source != `sglang:cached_tokens_total{cache_source=~"storage_.*"}` {
		t.Errorf("storage by prefix = %+v, want 42 (anchored: xstorage_y is not a storage source)", r)
	}
	if r := s.Counters[ReloadTokens]; r.Value != 42 {
		t.Errorf("kv pool = %+v, want 42: swa tokens are another unit", r)
	}
	if r := s.Counters[CachedFromHost]; r.Present {
		t.Errorf(`pool="" = %+v, want absent: every series carries pool`, r)
	}
	if _, err := ParseSelector(`a{b=~"("}`); err == nil || !strings.Contains(err.Error(), "regular expression") {
		t.Errorf("bad regex error %v", err)
	}
}

// TestLazyZeroNeedsLiveFamily: a lazy family's missing series reads 0 only where the
// exposition shows the family live in this version: declared without series, split by the
// selector's label already, or a sibling served. A family of an older version that lacks the
// label stays absent.
func TestLazyZeroNeedsLiveFamily(t *testing.T) {
	lazy := Profile{Name: "t", LazyFamilies: map[string]bool{"x_total": true}, Counters: map[Counter][]Selector{
		ExternalPrefixHits: MustSelectors(`x_total{tier="host"}`),
		GPUPrefixHits:      MustSelectors(`x_total{tier="device"}`),
	}}
	cases := []struct {
		name, text string
		present    bool
		src        string
	}{
		{"declared, no series (single process)", "# HELP x_total X.\n# TYPE x_total counter\n# TYPE y gauge\ny 1\n", true, "(lazy, no series yet)"},
		{"split by the label, host not seen yet", "# TYPE x_total counter\nx_total{tier=\"device\"} 5\n", true, "(lazy, no series yet)"},
		{"older version without the label", "# TYPE x_total counter\nx_total 5\n", false, ""},
		// A tier the model does not know proves nothing of the tiers it knows.
		{"split by the label, only a tier the model does not know", "# TYPE x_total counter\nx_total{tier=\"cxl\"} 5\n", false, ""},
		{"not served at all", "# TYPE y gauge\ny 1\n", false, ""},
	}
	for _, c := range cases {
		r := lazy.Snapshot(mustParse(t, c.text, c.name)).Counters[ExternalPrefixHits]
		if r.Present != c.present || r.Value != 0 || !strings.Contains(r.Source, c.src) {
			t.Errorf("%s: %+v, want present=%v source with %q", c.name, r, c.present, c.src)
		}
	}

	// Multiprocess expositions never declare an unused family: only a live sibling makes the
	// missing series a 0.
	multi := Profile{Name: "t", LiveWhen: map[string][]Selector{"x_total": MustSelectors(`z_total{cache_type="HiRadixCache"}`)},
		Counters: map[Counter][]Selector{ReloadTokens: MustSelectors("x_total")}}
	if r := multi.Snapshot(mustParse(t, "# TYPE z_total counter\nz_total{cache_type=\"HiRadixCache\"} 9\n", "live")).Counters[ReloadTokens]; !r.Present || r.Value != 0 ||
		r.Source != `x_total (lazy, no series yet; live: z_total{cache_type="HiRadixCache"})` {
		t.Errorf("live sibling: %+v", r)
	}
	for _, text := range []string{"# TYPE z_total counter\nz_total{cache_type=\"RadixCache\"} 9\n", "# HELP x_total X.\n# TYPE x_total counter\n# TYPE y gauge\ny 1\n"} {
		if r := multi.Snapshot(mustParse(t, text, "dead")).Counters[ReloadTokens]; r.Present {
			t.Errorf("no live sibling in %q: %+v, want absent", text, r)
		}
	}
}

// TestRanksSumTheirSplits: LMCache's ranks count the same tokens (max over worker_id), but
// one rank may report part of its count under each role: the roles add up first.
func TestRanksSumTheirSplits(t *testing.T) {
	text := `# TYPE lmcache:num_hit_tokens_total counter
lmcache:num_hit_tokens_total{model_name="m",role="scheduler",worker_id="0"} 600
lmcache:num_hit_tokens_total{model_name="m",role="worker",worker_id="0"} 400
lmcache:num_hit_tokens_total{model_name="m",role="scheduler",worker_id="1"} 0
lmcache:num_hit_tokens_total{model_name="m",role="worker",worker_id="1"} 1000
`
	p := Profile{Name: "t", Counters: map[Counter][]Selector{ConnectorHitTokens: MustSelectors("lmcache:num_hit_tokens_total")},
		Parallelism: Parallelism{Shards: []string{"worker_id"}}}
	if r := p.Snapshot(mustParse(t, text, "roles")).Counters[ConnectorHitTokens]; r.Value != 1600 {
		t.Errorf("roles as replicas: %v (the max within each role, then their sum)", r.Value)
	}
	p.Parallelism.Within = []string{"role"}
	if r := p.Snapshot(mustParse(t, text, "roles")).Counters[ConnectorHitTokens]; r.Value != 1000 || r.Note != "" {
		t.Errorf("roles summed within a rank: %v (note %q), want 1000", r.Value, r.Note)
	}
}

// TestPrintResolution: llama.cpp prints counters at 6 significant digits; above 10^6 a
// reading carries the step it was rounded to, below it is exact. Python's repr and Go's
// shortest formatting are not mistaken for it.
func TestPrintResolution(t *testing.T) {
	p := Profile{Name: "t", Counters: map[Counter][]Selector{
		PromptTokensLocalCompute: MustSelectors("llamacpp:prompt_tokens_total"),
		GenerationTokens:         MustSelectors("llamacpp:tokens_predicted_total"),
		PromptTokensCached:       MustSelectors("llamacpp:prompt_tokens_cached_total"),
	}}
	cases := []struct {
		name, text            string
		compute, gen, cached  float64
		computeStep, cacheStp float64
	}{
		{"six digits", "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1.23457e+06\n# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 98765\n# TYPE llamacpp:prompt_tokens_cached_total counter\nllamacpp:prompt_tokens_cached_total 2.5e+07\n",
			1234570, 98765, 25000000, 10, 100},
		{"round values only", "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1e+06\n",
			1e6, 0, 0, 10, 0},
		{"python repr", "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1234567.0\n", 1234567, 0, 0, 0, 0},
		{"go shortest", "# TYPE llamacpp:prompt_tokens_total counter\nllamacpp:prompt_tokens_total 1.234567e+06\n# TYPE llamacpp:tokens_predicted_total counter\nllamacpp:tokens_predicted_total 2e+06\n",
			1234567, 2e6, 0, 0, 0},
	}
	for _, c := range cases {
		s := p.Snapshot(mustParse(t, c.text, c.name))
		r := s.Counters[PromptTokensLocalCompute]
		if r.Value != c.compute || r.Resolution != c.computeStep {
			t.Errorf("%s: compute %+v, want %v step %v", c.name, r, c.compute, c.computeStep)
		}
		if r := s.Counters[GenerationTokens]; r.Present && (r.Value != c.gen || r.Resolution != 0) {
			t.Errorf("%s: generation %+v, want %v exact", c.name, r, c.gen)
		}
		if r := s.Counters[PromptTokensCached]; r.Present && (r.Value != c.cached || r.Resolution != c.cacheStp) {
			t.Errorf("%s: cached %+v, want %v step %v", c.name, r, c.cached, c.cacheStp)
		}
	}
}

// TestSizesFromGauges: an engine without a cache config family reports its pool in tokens
// (SGLang), or in blocks with a tokens-per-block gauge (TensorRT-LLM).
func TestSizesFromGauges(t *testing.T) {
	sg := Profile{Name: "t", Gauges: map[Gauge][]Selector{
		GPUPoolTokens:  MustSelectors("sglang:max_total_num_tokens"),
		HostTierTokens: MustSelectors("sglang:hicache_host_total_tokens"),
	}}
	s := sg.Snapshot(mustParse(t, "# TYPE sglang:max_total_num_tokens gauge\nsglang:max_total_num_tokens{tp_rank=\"0\"} 506283\n# TYPE sglang:hicache_host_total_tokens gauge\nsglang:hicache_host_total_tokens{tp_rank=\"0\"} 826000\n", "sg"))
	if c := s.Cache; !c.Present || c.GPUKVTokens != 506283 || c.HostTierTokens != 826000 || !strings.Contains(c.Source, "sglang:max_total_num_tokens") {
		t.Errorf("sglang sizes %+v", c)
	}
	tr := Profile{Name: "t", BlockGauges: map[Gauge]bool{GPUPoolTokens: true}, Gauges: map[Gauge][]Selector{
		GPUPoolTokens:   MustSelectors("trtllm_kv_cache_max_blocks"),
		BlockSizeTokens: MustSelectors("trtllm_kv_cache_tokens_per_block"),
	}}
	s = tr.Snapshot(mustParse(t, "# TYPE trtllm_kv_cache_max_blocks gauge\ntrtllm_kv_cache_max_blocks 4000\n# TYPE trtllm_kv_cache_tokens_per_block gauge\ntrtllm_kv_cache_tokens_per_block 32\n", "tr"))
	if c := s.Cache; !c.Present || c.GPUKVTokens != 128000 || c.BlockSize != 32 {
		t.Errorf("trtllm sizes %+v", c)
	}
	s = tr.Snapshot(mustParse(t, "# TYPE trtllm_kv_cache_max_blocks gauge\ntrtllm_kv_cache_max_blocks 4000\n", "tr"))
	if g := s.Gauges[GPUPoolTokens]; g.Present || g.Unreadable == "" || s.Cache.Present {
		t.Errorf("blocks without a block size: %+v, cache %+v", g, s.Cache)
	}
}

// TestKVCacheSizeTokens: vLLM's kv_cache_size_tokens label is the pool where served (a
// hybrid model's block count times block size overstates it).
func TestKVCacheSizeTokens(t *testing.T) {
	p := Profile{Name: "t", CacheInfo: "vllm:cache_config_info"}
	text := `# TYPE vllm:cache_config_info gauge
vllm:cache_config_info{block_size="16",engine="0",kv_cache_size_tokens="180000",num_gpu_blocks="15360"} 1.0
vllm:cache_config_info{block_size="16",engine="1",kv_cache_size_tokens="None",num_gpu_blocks="100"} 1.0
`
	c := p.Snapshot(mustParse(t, text, "hybrid")).Cache
	if c.GPUKVTokens != 180000+1600 || c.Engines[0].GPUKVTokens != 180000 {
		t.Errorf("pool %+v", c)
	}
}

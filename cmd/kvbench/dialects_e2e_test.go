package main

import (
	"context"
	"encoding/json"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// The tests below run the eviction replay against the embedded engine speaking one upstream
// version of an engine (its dialect_version), one test per defect of the previous engine
// model: each reproduces the shape upstream code writes and fails on the old model.

// versioned is a dialect at an upstream version, with more changes to the profile.
func versioned(name, version string, more func(*sim.Profile)) func(*sim.Profile) {
	return dialect(name, func(p *sim.Profile) {
		p.DialectVersion = version
		if more != nil {
			more(p)
		}
	})
}

// noEviction gives the server a GPU pool that holds the whole sequence: the replay stays
// in GPU memory.
func noEviction(p *sim.Profile) { p.NumGPUBlocks = 1024 }

// counterOf is the replay's reading of counter name: its delta (nil when absent) and source.
func counterOf(t *testing.T, req map[string]any, name string) (delta any, source, sourceBefore string) {
	t.Helper()
	c, ok := req["counters"].(map[string]any)["counters"].(map[string]any)[name].(map[string]any)
	if !ok {
		t.Fatalf("the replay's counters have no %s", name)
	}
	src, _ := c["source"].(string)
	before, _ := c["source_before"].(string)
	return c["delta"], src, before
}

// crossChecks are the replay verdict's cross-checks by name (the last of a name wins).
func crossChecks(req map[string]any) map[string]map[string]any {
	out := map[string]map[string]any{}
	list, _ := req["verdict"].(map[string]any)["cross_checks"].([]any)
	for _, c := range list {
		m := c.(map[string]any)
		if prev, seen := out[m["name"].(string)]; seen && prev["agrees"] == false {
			continue // keep a disagreement visible
		}
		out[m["name"].(string)] = m
	}
	return out
}

func preflightCounters(t *testing.T, rec map[string]any) map[string]any {
	t.Helper()
	return section(t, rec, "preflight")["counters"].(map[string]any)
}

// Defect 1. SGLang before the cache_source label, with no per-request details: the GPU and
// host hit counters cannot exist, so they are absent (the old model read them as "lazy 0"
// and judged the reload a recompute); the host share comes from load-back, checked against
// the cached total.
func TestEngineSGLangNoCacheSource(t *testing.T) {
	_, req, _ := engineRun(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangUnlabelled, nil), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "tokens moved host->GPU") || !strings.Contains(why, "no counter splits the cached tokens by tier") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	for _, c := range []string{"gpu_prefix_hits", "external_prefix_hits"} {
		if d, src, _ := counterOf(t, req, c); d != nil || src != "" {
			t.Fatalf("%s read as %v from %q on a server without cache_source", c, d, src)
		}
	}
	if c := crossChecks(req)["load_back_vs_cached_total"]; c == nil || c["agrees"] != true {
		t.Fatalf("load-back cross-check %v", c)
	}
	if _, ok := req["result"].(map[string]any)["cached_tokens_details"]; ok {
		t.Fatal("this SGLang sends no cached_tokens_details")
	}
}

// Defect 1, newer collectors: HiCache off counts cached tokens as cache_source="total": they
// are the device's, and the host tier does not exist (absent, not a host 0).
func TestEngineSGLangHiCacheOffTotal(t *testing.T) {
	off := versioned(sim.DialectSGLang, sim.SGLangCacheSource, func(p *sim.Profile) { p.CPUOffloadGiB = 0; noEviction(p) })
	_, req, warnings := engineRun(t, "sglang", off, nil)
	if v, why := verdictOf(t, req); v != "gpu_hit" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if _, src, _ := counterOf(t, req, "gpu_prefix_hits"); !strings.Contains(src, `cache_source="total"`) {
		t.Fatalf("GPU hits from %q", src)
	}
	if d, _, _ := counterOf(t, req, "external_prefix_hits"); d != nil {
		t.Fatalf("host hits %v on a server without a host tier", d)
	}
	_ = warnings
}

// Defect 2. sglang:evicted_tokens_total counts every GPU eviction, host tier or not: it is
// no store. Without HiCache the sequence stores nothing (absent); with the newest collector
// the store is hicache_backup_tokens_total{pool="kv"}.
func TestEngineSGLangEvictionsAreNotStores(t *testing.T) {
	storeOf := func(rec map[string]any) (any, bool) {
		s := section(t, rec, "sequence")
		v, ok := s["gpu_to_host_tokens_delta"]
		return v, ok && v != nil
	}
	// The server has run a while: its eviction counter exists before the run starts.
	warm := func(p *sim.Profile) { p.CPUOffloadGiB, p.CounterOffset = 0, 1000 }
	rec, req, _, dir := engineRunDir(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangCacheSource, warm), nil)
	if v, ok := storeOf(rec); ok {
		t.Fatalf("no host tier, yet %v tokens stored", v)
	}
	if s := section(t, rec, "sequence"); s["store_proven"] == true {
		t.Fatalf("store proven without a host tier: %v", s)
	}
	if v, _ := verdictOf(t, req); v != "recompute" {
		t.Fatalf("no host tier: verdict %s", v)
	}
	var evicted float64
	for _, q := range readArtifact(t, dir, "step-01-sequence.json")["requests"].([]any) {
		c := q.(map[string]any)["counters"].(map[string]any)["counters"].(map[string]any)
		if ev, ok := c["device_evicted_tokens"].(map[string]any); ok {
			d, _ := ev["delta"].(float64)
			evicted += d
		}
	}
	if evicted <= 0 {
		t.Fatal("GPU evictions not read")
	}

	rec, _, _ = engineRun(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangPoolSplit, nil), nil)
	if v, ok := storeOf(rec); !ok || v.(float64) <= 0 {
		t.Fatalf("backup tokens %v", v)
	}
}

// Defect 3. Storage hits are labelled storage_<backend> and reach the GPU through the host
// tier: load-back is compared with host + storage, so nothing disagrees.
func TestEngineSGLangStorageThroughHost(t *testing.T) {
	_, req, _ := engineRun(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangPoolSplit, func(p *sim.Profile) { p.StorageBackend = "HiCacheFile" }), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || strings.Contains(why, "disagree") || !strings.Contains(why, "storage tier (HiCacheFile)") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	d := req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)
	if d["host"].(float64) != 0 || d["storage"].(float64) <= 0 {
		t.Fatalf("details %v", d)
	}
	if _, src, _ := counterOf(t, req, "prompt_tokens_cached_disk"); !strings.Contains(src, `storage_.+`) {
		t.Fatalf("storage hits read from %q", src)
	}
	for name, c := range crossChecks(req) {
		if c["agrees"] != true {
			t.Fatalf("cross-check %s disagrees: %v", name, c)
		}
	}
	if c := crossChecks(req)["store_bytes_vs_stored_tokens"]; c == nil {
		t.Fatal("store bytes not checked against stored tokens")
	}
}

// Defect 3. A sliding-window model splits load-back by pool: only kv counts tokens.
func TestEngineSGLangPoolSplit(t *testing.T) {
	_, req, _ := engineRun(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangPoolSplit, func(p *sim.Profile) { p.SlidingWindowPool = true }), nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || strings.Contains(why, "disagree") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	host := req["result"].(map[string]any)["cached_tokens_details"].(map[string]any)["host"]
	if d, src, _ := counterOf(t, req, "reload_tokens"); d != host || !strings.Contains(src, `pool="kv"`) {
		t.Fatalf("load-back %v from %q, request host tokens %v", d, src, host)
	}
}

// Defect 3. Under the multiprocess exposition load-back appears only after the first
// load-back: a GPU-hit replay reads it as 0 because the host-tier gauges show HiCache live,
// and the host tier's size and fill come from those gauges.
func TestEngineSGLangLazyLoadBackAndHostTier(t *testing.T) {
	rec, req, _ := engineRun(t, "sglang", versioned(sim.DialectSGLang, sim.SGLangPoolSplit, noEviction), nil)
	if v, why := verdictOf(t, req); v != "gpu_hit" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if d, src, _ := counterOf(t, req, "reload_tokens"); d != 0.0 || !strings.Contains(src, "live: sglang:hicache_host_total_tokens") {
		t.Fatalf("load-back %v from %q", d, src)
	}
	setup := section(t, rec, "preflight")["capacity_setup"].(map[string]any)
	if !strings.Contains(setup["gpu_kv_tokens_source"].(string), "sglang:max_total_num_tokens") || setup["host_tier_tokens"] != 8192.0 ||
		!strings.Contains(setup["host_tier_tokens_source"].(string), "sglang:hicache_host_total_tokens") {
		t.Fatalf("capacity setup %v", setup)
	}
}

// Defect 4. LMCache's own hit counter stays at 0 (a known report; or its 10 s tick has not
// passed): vLLM's external hits, which usage confirms, decide, and the disagreement is a
// named cross-check with LMCache's traps said.
func TestEngineLMCacheHitCounterFrozen(t *testing.T) {
	frozen := dialect(sim.DialectLMCache, func(p *sim.Profile) {
		p.MetricValues = map[string]float64{"lmcache:num_hit_tokens_total": 0}
	})
	rec, req, _ := engineRun(t, "lmcache", frozen, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "production-stack#818") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	c := crossChecks(req)["external_hits_vs_connector_hits"]
	if c == nil || c["agrees"] != false || !strings.Contains(c["used"].(string), "agree with usage") {
		t.Fatalf("cross-check %v", c)
	}
	counters := preflightCounters(t, rec)
	if counters["external_prefix_queries"] != "vllm:external_prefix_cache_queries_total" || counters["external_prefix_hits"] != "vllm:external_prefix_cache_hits_total" {
		t.Fatalf("queries and hits from %v / %v", counters["external_prefix_queries"], counters["external_prefix_hits"])
	}
}

// Defect 4. One rank's counts under both roles: summed within the rank, then the max over
// ranks; the old rule (max within a role, roles added) doubled them.
func TestEngineLMCacheBothRolesTP2(t *testing.T) {
	roles := versioned(sim.DialectLMCache, sim.LMCacheBothRoles, func(p *sim.Profile) { p.TensorParallelSize = 2 })
	_, req, _ := engineRun(t, "lmcache", roles, nil)
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	ext, _, _ := counterOf(t, req, "external_prefix_hits")
	conn, _, _ := counterOf(t, req, "connector_hit_tokens")
	if conn != ext {
		t.Fatalf("LMCache's hit tokens %v, vLLM's external hits %v", conn, ext)
	}
}

// Defect 4. vLLM's LMCache multi-process connector puts no lmcache:* family on vLLM's
// /metrics and ignores kv_offloading_size: preflight says so instead of advising
// PROMETHEUS_MULTIPROC_DIR, and the tier is the scenario's.
func TestEngineLMCacheMultiProcess(t *testing.T) {
	rec, req, warnings := engineRun(t, "lmcache", versioned(sim.DialectLMCache, sim.LMCacheMultiProcess, nil), nil)
	if strings.Contains(warnings, "PROMETHEUS_MULTIPROC_DIR must be set") || !strings.Contains(warnings, "multi-process connector") || !strings.Contains(warnings, "--l1-size-gb") {
		t.Fatalf("warnings: %s", warnings)
	}
	setup := section(t, rec, "preflight")["capacity_setup"].(map[string]any)
	if setup["cpu_offload_gib_source"] != "scenario" {
		t.Fatalf("CPU tier from %v: kv_offloading_size does not size this tier", setup["cpu_offload_gib_source"])
	}
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// Defect 5. KVBM v2 serves disk hits disk->host->GPU: the reload is named as coming from the
// disk tier, and the onboarded tokens still agree with vLLM's external hits.
func TestEngineKVBMv2DiskThroughHost(t *testing.T) {
	disk := versioned(sim.DialectKVBM, sim.KVBMv2, func(p *sim.Profile) { p.KVBMTier = sim.KVBMTierDisk })
	rec, req, warnings := engineRun(t, "kvbm", disk, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "came from the disk tier, staged through the host tier") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if c := crossChecks(req)["onboarded_vs_external_hits"]; c == nil || c["agrees"] != true {
		t.Fatalf("onboard cross-check %v", c)
	}
	if !strings.Contains(warnings, "KVBM v2 serves disk hits through the host tier") {
		t.Fatalf("warnings: %s", warnings)
	}
	if preflightCounters(t, rec)["disk_to_host_tokens"] == "absent" {
		t.Fatal("kvbm_onboard_blocks_d2h not read")
	}
}

// Defect 6. TensorRT-LLM's own collector on /prometheus/metrics (its /metrics is JSON):
// without the per-tier counter the tier stays unknown, but the running gauge makes the
// replay's isolation checkable, the pool comes from max blocks x tokens per block, and
// onboard bytes are named with their caveat.
func TestEngineTRTLLMCollector(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: dialect(sim.DialectTRTLLM, nil)})
	out := t.TempDir()
	// No --metrics: the engine's definition knows where trtllm-serve serves its text.
	rec, stderr, code := runJSON(t, context.Background(), "run", engineScenario(t, "trtllm"), "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	pf := section(t, rec, "preflight")
	if urls := pf["metrics_urls"].([]any); len(urls) != 1 || !strings.HasSuffix(urls[0].(string), "/prometheus/metrics") {
		t.Fatalf("metrics URLs %v", urls)
	}
	warnings, _ := json.Marshal(pf["warnings"])
	if strings.Contains(string(warnings), "no running-requests gauge") {
		t.Fatalf("warnings: %s", warnings)
	}
	if setup := pf["capacity_setup"].(map[string]any); !strings.Contains(setup["gpu_kv_tokens_source"].(string), "trtllm_kv_cache_max_blocks") || setup["gpu_kv_tokens"] != 4096.0 {
		t.Fatalf("setup %v", setup)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-02-replay.json")
	req := art["requests"].([]any)[0].(map[string]any)
	v, why := verdictOf(t, req)
	if v != "cache_hit_tier_unknown" || !strings.Contains(why, "bytes were onboarded host->GPU") || !strings.Contains(why, "resumes and on prefetch") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if iso := req["counters"].(map[string]any)["isolation"].(string); !strings.HasPrefix(iso, "clean: ") {
		t.Fatalf("isolation %q", iso)
	}
}

// Defect 6. With the per-tier counter (and KV cache manager V2) TensorRT-LLM names the tier:
// a host reload is a reload.
func TestEngineTRTLLMTierSplit(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: versioned(sim.DialectTRTLLM, sim.TRTLLMTierSplit, nil)})
	out := t.TempDir()
	_, stderr, code := runJSON(t, context.Background(), "run", engineScenario(t, "trtllm"), "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	art := readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-02-replay.json")
	req := art["requests"].([]any)[0].(map[string]any)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "resumes and on prefetch") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if _, src, _ := counterOf(t, req, "external_prefix_hits"); !strings.Contains(src, "trtllm_prompt_cache_hit_tokens_total") {
		t.Fatalf("host hits from %q", src)
	}
}

// Defect 7. llama.cpp prints its counters at 6 significant digits: on a server whose
// counters are past 10^6 they move in steps of 10, so usage decides, the isolation check
// allows the step, and the record says why.
func TestEngineLlamaCppSixDigits(t *testing.T) {
	long := dialect(sim.DialectLlamaCpp, func(p *sim.Profile) { p.CounterOffset = 1234561 })
	_, req, warnings := engineRun(t, "llamacpp", long, nil)
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "6 significant digits") || strings.Contains(why, "but usage reports") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if c := crossChecks(req)["cached_counter_vs_usage"]; c == nil || c["tolerance"] != 10.0 {
		t.Fatalf("cross-check %v", c)
	}
	c := req["counters"].(map[string]any)["counters"].(map[string]any)["prompt_tokens_cached"].(map[string]any)
	if c["resolution"] != 10.0 {
		t.Fatalf("cached counter %v", c)
	}
	if !strings.Contains(warnings, "6 significant digits") {
		t.Fatalf("warnings: %s", warnings)
	}
}

// Defect 7. A build before the cached-token counter: it is absent, never 0, and so is the
// KV-usage gauge no build since b5441 exports; usage alone decides.
func TestEngineLlamaCppNoCachedCounter(t *testing.T) {
	rec, req, warnings := engineRun(t, "llamacpp", versioned(sim.DialectLlamaCpp, sim.LlamaCppNoCachedCounter, nil), nil)
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	pf := preflightCounters(t, rec)
	if pf["prompt_tokens_cached"] != "absent" || section(t, rec, "preflight")["gauges"].(map[string]any)["kv_usage"] != "absent" {
		t.Fatalf("preflight %v", pf)
	}
	if d, _, _ := counterOf(t, req, "prompt_tokens_cached"); d != nil {
		t.Fatalf("absent counter recorded as %v", d)
	}
	if !strings.Contains(warnings, "serves no llamacpp:prompt_tokens_cached_total") {
		t.Fatalf("warnings: %s", warnings)
	}
}

// Defect 8. VLLM_USE_SIMPLE_KV_OFFLOAD's connector serves no kv_offload_* family: preflight
// says the tier's traffic is unobservable (not "no stores"), the byte counters are absent,
// and the reload rests on the external hits with a note.
func TestEngineVLLMSimpleOffload(t *testing.T) {
	_, req, warnings := engineRun(t, "vllm", versioned(sim.DialectVLLM, sim.VLLMSimpleOffload, nil), nil)
	if !strings.Contains(warnings, "simple CPU offload connector") || !strings.Contains(warnings, "unobservable") {
		t.Fatalf("warnings: %s", warnings)
	}
	v, why := verdictOf(t, req)
	if v != "cpu_reload" || !strings.Contains(why, "no CPU->GPU byte counter") || strings.Contains(why, "no_store_bytes") {
		t.Fatalf("verdict %s: %s", v, why)
	}
	if d, _, _ := counterOf(t, req, "load_bytes"); d != nil {
		t.Fatalf("load bytes %v", d)
	}
	if c := crossChecks(req)["usage_vs_hit_counters"]; c == nil || c["agrees"] != true {
		t.Fatalf("usage cross-check %v", c)
	}
}

// Defect 8. The newest flat offload families are bound on first use, and under
// PROMETHEUS_MULTIPROC_DIR an unused one is not declared: the replay's load bytes read 0
// from the flat family while a flat sibling is live, so both sides of the replay read the
// same family.
func TestEngineVLLMFlatFamiliesLazy(t *testing.T) {
	lazy := versioned(sim.DialectVLLM, sim.VLLMFlatLazy, func(p *sim.Profile) { p.MultiprocessExposition = true })
	_, req, _ := engineRun(t, "vllm", lazy, nil)
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
	d, src, before := counterOf(t, req, "load_bytes")
	if d.(float64) <= 0 || src != "vllm:kv_offload_load_bytes_total" || !strings.HasPrefix(before, "vllm:kv_offload_load_bytes_total (lazy, no series yet; live: ") {
		t.Fatalf("load bytes %v from %q (before: %q)", d, src, before)
	}
}

// Defect 8. vllm:prompt_tokens_recomputed_total, where the version has it, is read.
func TestEngineVLLMRecomputed(t *testing.T) {
	rec, req, _ := engineRun(t, "vllm", versioned(sim.DialectVLLM, sim.VLLMRecomputed, nil), nil)
	if got := preflightCounters(t, rec)["prompt_tokens_recomputed"]; got != "vllm:prompt_tokens_recomputed_total" {
		t.Fatalf("recomputed from %v", got)
	}
	if v, why := verdictOf(t, req); v != "cpu_reload" {
		t.Fatalf("verdict %s: %s", v, why)
	}
}

// Defect 6. Pointed at trtllm-serve's /metrics, which answers JSON, kvbench says where its
// Prometheus text is, as a usage error.
func TestEngineTRTLLMJSONMetrics(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: dialect(sim.DialectTRTLLM, nil)})
	_, stderr, code := runJSON(t, context.Background(), "run", engineScenario(t, "trtllm"), "--endpoint", srv.URL()+"/v1",
		"--metrics", srv.URL()+"/metrics", "--out", t.TempDir())
	if code != cli.ExitUsage || !strings.Contains(stderr, "not a Prometheus text exposition") || !strings.Contains(stderr, "trtllm serves its Prometheus text at /prometheus/metrics") {
		t.Fatalf("exit %d: %s", code, stderr)
	}
}

// TestEngineEveryDialectReplay: the eviction replay on every version of every dialect the
// embedded engine writes gets the verdict that engine's evidence supports there, and no
// reading the version does not serve is recorded as a number.
func TestEngineEveryDialectReplay(t *testing.T) {
	backend := map[string]string{sim.DialectVLLM: "vllm", sim.DialectLMCache: "lmcache", sim.DialectSGLang: "sglang",
		sim.DialectKVBM: "kvbm", sim.DialectTRTLLM: "trtllm", sim.DialectLlamaCpp: "llamacpp"}
	unknown := map[string]bool{sim.DialectTRTLLM + ":" + sim.TRTLLMNoTierSplit: true}
	for _, d := range sim.Dialects {
		for _, v := range sim.DialectVersions[d] {
			name := d + ":" + v
			if v == "" {
				name = d
			}
			t.Run(name, func(t *testing.T) {
				var req map[string]any
				if d == sim.DialectTRTLLM {
					srv := startSim(t, sim.Options{Profile: "tiny", Override: versioned(d, v, nil)})
					out := t.TempDir()
					if _, stderr, code := runJSON(t, context.Background(), "run", engineScenario(t, backend[d]), "--endpoint", srv.URL()+"/v1", "--out", out); code != cli.ExitOK {
						t.Fatalf("exit %d: %s", code, stderr)
					}
					req = readArtifact(t, filepath.Join(out, onlyEntry(t, out)), "step-02-replay.json")["requests"].([]any)[0].(map[string]any)
				} else {
					_, req, _ = engineRun(t, backend[d], versioned(d, v, nil), nil)
				}
				want := "cpu_reload"
				if unknown[d+":"+v] || v == "" && unknown[d+":"+sim.DialectVersions[d][0]] {
					want = "cache_hit_tier_unknown"
				}
				if got, why := verdictOf(t, req); got != want {
					t.Fatalf("verdict %s, want %s: %s", got, want, why)
				}
				for c, r := range req["counters"].(map[string]any)["counters"].(map[string]any) {
					m := r.(map[string]any)
					if m["source"] == nil && m["source_before"] == nil && (m["delta"] != nil || m["after"] != nil) {
						t.Errorf("%s has a value but no source: %v", c, m)
					}
				}
			})
		}
	}
}

package main

import (
	"encoding/json"
	"fmt"
	"math"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// seedRequest is one generation request of a seed trajectory: what usage reports and how
// much each counter moves while the request runs.
type seedRequest struct {
	prompt, cached, output int
	visible                bool // a visible answer; else reasoning only
	twin                   bool // the cold twin: the request must carry cache_salt
	queries, gpuHits       float64
	extHits                float64
	storeBytes, loadBytes  float64
	loadSeconds            float64
}

// seedServer is a vLLM that replays a seed's counter trajectory: each generation request
// of the run takes the next scripted request and moves the counters by its amounts before
// it answers, so the scrapes right before and after a request see exactly its part.
// Preflight's two short checks move nothing: the seed's server counted from 0 at request 0
// (its 682,044 prefix queries are exactly six prompts of 113,674 tokens).
type seedServer struct {
	t         *testing.T
	model     string
	cacheInfo string // the labels of vllm:cache_config_info
	mu        sync.Mutex
	script    []seedRequest
	next      int
	running   int
	c         struct{ queries, hits, extHits, store, load, loadSec, prompt, gen float64 }
	checks    int
}

func startSeedServer(t *testing.T, cacheInfo string, script []seedRequest) string {
	s := &seedServer{t: t, model: "deepseek-v4-flash-0731-r16-b12x-dspark5-offload16-wsl2-mmap-unpinned-tp2-256k", cacheInfo: cacheInfo, script: script}
	mux := http.NewServeMux()
	mux.HandleFunc("GET /v1/models", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprintf(w, `{"object":"list","data":[{"id":%q,"object":"model","root":"deepseek-ai/DeepSeek-V4-Flash-0731","max_model_len":262144}]}`, s.model)
	})
	mux.HandleFunc("GET /version", func(w http.ResponseWriter, _ *http.Request) {
		fmt.Fprint(w, `{"version":"v0.11.2.dev280+gilded.gnosis.v20.vllm1e9c9c3.sieec30ff.fi801d57a.cu132.20260731.r16"}`)
	})
	mux.HandleFunc("GET /metrics", s.metrics)
	mux.HandleFunc("POST /v1/chat/completions", s.chat)
	srv := httptest.NewServer(mux) // 127.0.0.1
	t.Cleanup(func() {
		srv.Close()
		if s.next != len(s.script) {
			t.Errorf("the run sent %d of the %d scripted requests", s.next, len(s.script))
		}
	})
	return srv.URL
}

func (s *seedServer) metrics(w http.ResponseWriter, _ *http.Request) {
	s.mu.Lock()
	defer s.mu.Unlock()
	l := `engine="0",model_name="` + s.model + `"`
	w.Header().Set("Content-Type", "text/plain; version=0.0.4")
	fmt.Fprintf(w, "# TYPE vllm:num_requests_running gauge\nvllm:num_requests_running{%s} %d\n", l, s.running)
	fmt.Fprintf(w, "# TYPE vllm:num_requests_waiting gauge\nvllm:num_requests_waiting{%s} 0\n", l)
	fmt.Fprintf(w, "# TYPE vllm:kv_cache_usage_perc gauge\nvllm:kv_cache_usage_perc{%s} %g\n", l, 0.25*float64(s.running))
	for _, c := range []struct {
		name string
		v    float64
	}{
		{"vllm:prefix_cache_queries_total", s.c.queries}, {"vllm:prefix_cache_hits_total", s.c.hits},
		{"vllm:external_prefix_cache_queries_total", s.c.queries - s.c.hits}, {"vllm:external_prefix_cache_hits_total", s.c.extHits},
		{"vllm:prompt_tokens_total", s.c.prompt}, {"vllm:generation_tokens_total", s.c.gen},
	} {
		fmt.Fprintf(w, "# TYPE %s counter\n%s{%s} %.1f\n", c.name, c.name, l, c.v)
	}
	fmt.Fprintf(w, "# TYPE vllm:cache_config_info gauge\nvllm:cache_config_info{engine=\"0\",%s} 1.0\n", s.cacheInfo)
	fmt.Fprintf(w, "# TYPE vllm:kv_offload_total_bytes_total counter\n")
	fmt.Fprintf(w, "vllm:kv_offload_total_bytes_total{%s,transfer_type=\"GPU_to_CPU\"} %.1f\n", l, s.c.store)
	fmt.Fprintf(w, "vllm:kv_offload_total_bytes_total{%s,transfer_type=\"CPU_to_GPU\"} %.1f\n", l, s.c.load)
	fmt.Fprintf(w, "# TYPE vllm:kv_offload_total_time_total counter\n")
	fmt.Fprintf(w, "vllm:kv_offload_total_time_total{%s,transfer_type=\"GPU_to_CPU\"} %g\n", l, s.c.store/4e10)
	fmt.Fprintf(w, "vllm:kv_offload_total_time_total{%s,transfer_type=\"CPU_to_GPU\"} %.17g\n", l, s.c.loadSec)
}

func (s *seedServer) chat(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Messages []struct {
			Content string `json:"content"`
		} `json:"messages"`
		CacheSalt *string `json:"cache_salt"`
	}
	if err := json.NewDecoder(r.Body).Decode(&req); err != nil || len(req.Messages) == 0 {
		http.Error(w, "bad request", http.StatusBadRequest)
		return
	}
	s.mu.Lock()
	var q seedRequest
	if strings.HasPrefix(req.Messages[len(req.Messages)-1].Content, "kvbench preflight") {
		// Preflight's check: a repeated short prompt, answered cached, counted nowhere.
		s.checks++
		q = seedRequest{prompt: 130, output: 1, visible: true}
		if s.checks > 1 {
			q.cached = 128
		}
	} else {
		if s.next >= len(s.script) {
			s.mu.Unlock()
			s.t.Errorf("generation request %d beyond the script", s.next)
			http.Error(w, "beyond the script", http.StatusInternalServerError)
			return
		}
		q = s.script[s.next]
		if q.twin != (req.CacheSalt != nil) {
			s.t.Errorf("scripted request %d: twin %v, but cache_salt %v", s.next, q.twin, req.CacheSalt)
		}
		s.next++
		c := &s.c
		c.queries += q.queries
		c.hits += q.gpuHits
		c.extHits += q.extHits
		c.store += q.storeBytes
		c.load += q.loadBytes
		c.loadSec += q.loadSeconds
		c.prompt += float64(q.prompt)
		c.gen += float64(q.output)
	}
	s.mu.Unlock()

	w.Header().Set("Content-Type", "text/event-stream")
	field := "reasoning_content"
	if q.visible {
		field = "content"
	}
	fmt.Fprint(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{"role":"assistant","content":""}}]}`+"\n\n")
	// A few chunks, so the decode rate has tokens after the first.
	for i, word := range []string{"The", " answer", " is", " 42."} {
		finish := "null"
		if i == 3 {
			finish = `"stop"`
		}
		fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[{"index":0,"delta":{%q:%q},"finish_reason":%s}]}`+"\n\n", field, word, finish)
		w.(http.Flusher).Flush()
		time.Sleep(time.Millisecond) // each chunk its own read: the decode has a duration
	}
	fmt.Fprintf(w, `data: {"id":"c","object":"chat.completion.chunk","choices":[],"usage":{"prompt_tokens":%d,"completion_tokens":%d,"total_tokens":%d,"prompt_tokens_details":{"cached_tokens":%d}}}`+"\n\n",
		q.prompt, q.output, q.prompt+q.output, q.cached)
	fmt.Fprint(w, "data: [DONE]\n\n")
}

// seedPrimary is seed 001's eviction sequence and replay as a trajectory: six prompts of
// 113,674 tokens (request 0 is the replayed one, whose token count the seed gives), the
// five after the first hitting 26,624 shared-prefix tokens between them and storing
// 13,627,722,240 bytes in all; the replay hits 113,408 tokens in the CPU tier, loading
// 1,001,721,600 bytes in 0.3437 s; its cold twin then misses and stores.
func seedPrimary() []seedRequest {
	const prompt, totalStore, computedAll = 113674, 13627722240.0, 655420.0
	hits := []float64{0, 5328, 5328, 5328, 5328, 5312}
	visible := []bool{true, false, true, true, false, true}
	var script []seedRequest
	stored := 0.0
	for i, h := range hits {
		store := math.Round(totalStore * (prompt - h) / computedAll)
		if i == len(hits)-1 {
			store = totalStore - stored
		}
		stored += store
		script = append(script, seedRequest{prompt: prompt, cached: int(h), output: 256, visible: visible[i], queries: prompt, gpuHits: h, storeBytes: store})
	}
	return append(script,
		seedRequest{prompt: prompt, cached: 113408, output: 162, visible: true, queries: prompt, extHits: 113408, loadBytes: 1001721600, loadSeconds: 0.3436592254638672},
		seedRequest{prompt: prompt, output: 162, visible: true, twin: true, queries: prompt, storeBytes: prompt * 20792})
}

// seedControl is seed 001's control: 70k, 80k and 100k nested prompts (53,911, 61,600 and
// 77,000 tokens), the later two hitting what the earlier stored on the GPU, then the 70k
// again, a GPU hit of 53,824 tokens that brings the GPU hits to the seed's 163,584. Its twin
// hits the GPU as the replay did (a server that ignores the salt): reading the control's
// "after" at the step's end would give 217,408.
func seedControl() []seedRequest {
	const bpt = 20790.0
	return []seedRequest{
		{prompt: 53911, output: 256, visible: true, queries: 53911, storeBytes: 53911 * bpt},
		{prompt: 61600, cached: 53824, output: 256, visible: true, queries: 61600, gpuHits: 53824, storeBytes: (61600 - 53824) * bpt},
		{prompt: 77000, cached: 55936, output: 256, visible: true, queries: 77000, gpuHits: 55936, storeBytes: (77000 - 55936) * bpt},
		{prompt: 53911, cached: 53824, output: 162, visible: true, queries: 53911, gpuHits: 53824},
		{prompt: 53911, cached: 53824, output: 162, visible: true, twin: true, queries: 53911, gpuHits: 53824},
	}
}

// TestSeed001Trajectory runs seed 001's two scenarios against servers that replay its
// counter trajectory and checks every field of seed 001 the study emits: the counters and
// usage exactly, the timings (which a replay cannot reproduce) by type, the rest as noted.
func TestSeed001Trajectory(t *testing.T) {
	out := t.TempDir()
	primary := startSeedServer(t, `block_size="16",cache_dtype="fp8",enable_prefix_caching="True",kv_cache_size_tokens="506283",kv_offloading_backend="native",kv_offloading_size="16.0",num_gpu_blocks="31642"`, seedPrimary())
	control := startSeedServer(t, `block_size="16",cache_dtype="fp8",enable_prefix_caching="True",kv_cache_size_tokens="503468",kv_offloading_backend="native",kv_offloading_size="8.0",num_gpu_blocks="31466"`, seedControl())
	for _, r := range []struct{ scenario, url string }{{"eviction-6x150k-replay", primary}, {"offload8-control", control}} {
		if _, stderr, code := runCLI(t, "run", r.scenario, "--endpoint", r.url+"/v1", "--out", out); code != cli.ExitOK {
			t.Fatalf("run %s: exit %d\n%s", r.scenario, code, stderr)
		}
	}
	dirs, _ := filepath.Glob(filepath.Join(out, "*-2*"))
	study := filepath.Join(out, "study.json")
	if _, stderr, code := runCLI(t, append(append([]string{"summarize"}, dirs...), "--out", study)...); code != cli.ExitOK {
		t.Fatalf("summarize %v: exit %d %s", dirs, code, stderr)
	}
	got := readJSON(t, study)
	want := readJSON(t, filepath.Join(referenceDir, "001_a767f3ca5b08805d.txt"))

	// Fields a run measures with its own clock, names with its own files or words, or
	// cannot see without a probe: their type is checked, not their value.
	byType := map[string]bool{
		"observed_at": true, "runtime.image": true, "runtime.recipe": true, "model.revision": true,
		"eviction_sequence.artifact": true, "replay.artifact": true, "replay.exact_prompt_identity": true,
		"replay.time_to_first_output_ms": true, "replay.time_to_first_visible_token_ms": true, "replay.end_to_end_ms": true,
		"replay.effective_prefill_tokens_per_second": true, "replay.decode_tokens_per_second": true,
		"offload8_control.artifacts": true, "offload8_control.interpretation": true,
	}
	// Sections that describe the machine and its clean-up (probes) or cite documents the
	// scenario lists: not counters.
	skip := map[string]bool{"topology": true, "restoration": true, "sources": true, "cache.cpu_mmap_bytes": true}
	checked := 0
	var walk func(path string, w, g any)
	walk = func(path string, w, g any) {
		if skip[path] {
			return
		}
		if wm, ok := w.(map[string]any); ok {
			gm, ok := g.(map[string]any)
			if !ok {
				t.Errorf("%s: %v, want an object", path, g)
				return
			}
			for k, wv := range wm {
				p := k
				if path != "" {
					p = path + "." + k
				}
				gv, ok := gm[k]
				if skip[p] {
					continue
				}
				if !ok {
					t.Errorf("%s: missing from the study", p)
					continue
				}
				walk(p, wv, gv)
			}
			return
		}
		checked++
		switch {
		case byType[path]:
			if jsonType(g) != jsonType(w) {
				t.Errorf("%s: %v (%s), want a %s", path, g, jsonType(g), jsonType(w))
			}
		case jsonType(w) == "number":
			wn, gn := w.(float64), g
			if n, ok := gn.(float64); !ok || math.Abs(n-wn) > 1e-9*math.Max(1, math.Abs(wn)) {
				t.Errorf("%s = %v, seed 001 says %v", path, g, w)
			}
		default:
			wj, _ := json.Marshal(w)
			gj, _ := json.Marshal(g)
			if string(wj) != string(gj) {
				t.Errorf("%s = %s, seed 001 says %s", path, gj, wj)
			}
		}
	}
	walk("", want, got)
	if checked != 58 { // seed 001's fields less topology, restoration, sources and the mmap size
		t.Errorf("%d seed fields checked, want 58", checked)
	}
	ctl := got["offload8_control"].(map[string]any)
	if s, _ := ctl["interpretation"].(string); !strings.HasPrefix(s, "The replay remained in GPU cache. At the measured bytes per stored token") || !strings.Contains(s, "was not a valid GPU-eviction reload setup") {
		t.Errorf("control interpretation %q", s)
	}
	if t.Failed() {
		data, _ := os.ReadFile(study)
		t.Logf("study:\n%s", data)
	}
}

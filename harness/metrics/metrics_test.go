package metrics_test

import (
	"bytes"
	"errors"
	"github.com/anvil-serving/kvbench/harness/engine"
	. "github.com/anvil-serving/kvbench/harness/metrics"
	"os"
	"path/filepath"
	"regexp"
	"strconv"
	"strings"
	"testing"
)

const samplePath = "../record/testdata/reference/vllm-metrics-sample.prom"

func readSample(tb testing.TB) string {
	tb.Helper()
	b, err := os.ReadFile(samplePath)
	if err != nil {
		tb.Fatalf("reference sample: %v", err)
	}
	return string(b)
}

// dropLines removes every line matching re.
func dropLines(text string, re *regexp.Regexp) string {
	var out []string
	for _, line := range strings.Split(text, "\n") {
		if !re.MatchString(line) {
			out = append(out, line)
		}
	}
	return strings.Join(out, "\n")
}

// legacyNames rewrites the sample to pre-v0.10 names with only labelled offload metrics.
func legacyNames(text string) string {
	text = strings.ReplaceAll(text, "vllm:prefix_cache_", "vllm:gpu_prefix_cache_")
	text = strings.ReplaceAll(text, "vllm:kv_cache_usage_perc", "vllm:gpu_cache_usage_perc")
	return dropLines(text, regexp.MustCompile(`vllm:kv_offload_(store|load|allocation|cpu)_`))
}

// flatOffloadOnly drops the labelled offload generation.
func flatOffloadOnly(text string) string {
	return dropLines(text, regexp.MustCompile(`vllm:kv_offload_(total_|size)`))
}

var engineZero = regexp.MustCompile(`^(.*)engine="0"(.*) (\S+)$`)

// scaleSeries rewrites every sample line into one line per engine label, each with the value
// multiplied by factor.
func scaleSeries(tb testing.TB, text string, engines []string, factor float64) string {
	tb.Helper()
	var out []string
	for _, line := range strings.Split(text, "\n") {
		m := engineZero.FindStringSubmatch(line)
		if m == nil || strings.HasPrefix(line, "#") {
			out = append(out, line)
			continue
		}
		v, err := strconv.ParseFloat(m[3], 64)
		if err != nil {
			tb.Fatalf("sample value in %q: %v", line, err)
		}
		for _, e := range engines {
			out = append(out, m[1]+`engine="`+e+`"`+m[2]+" "+strconv.FormatFloat(v*factor, 'g', -1, 64))
		}
	}
	return strings.Join(out, "\n")
}

func twoEngines(tb testing.TB, text string) string {
	return scaleSeries(tb, text, []string{"0", "1"}, 0.5)
}

func mustParse(tb testing.TB, text, source string) Exposition {
	tb.Helper()
	exp, err := Parse(strings.NewReader(text), source)
	if err != nil {
		tb.Fatalf("Parse(%s): %v", source, err)
	}
	return exp
}

func mustProfile(tb testing.TB, name string) Profile {
	tb.Helper()
	d, err := engine.ByName(name)
	if err != nil {
		tb.Fatal(err)
	}
	return d.Profile()
}

// The four numbers that prove store and reload must not depend on how the server names them.
func TestSampleVariantsGiveSameCounters(t *testing.T) {
	sample := readSample(t)
	half := scaleSeries(t, sample, []string{"0"}, 0.5)
	tests := []struct {
		name       string
		texts      []string
		hitsSource string
		loadSource string
	}{
		{"reference sample", []string{sample}, "vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"},
		{"legacy names, labelled offload only", []string{legacyNames(sample)},
			"vllm:gpu_prefix_cache_hits_total", `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`},
		{"flat offload names only", []string{flatOffloadOnly(sample)}, "vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"},
		{"two engines", []string{twoEngines(t, sample)}, "vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"},
		{"two engines, legacy names", []string{twoEngines(t, legacyNames(sample))},
			"vllm:gpu_prefix_cache_hits_total", `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`},
		{"two URLs, half each", []string{half, half}, "vllm:prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total"},
		{"two URLs, flat and legacy", []string{flatOffloadOnly(half), legacyNames(half)},
			"vllm:prefix_cache_hits_total + vllm:gpu_prefix_cache_hits_total",
			`vllm:kv_offload_load_bytes_total + vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			var exps []Exposition
			for i, text := range tt.texts {
				exps = append(exps, mustParse(t, text, "variant"+strconv.Itoa(i)))
			}
			snap := mustProfile(t, "vllm").Snapshot(exps...)
			want := map[Counter]float64{
				StoreBytes:         21743271936,
				LoadBytes:          14495514624,
				GPUPrefixHits:      163840,
				ExternalPrefixHits: 98304,
				StoreSeconds:       0.98,
				LoadSeconds:        0.62,
			}
			for c, v := range want {
				if r := snap.Counters[c]; !r.Present || r.Value != v {
					t.Errorf("%s = %+v, want present %v", c, r, v)
				}
			}
			if got := snap.Counters[GPUPrefixHits].Source; got != tt.hitsSource {
				t.Errorf("gpu_prefix_hits source = %q, want %q", got, tt.hitsSource)
			}
			if got := snap.Counters[LoadBytes].Source; got != tt.loadSource {
				t.Errorf("load_bytes source = %q, want %q", got, tt.loadSource)
			}
			if len(snap.Sources) != len(tt.texts) {
				t.Errorf("sources = %v, want %d", snap.Sources, len(tt.texts))
			}
		})
	}
}

func TestSampleAllReadings(t *testing.T) {
	snap := mustProfile(t, "vllm").Snapshot(mustParse(t, readSample(t), "sample"))
	wantCounters := map[Counter]float64{
		GPUPrefixQueries: 409600, GPUPrefixHits: 163840,
		ExternalPrefixQueries: 409600, ExternalPrefixHits: 98304,
		StoreBytes: 21743271936, StoreSeconds: 0.98, LoadBytes: 14495514624, LoadSeconds: 0.62,
		PromptTokens: 409600, GenerationTokens: 12800,
		PromptTokensLocalCompute: 147456, PromptTokensLocalCacheHit: 163840, PromptTokensExternal: 98304,
		PromptTokensCached: 262144, Preemptions: 3,
		AllocationFailures: 0, // served as 0: present, unlike the diagnostics it lacks
	}
	for _, c := range Counters() {
		r := snap.Counters[c]
		want, ok := wantCounters[c]
		if !ok {
			if r.Present || r.Source != "" {
				t.Errorf("%s = %+v, want absent", c, r)
			}
			continue
		}
		if !r.Present || r.Value != want || r.Source == "" {
			t.Errorf("%s = %+v, want present %v with a source", c, r, want)
		}
	}
	wantGauges := map[Gauge]float64{KVUsage: 0.8125, RequestsRunning: 4, RequestsWaiting: 0}
	for g, want := range wantGauges {
		if r := snap.Gauges[g]; !r.Present || r.Value != want {
			t.Errorf("%s = %+v, want present %v", g, r, want)
		}
	}
	c := snap.Cache
	if !c.Present || c.BlockSize != 16 || c.NumGPUBlocks != 15360 || c.GPUKVTokens != 245760 || len(c.Engines) != 1 {
		t.Fatalf("cache = %+v, want 16-token blocks, 15360 blocks, 245760 tokens, one engine", c)
	}
	e := c.Engines[0]
	if e.Engine != "0" || e.CacheDtype != "auto" || e.PrefixCaching == nil || !*e.PrefixCaching ||
		e.KVOffloadingBackend != "native" || e.KVOffloadingSizeGiB != 64 || e.Labels["num_cpu_blocks"] != "None" {
		t.Errorf("engine cache = %+v", e)
	}
}

// Each data-parallel engine has its own pool: report each and the sum; kv_usage is the max.
func TestTwoEnginesCacheAndGauges(t *testing.T) {
	text := twoEngines(t, readSample(t))
	text = strings.Replace(text, `vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.40625`,
		`vllm:kv_cache_usage_perc{engine="1",model_name="Qwen/Qwen3-8B"} 0.9`, 1)
	snap := mustProfile(t, "vllm").Snapshot(mustParse(t, text, "dp2"))
	c := snap.Cache
	if len(c.Engines) != 2 || c.NumGPUBlocks != 30720 || c.GPUKVTokens != 491520 || c.BlockSize != 16 {
		t.Errorf("cache = %+v, want 2 engines of 15360 blocks", c)
	}
	if r := snap.Gauges[KVUsage]; r.Value != 0.9 {
		t.Errorf("kv_usage = %+v, want the max 0.9", r)
	}
	if r := snap.Gauges[RequestsRunning]; r.Value != 4 {
		t.Errorf("requests_running = %+v, want the sum 4", r)
	}
}

func TestLazyFamilies(t *testing.T) {
	legacy := legacyNames(readSample(t))
	loadSeries := regexp.MustCompile(`kv_offload_total_bytes_total\{.*CPU_to_GPU`)
	allSeries := regexp.MustCompile(`^vllm:kv_offload_total_bytes_total\{`)
	wholeFamily := regexp.MustCompile(`vllm:kv_offload_total_bytes_total`)
	tests := []struct {
		name        string
		text        string
		wantPresent bool
		wantSource  string
	}{
		{"series present", legacy, true, `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`},
		{"CPU_to_GPU series not yet created", dropLines(legacy, loadSeries), true,
			`vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"} (lazy, no series yet)`},
		{"only HELP and TYPE lines", dropLines(legacy, allSeries), true,
			`vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"} (lazy, no series yet)`},
		{"family absent", dropLines(legacy, wholeFamily), false, ""},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			r := mustProfile(t, "vllm").Snapshot(mustParse(t, tt.text, "lazy")).Counters[LoadBytes]
			wantValue := 0.0
			if tt.name == "series present" {
				wantValue = 14495514624
			}
			if r.Present != tt.wantPresent || r.Value != wantValue || r.Source != tt.wantSource {
				t.Errorf("load_bytes = %+v, want present=%v value=%v source %q", r, tt.wantPresent, wantValue, tt.wantSource)
			}
		})
	}
}

// A family that is not lazy and has no series is absent, not 0.
func TestDeclaredButEmptyNonLazyFamilyIsAbsent(t *testing.T) {
	text := dropLines(readSample(t), regexp.MustCompile(`^vllm:external_prefix_cache_hits_total\{`))
	r := mustProfile(t, "vllm").Snapshot(mustParse(t, text, "x")).Counters[ExternalPrefixHits]
	if r.Present {
		t.Errorf("external_prefix_hits = %+v, want absent", r)
	}
}

func TestParseRejectsNonExpositions(t *testing.T) {
	tests := []struct {
		name, body, want string
	}{
		{"html page", "<!DOCTYPE html>\n<html><body>Not Found</body></html>", `body starts "<!DOCTYPE html>`},
		{"garbage", "this is not metrics at all\n", "text format parsing error in line 1"},
		{"json error", `{"detail":"Not Found"}`, "text format parsing error"},
		{"empty", "  \n", "empty body"},
		{"comments only", "# just a comment\n", "no metrics"},
		{"bad value", "# TYPE x counter\nx{a=\"b\"} twelve\n", "line 2"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, err := Parse(strings.NewReader(tt.body), "saved.prom")
			if err == nil {
				t.Fatal("Parse succeeded, want an error")
			}
			msg := err.Error()
			if !errors.Is(err, ErrNotExposition) || !strings.HasPrefix(msg, "parse saved.prom: ") ||
				!strings.Contains(msg, tt.want) || strings.Contains(msg, "\n") {
				t.Errorf("error %q: want one line naming the file, wrapping ErrNotExposition, containing %q", msg, tt.want)
			}
		})
	}
}

func TestParseFile(t *testing.T) {
	dir := t.TempDir()
	sample := readSample(t)
	half := scaleSeries(t, sample, []string{"0"}, 0.5)
	var exps []Exposition
	for _, name := range []string{"a.prom", "b.prom"} {
		path := filepath.Join(dir, name)
		if err := os.WriteFile(path, []byte(half), 0o644); err != nil {
			t.Fatal(err)
		}
		exp, err := ParseFile(path)
		if err != nil {
			t.Fatal(err)
		}
		if exp.Source != path || exp.ScrapedAt.IsZero() {
			t.Errorf("exposition source %q at %v, want %q with its mod time", exp.Source, exp.ScrapedAt, path)
		}
		exps = append(exps, exp)
	}
	snap := mustProfile(t, "vllm").Snapshot(exps...)
	if r := snap.Counters[StoreBytes]; r.Value != 21743271936 {
		t.Errorf("store_bytes over two files = %+v", r)
	}
	if _, err := ParseFile(filepath.Join(dir, "missing.prom")); err == nil || !strings.Contains(err.Error(), "missing.prom") {
		t.Errorf("missing file error = %v, want it to name the file", err)
	}
}

func TestLMCacheProfile(t *testing.T) {
	text := readSample(t) + `
# HELP lmcache:num_hit_tokens_total Total number of tokens hit in lmcache
# TYPE lmcache:num_hit_tokens_total counter
lmcache:num_hit_tokens_total{model_name="m",role="worker",worker_id="0"} 1103.0
# HELP lmcache:num_requested_tokens_total Total number of tokens requested from lmcache
# TYPE lmcache:num_requested_tokens_total counter
lmcache:num_requested_tokens_total{model_name="m",role="worker",worker_id="0"} 2048.0
# HELP lmcache:num_stored_tokens_total Total number of tokens stored in lmcache
# TYPE lmcache:num_stored_tokens_total counter
lmcache:num_stored_tokens_total{model_name="m",role="worker",worker_id="0"} 4096.0
`
	exp := mustParse(t, text, "lmcache")
	lm := mustProfile(t, "lmcache").Snapshot(exp)
	// vLLM's own external counters are the connector's hits; LMCache's hit tokens are the
	// second source, and its requested tokens (retrieve-requested, not queries) are not read.
	want := map[Counter]Reading{
		ExternalPrefixHits:    {Value: 98304, Present: true, Source: "vllm:external_prefix_cache_hits_total"},
		ExternalPrefixQueries: {Value: 409600, Present: true, Source: "vllm:external_prefix_cache_queries_total"},
		ConnectorHitTokens:    {Value: 1103, Present: true, Source: "lmcache:num_hit_tokens_total"},
		StoreTokens:           {Value: 4096, Present: true, Source: "lmcache:num_stored_tokens_total"},
		GPUPrefixHits:         {Value: 163840, Present: true, Source: "vllm:prefix_cache_hits_total"},
	}
	for c, w := range want {
		if got := lm.Counters[c]; got != w {
			t.Errorf("lmcache %s = %+v, want %+v", c, got, w)
		}
	}
	if r := mustProfile(t, "vllm").Snapshot(exp).Counters[StoreTokens]; r.Present {
		t.Errorf("vllm store_tokens = %+v, want absent: vLLM has no such counter", r)
	}
}

func TestLlamaCppProfile(t *testing.T) {
	text := `# HELP llamacpp:prompt_tokens_total Number of prompt tokens processed.
# TYPE llamacpp:prompt_tokens_total counter
llamacpp:prompt_tokens_total 1200
# TYPE llamacpp:prompt_tokens_cached_total counter
llamacpp:prompt_tokens_cached_total 800
# TYPE llamacpp:tokens_predicted_total counter
llamacpp:tokens_predicted_total 64
# TYPE llamacpp:requests_processing gauge
llamacpp:requests_processing 1
# TYPE llamacpp:requests_deferred gauge
llamacpp:requests_deferred 2
`
	snap := mustProfile(t, "llamacpp").Snapshot(mustParse(t, text, "llama"))
	want := map[Counter]float64{PromptTokensLocalCompute: 1200, PromptTokensCached: 800, GenerationTokens: 64}
	for _, c := range Counters() {
		r := snap.Counters[c]
		if w, ok := want[c]; ok != r.Present || r.Value != w {
			t.Errorf("%s = %+v, want present=%v %v", c, r, ok, w)
		}
	}
	if snap.Gauges[RequestsRunning].Value != 1 || snap.Gauges[RequestsWaiting].Value != 2 || snap.Gauges[KVUsage].Present {
		t.Errorf("gauges = %+v", snap.Gauges)
	}
	if snap.Cache.Present {
		t.Errorf("cache = %+v, want absent", snap.Cache)
	}
}

func TestWithOverrides(t *testing.T) {
	text := readSample(t) + `
# TYPE myfork:ext_hits_total counter
myfork:ext_hits_total{engine="0"} 7
myfork:ext_hits_total{engine="1"} 5
`
	p, err := mustProfile(t, "vllm").WithOverrides(map[string]string{
		"external_prefix_hits": "myfork:ext_hits_total",
		"store_bytes":          `vllm:kv_offload_total_bytes_total{transfer_type="CPU_to_GPU"}`,
		"kv_usage":             "vllm:num_requests_running",
	})
	if err != nil {
		t.Fatal(err)
	}
	snap := p.Snapshot(mustParse(t, text, "fork"))
	if r := snap.Counters[ExternalPrefixHits]; r.Value != 12 || r.Source != "myfork:ext_hits_total" {
		t.Errorf("overridden external_prefix_hits = %+v, want 12 from myfork:ext_hits_total", r)
	}
	if r := snap.Counters[StoreBytes]; r.Value != 14495514624 {
		t.Errorf("overridden store_bytes = %+v, want the CPU_to_GPU series", r)
	}
	if r := snap.Gauges[KVUsage]; r.Value != 4 {
		t.Errorf("overridden kv_usage = %+v", r)
	}
	if base := mustProfile(t, "vllm"); len(base.Counters[ExternalPrefixHits]) != 1 ||
		base.Counters[ExternalPrefixHits][0].Metric != "vllm:external_prefix_cache_hits_total" {
		t.Errorf("override leaked into the built-in profile: %v", base.Counters[ExternalPrefixHits])
	}

	for key, sel := range map[string]string{"external_hitz": "x_total", "load_bytes": `x{a="b"`, "store_bytes": "9bad"} {
		_, err := mustProfile(t, "vllm").WithOverrides(map[string]string{key: sel})
		if err == nil || !strings.Contains(err.Error(), key) {
			t.Errorf("override %s=%s: error %v, want one naming %s", key, sel, err, key)
		}
	}
}

func TestParseSelector(t *testing.T) {
	tests := []struct {
		in      string
		want    string
		wantErr bool
	}{
		{"vllm:prefix_cache_hits_total", "vllm:prefix_cache_hits_total", false},
		{` a:b{ z="1" , a="x\"y" } `, `a:b{a="x\"y",z="1"}`, false},
		{`a{}`, "a", false},
		{`a{b="c",}`, `a{b="c"}`, false},
		{"", "", true},
		{"a b", "", true},
		{`a{b=c}`, "", true},
		{`a{b="c"`, "", true},
		{`a{b="c" d="e"}`, "", true},
		{`a{b="c",b="d"}`, "", true},
		{`a{b="\q"}`, "", true},
	}
	for _, tt := range tests {
		s, err := ParseSelector(tt.in)
		if (err != nil) != tt.wantErr {
			t.Errorf("ParseSelector(%q) error = %v, want error %v", tt.in, err, tt.wantErr)
			continue
		}
		if err == nil && s.String() != tt.want {
			t.Errorf("ParseSelector(%q) = %s, want %s", tt.in, s, tt.want)
		}
	}
}

func BenchmarkScrapeParseSample(b *testing.B) {
	sample := []byte(readSample(b))
	p := mustProfile(b, "vllm")
	b.ReportAllocs()
	b.SetBytes(int64(len(sample)))
	for b.Loop() {
		exp, err := Parse(bytes.NewReader(sample), "sample")
		if err != nil {
			b.Fatal(err)
		}
		if s := p.Snapshot(exp); !s.Counters[LoadBytes].Present {
			b.Fatal("load bytes absent")
		}
	}
}

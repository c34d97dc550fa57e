package sim

import (
	"io"
	"net/http"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"
	openai "github.com/sashabaranov/go-openai"
)

// chat sends one streaming request with usage and drains it, returning the usage.
func chat(t *testing.T, s *Server, text string, maxTokens int) *openai.Usage {
	t.Helper()
	stream, err := openAIClient(s, "").CreateChatCompletionStream(testContext(t), openai.ChatCompletionRequest{
		Model:         s.Profile().ServedModelName,
		Messages:      userMessage(text),
		MaxTokens:     maxTokens,
		Stream:        true,
		StreamOptions: &openai.StreamOptions{IncludeUsage: true},
	})
	if err != nil {
		t.Fatal(err)
	}
	defer stream.Close()
	var usage *openai.Usage
	for range 100000 {
		chunk, err := stream.Recv()
		if err == io.EOF {
			return usage
		}
		if err != nil {
			t.Fatal(err)
		}
		if chunk.Usage != nil {
			usage = chunk.Usage
		}
	}
	t.Fatal("stream did not end")
	return nil
}

// tinyEvictionReplay sends prompt 0, three other ~1500-token prompts (376 blocks through
// tiny's 256-block pool) and prompt 0 again, which reloads from the 512-block CPU tier.
func tinyEvictionReplay(t *testing.T, s *Server) (replay *openai.Usage) {
	t.Helper()
	for seed := uint64(0); seed < 4; seed++ {
		chat(t, s, proseOfTokens(1500, seed), 4)
	}
	return chat(t, s, proseOfTokens(1500, 0), 4)
}

func TestMetricsMatchEngine(t *testing.T) {
	s := startTiny(t, nil)
	replay := tinyEvictionReplay(t, s)
	fams := metrics(t, s)
	c := s.Engine().Counters()
	if c.ExternalPrefixCacheHits == 0 || replay.PromptTokensDetails == nil ||
		replay.PromptTokensDetails.CachedTokens != int(c.ExternalPrefixCacheHits) {
		t.Fatalf("replay did not reload: external hits %d, usage %+v", c.ExternalPrefixCacheHits, replay)
	}
	type series struct {
		name   string
		labels []string
		want   float64
	}
	for _, m := range []series{
		{"vllm:num_requests_running", nil, 0},
		{"vllm:num_requests_waiting", nil, 0},
		{"vllm:kv_cache_usage_perc", nil, c.KVCacheUsage},
		{"vllm:prefix_cache_queries_total", nil, float64(c.PrefixCacheQueries)},
		{"vllm:prefix_cache_hits_total", nil, float64(c.PrefixCacheHits)},
		{"vllm:external_prefix_cache_queries_total", nil, float64(c.ExternalPrefixCacheQueries)},
		{"vllm:external_prefix_cache_hits_total", nil, float64(c.ExternalPrefixCacheHits)},
		{"vllm:num_preemptions_total", nil, 0},
		{"vllm:prompt_tokens_total", nil, float64(c.PromptTokens)},
		{"vllm:prompt_tokens_by_source_total", []string{"source", "local_compute"}, float64(c.PromptTokensLocalCompute)},
		{"vllm:prompt_tokens_by_source_total", []string{"source", "local_cache_hit"}, float64(c.PromptTokensLocalCacheHit)},
		{"vllm:prompt_tokens_by_source_total", []string{"source", "external_kv_transfer"}, float64(c.PromptTokensExternalKVTransfer)},
		{"vllm:prompt_tokens_cached_total", nil, float64(c.PromptTokensCached)},
		{"vllm:generation_tokens_total", nil, 20},
		{"vllm:request_success_total", []string{"finished_reason", "length"}, 5},
		{"vllm:time_to_first_token_seconds", nil, 5},
		{"vllm:e2e_request_latency_seconds", nil, 5},
		{"vllm:inter_token_latency_seconds", nil, 15},
		{"vllm:cache_config_info", []string{"block_size", "16", "num_gpu_blocks", "256", "kv_offloading_backend", "native", "enable_prefix_caching", "True"}, 1},
		{"vllm:kv_offload_total_bytes_total", []string{"transfer_type", "GPU_to_CPU"}, float64(c.GPUToCPUBytes)},
		{"vllm:kv_offload_total_bytes_total", []string{"transfer_type", "CPU_to_GPU"}, float64(c.CPUToGPUBytes)},
		{"vllm:kv_offload_size", []string{"transfer_type", "CPU_to_GPU"}, 1},
		{"vllm:kv_offload_size", []string{"transfer_type", "GPU_to_CPU"}, 4}, // the replay stores nothing new
		{"vllm:kv_offload_store_bytes_total", nil, float64(c.GPUToCPUBytes)},
		{"vllm:kv_offload_load_bytes_total", nil, float64(c.CPUToGPUBytes)},
		{"vllm:kv_offload_load_size", nil, 1},
		{"vllm:kv_offload_allocation_failure_total", nil, 0},
	} {
		if got := metricSum(fams, m.name, m.labels...); got != m.want {
			t.Errorf("%s%v = %g, want %g", m.name, m.labels, got, m.want)
		}
	}
	if c.CPUToGPUBytes != c.ExternalPrefixCacheHits*2048 {
		t.Errorf("load bytes %d != external hits %d x 2048", c.CPUToGPUBytes, c.ExternalPrefixCacheHits)
	}
	for _, name := range []string{"vllm:kv_offload_load_time_total", "vllm:kv_offload_store_time_total"} {
		if got := metricSum(fams, name); got <= 0 {
			t.Errorf("%s = %g, want > 0", name, got)
		}
	}
	if got := metricSum(fams, "process_start_time_seconds"); got <= 0 {
		t.Errorf("process_start_time_seconds = %g, want the start time", got)
	}
	for name, f := range fams {
		if name == "process_start_time_seconds" { // prometheus_client's, unlabelled
			continue
		}
		if f.GetHelp() == "" {
			t.Errorf("%s has no HELP", name)
		}
		for _, m := range f.GetMetric() {
			if !hasLabel(m, "engine", "0") || name != "vllm:cache_config_info" && !hasLabel(m, "model_name", "tiny-sim") {
				t.Errorf("%s series %v lacks engine or model_name", name, m.GetLabel())
			}
		}
	}
}

func hasLabel(m *dto.Metric, name, value string) bool {
	for _, l := range m.GetLabel() {
		if l.GetName() == name && l.GetValue() == value {
			return true
		}
	}
	return false
}

func rawMetrics(t *testing.T, s *Server) string {
	t.Helper()
	resp, err := http.Get(s.URL() + "/metrics")
	if err != nil {
		t.Fatal(err)
	}
	defer resp.Body.Close()
	b, _ := io.ReadAll(resp.Body)
	return string(b)
}

func TestMetricSwitches(t *testing.T) {
	t.Run("legacy names", func(t *testing.T) {
		s := startTiny(t, func(p *Profile) { p.LegacyNames = true })
		chat(t, s, "hello", 2)
		fams := metrics(t, s)
		for _, name := range []string{"vllm:gpu_prefix_cache_queries_total", "vllm:gpu_prefix_cache_hits_total", "vllm:gpu_cache_usage_perc", "vllm:kv_offload_total_bytes_total"} {
			if _, ok := fams[name]; !ok {
				t.Errorf("%s missing", name)
			}
		}
		for _, name := range []string{"vllm:prefix_cache_queries_total", "vllm:kv_cache_usage_perc", "vllm:kv_offload_store_bytes_total"} {
			if _, ok := fams[name]; ok {
				t.Errorf("%s present with legacy names", name)
			}
		}
	})
	t.Run("lazy offload series", func(t *testing.T) {
		s := startTiny(t, func(p *Profile) { p.LazyOffloadSeries = true })
		if text := rawMetrics(t, s); !strings.Contains(text, "# TYPE vllm:kv_offload_total_bytes_total counter") ||
			strings.Contains(text, `transfer_type="`) || strings.Contains(text, "kv_offload_store_bytes_total") {
			t.Fatalf("idle lazy exposition has transfer series or lacks TYPE lines:\n%s", text)
		}
		chat(t, s, "hello there, a first prompt", 2)
		fams := metrics(t, s)
		if metricSum(fams, "vllm:kv_offload_total_bytes_total", "transfer_type", "GPU_to_CPU") != 0 &&
			metricSum(fams, "vllm:kv_offload_total_bytes_total", "transfer_type", "CPU_to_GPU") != 0 {
			t.Error("want a GPU_to_CPU series and no CPU_to_GPU series yet")
		}
		text := rawMetrics(t, s)
		if !strings.Contains(text, `transfer_type="GPU_to_CPU"`) || strings.Contains(text, `transfer_type="CPU_to_GPU"`) {
			t.Errorf("after a store only GPU_to_CPU should exist:\n%s", text)
		}
	})
	t.Run("flat only", func(t *testing.T) {
		s := startTiny(t, func(p *Profile) { p.LabelledOffloadMetrics = false })
		fams := metrics(t, s)
		if _, ok := fams["vllm:kv_offload_total_bytes_total"]; ok {
			t.Error("labelled generation present")
		}
		if _, ok := fams["vllm:kv_offload_store_bytes_total"]; !ok {
			t.Error("flat generation missing")
		}
	})
	t.Run("data parallel", func(t *testing.T) {
		single := startTiny(t, nil)
		dp := startTiny(t, func(p *Profile) { p.DataParallelEngines = 3 })
		for _, s := range []*Server{single, dp} {
			tinyEvictionReplay(t, s)
		}
		one, three := metrics(t, single), metrics(t, dp)
		for _, name := range []string{"vllm:prompt_tokens_total", "vllm:prefix_cache_queries_total",
			"vllm:external_prefix_cache_hits_total", "vllm:kv_offload_load_bytes_total",
			"vllm:generation_tokens_total", "vllm:time_to_first_token_seconds"} {
			if a, b := metricSum(one, name), metricSum(three, name); a != b || a <= 0 {
				t.Errorf("%s: one engine %g, sum of three %g", name, a, b)
			}
			if n := len(three[name].GetMetric()); n != 3 {
				t.Errorf("%s: %d series, want 3", name, n)
			}
		}
		if got := metricSum(three, "vllm:kv_offload_total_bytes_total", "transfer_type", "CPU_to_GPU"); got != metricSum(one, "vllm:kv_offload_total_bytes_total", "transfer_type", "CPU_to_GPU") {
			t.Errorf("labelled load bytes differ: %g", got)
		}
		blocks := 0.0
		for _, m := range three["vllm:cache_config_info"].GetMetric() {
			for _, l := range m.GetLabel() {
				if l.GetName() == "num_gpu_blocks" {
					var v float64
					for _, ch := range l.GetValue() {
						v = v*10 + float64(ch-'0')
					}
					blocks += v
				}
			}
		}
		if blocks != 256 {
			t.Errorf("num_gpu_blocks over engines = %g, want 256", blocks)
		}
	})
	t.Run("prompt tokens details off", func(t *testing.T) {
		s := startTiny(t, func(p *Profile) { p.EnablePromptTokensDetails = false })
		chat(t, s, "same prompt, twice over, to hit the cache", 2)
		if u := chat(t, s, "same prompt, twice over, to hit the cache", 2); u.PromptTokensDetails != nil {
			t.Errorf("details reported: %+v", u.PromptTokensDetails)
		}
	})
}

func TestShareSplitsExactly(t *testing.T) {
	for _, n := range []int{1, 2, 3, 7} {
		previous := make([]uint64, n)
		for v := uint64(0); v < 50; v++ {
			sum := uint64(0)
			for i := range n {
				part := share(v, i, n)
				if part < previous[i] {
					t.Fatalf("n=%d: engine %d went from %d to %d at v=%d", n, i, previous[i], part, v)
				}
				previous[i] = part
				sum += part
			}
			if sum != v {
				t.Fatalf("n=%d: parts of %d sum to %d", n, v, sum)
			}
		}
	}
}

func TestFormatFloat(t *testing.T) {
	for v, want := range map[float64]string{4: "4.0", 0.8125: "0.8125", 2.1743271936e10: "2.1743271936e+10", 1e6: "1e+06"} {
		if got := formatFloat(v); got != want {
			t.Errorf("formatFloat(%g) = %q, want %q", v, got, want)
		}
	}
}

package metrics_test

import (
	"encoding/json"
	"github.com/anvil-serving/kvbench/harness/engine"
	. "github.com/anvil-serving/kvbench/harness/metrics"
	"os"
	"strings"
	"testing"
)

func FuzzParse(f *testing.F) {
	sample, err := os.ReadFile(samplePath)
	if err != nil {
		f.Fatal(err)
	}
	f.Add(string(sample))
	lines := strings.Split(string(sample), "\n")
	for _, n := range []int{3, 17, 40} { // cut inside families and mid-line
		f.Add(strings.Join(lines[:n], "\n"))
		f.Add(strings.Join(lines[:n], "\n")[:len(strings.Join(lines[:n], "\n"))-5])
	}
	for _, seed := range []string{
		`vllm:x_total{a="b\"c\\d\ne"} 1`,
		`vllm:x_total{a="\q"} 1`,
		`vllm:x_total{a="unterminated} 1`,
		`vllm:x_total{,} 1`,
		`{"quoted.name",a="b"} 2`,
		"# TYPE vllm:kv_offload_total_bytes_total counter\n",
		"# HELP\n# TYPE\n# TYPE x histogram\nx_bucket{le=\"+Inf\"} 1\nx_count 1\n",
		"x NaN\ny +Inf\nz -Inf\n",
		"vllm:cache_config_info{block_size=\"-1\",num_gpu_blocks=\"99999999999999999999\",kv_offloading_size=\"Inf\"} 1\n",
		"<html></html>",
		"llamacpp:prompt_tokens_total 1.23457e+06\nllamacpp:x{a=\"}\\\"\"} 9.9e+15 7\ny 1E+300\n",
		"\x00\xff\xfe",
	} {
		f.Add(seed)
	}
	var profiles []Profile
	for _, d := range engine.All() {
		profiles = append(profiles, d.Profile())
	}
	f.Fuzz(func(t *testing.T, text string) {
		exp, err := Parse(strings.NewReader(text), "fuzz")
		if err != nil {
			return
		}
		for _, p := range profiles {
			snap := p.Snapshot(exp, exp)
			if _, err := json.Marshal(snap); err != nil {
				t.Fatalf("snapshot does not marshal: %v", err)
			}
		}
	})
}

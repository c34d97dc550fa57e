package main

import (
	"bytes"
	"context"
	"encoding/json"
	"io"
	"net/http"
	"net/http/httptest"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

const counterSample = "../../harness/record/testdata/reference/vllm-metrics-sample.prom"

// counterReadings is the part of `kvbench counters` output the tests check.
type counterReadings struct {
	Backend  string   `json:"backend"`
	Sources  []string `json:"sources"`
	Counters map[string]struct {
		Value   *float64 `json:"value"`
		Present bool     `json:"present"`
		Source  string   `json:"source"`
		Note    string   `json:"note"`
	} `json:"counters"`
	Cache struct {
		BlockSize    int `json:"block_size"`
		NumGPUBlocks int `json:"num_gpu_blocks_total"`
		GPUKVTokens  int `json:"gpu_kv_tokens_total"`
	} `json:"cache"`
}

func runCountersCLI(t *testing.T, args ...string) (counterReadings, string, error) {
	t.Helper()
	var out, errOut bytes.Buffer
	err := run(context.Background(), append([]string{"counters"}, args...), &out, &errOut)
	var got counterReadings
	if err == nil {
		if jerr := json.Unmarshal(out.Bytes(), &got); jerr != nil {
			t.Fatalf("output is not JSON: %v\n%s", jerr, out.String())
		}
	}
	return got, out.String(), err
}

func TestCountersCommand(t *testing.T) {
	sample, err := os.ReadFile(counterSample)
	if err != nil {
		t.Fatal(err)
	}
	srv := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/plain; version=0.0.4")
		w.Write(sample)
	}))
	defer srv.Close()
	tests := []struct {
		name  string
		args  []string
		scale float64           // how many copies of the sample the arguments add up to
		want  map[string]string // expected source of overridden counters
	}{
		{"file", []string{counterSample}, 1, nil},
		{"file and URL summed", []string{counterSample, srv.URL + "/metrics"}, 2, nil},
		{"override", []string{counterSample, "--metric", `external_prefix_hits=vllm:prompt_tokens_by_source_total{source="local_compute"}`}, 1,
			map[string]string{"external_prefix_hits": `vllm:prompt_tokens_by_source_total{source="local_compute"}`}},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			got, out, err := runCountersCLI(t, tt.args...)
			if err != nil {
				t.Fatal(err)
			}
			want := map[string]float64{
				"store_bytes": 21743271936, "load_bytes": 14495514624, "gpu_prefix_hits": 163840, "external_prefix_hits": 98304,
			}
			if tt.want != nil {
				want["external_prefix_hits"] = 147456
			}
			for name, v := range want {
				r := got.Counters[name]
				if !r.Present || r.Value == nil || *r.Value != v*tt.scale || r.Source == "" {
					t.Errorf("%s = %+v, want %v with a source", name, r, v*tt.scale)
				}
				if src, ok := tt.want[name]; ok && r.Source != src {
					t.Errorf("%s source = %q, want %q", name, r.Source, src)
				}
			}
			if r := got.Counters["store_tokens"]; r.Present || r.Value != nil {
				t.Errorf("store_tokens = %+v, want absent (null)", r)
			}
			if got.Backend != "vllm" || len(got.Sources) != int(tt.scale) {
				t.Errorf("backend %q sources %v", got.Backend, got.Sources)
			}
			if got.Cache.BlockSize != 16 || got.Cache.NumGPUBlocks != 15360*int(tt.scale) || got.Cache.GPUKVTokens != 245760*int(tt.scale) {
				t.Errorf("cache = %+v", got.Cache)
			}
			if !strings.HasPrefix(out, "{\n  \"schema\": \"anvil-serving.kvbench-counters/v1\",\n") {
				t.Errorf("output does not lead with its schema:\n%s", out)
			}
			if !strings.Contains(out, "\n  \"counters\": {") {
				t.Errorf("output is not indented JSON:\n%s", out)
			}
		})
	}
}

func TestCountersBadInput(t *testing.T) {
	html := httptest.NewServer(http.HandlerFunc(func(w http.ResponseWriter, r *http.Request) {
		w.Header().Set("Content-Type", "text/html")
		w.Write([]byte("<html><body>dashboard</body></html>"))
	}))
	defer html.Close()
	missing := httptest.NewServer(http.NotFoundHandler())
	defer missing.Close()
	garbage := filepath.Join(t.TempDir(), "garbage.prom")
	if err := os.WriteFile(garbage, []byte("not an exposition\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	tests := []struct {
		name string
		args []string
		want string
	}{
		{"no arguments", nil, "give at least one"},
		{"missing file", []string{"/nonexistent/metrics.prom"}, "/nonexistent/metrics.prom"},
		{"garbage file", []string{garbage}, "garbage.prom"},
		{"HTML page", []string{html.URL + "/metrics"}, "text/html"},
		{"404", []string{missing.URL + "/metrics"}, "404 Not Found"},
		{"unknown backend", []string{counterSample, "--backend", "tgi"}, `"tgi"`},
		{"unknown counter", []string{counterSample, "--metric", "hitz=x_total"}, "hitz"},
		{"bad selector", []string{counterSample, "--metric", "load_bytes=x{"}, "load_bytes"},
		{"override without =", []string{counterSample, "--metric", "load_bytes"}, "COUNTER=SELECTOR"},
	}
	for _, tt := range tests {
		t.Run(tt.name, func(t *testing.T) {
			_, out, err := runCountersCLI(t, tt.args...)
			if code := cli.ExitCode(err, io.Discard); code != cli.ExitUsage {
				t.Fatalf("exit code %d (%v), want %d", code, err, cli.ExitUsage)
			}
			var stderr bytes.Buffer
			cli.ExitCode(err, &stderr)
			if msg := stderr.String(); !strings.Contains(msg, tt.want) || strings.Count(msg, "\n") != 1 {
				t.Errorf("stderr %q: want one line containing %q", msg, tt.want)
			}
			// counters prints only JSON, so its failure is a JSON document on stdout too.
			var doc cli.ErrorDoc
			if err := json.Unmarshal([]byte(out), &doc); err != nil || doc.ExitCode != cli.ExitUsage || !strings.Contains(doc.Error.Message, tt.want) {
				t.Errorf("stdout on error: %q (%v)", out, err)
			}
		})
	}
}

func TestCountersHelpShowsExample(t *testing.T) {
	var out bytes.Buffer
	err := run(context.Background(), []string{"counters", "-h"}, &out, io.Discard)
	if code := cli.ExitCode(err, io.Discard); code != cli.ExitOK {
		t.Fatalf("exit code %d", code)
	}
	for _, want := range []string{"Usage: kvbench counters URL|FILE...", "Example:", "kvbench counters http://localhost:8000/metrics", "-backend", "-metric"} {
		if !strings.Contains(out.String(), want) {
			t.Errorf("help lacks %q:\n%s", want, out.String())
		}
	}
}

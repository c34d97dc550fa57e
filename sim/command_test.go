package sim

import (
	"flag"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"
)

// simOptions parses args as kvbench sim's flags and builds their Options.
func simOptions(t *testing.T, args ...string) (Options, error) {
	t.Helper()
	fs := flag.NewFlagSet("sim", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	options := RegisterFlags(fs)
	if err := fs.Parse(args); err != nil {
		t.Fatalf("parse %q: %v", args, err)
	}
	return options()
}

// TestFlagsOverrideProfile: a fault flag given overrides the profile's key, even with 0; a
// flag left out keeps the profile's; repeatable flags add to the profile's lists.
func TestFlagsOverrideProfile(t *testing.T) {
	tiny, err := os.ReadFile("profiles/tiny.toml")
	if err != nil {
		t.Fatal(err)
	}
	file := filepath.Join(t.TempDir(), "faulty.toml")
	faults := "\nfail_every_nth_request = 3\nhang_every_nth_request = 7\nhang_paths = [\"/v1/models\"]\nmetric_values = { \"vllm:prompt_tokens_total\" = 5.0 }\n"
	if err := os.WriteFile(file, append(tiny, faults...), 0o644); err != nil {
		t.Fatal(err)
	}
	t.Setenv("KVBENCH_TEST_SIM_KEY", "sekrit")
	opts, err := simOptions(t, "--profile-file", file, "--addr", "localhost:0", "--speed", "7", "--api-key-env", "KVBENCH_TEST_SIM_KEY",
		"--fail-every", "0", "--metrics-delay", "2s", "--hang", "/tokenize", "--omit-metric", "vllm:prefix_cache_hits_total",
		"--metric-value", "vllm:generation_tokens_total=-Inf", "--data-parallel", "2", "--router", "prefix-affinity")
	if err != nil {
		t.Fatal(err)
	}
	if opts.ProfileFile != file || opts.Addr != "localhost:0" || opts.Speed != 7 || opts.APIKey != "sekrit" || opts.Override == nil {
		t.Fatalf("options %+v", opts)
	}
	p, err := LoadProfileFile(file)
	if err != nil {
		t.Fatal(err)
	}
	opts.Override(&p)
	if p.FailEveryNthRequest != 0 || p.HangEveryNthRequest != 7 || p.MetricsDelay != 2*time.Second {
		t.Errorf("fail every %d (want 0: given), hang every %d (want 7: kept), metrics delay %v",
			p.FailEveryNthRequest, p.HangEveryNthRequest, p.MetricsDelay)
	}
	if !slices.Equal(p.HangPaths, []string{"/v1/models", "/tokenize"}) || !slices.Equal(p.OmitMetrics, []string{"vllm:prefix_cache_hits_total"}) {
		t.Errorf("hang paths %q, omitted %q", p.HangPaths, p.OmitMetrics)
	}
	if p.MetricValues["vllm:prompt_tokens_total"] != 5 || !math.IsInf(p.MetricValues["vllm:generation_tokens_total"], -1) {
		t.Errorf("metric values %v", p.MetricValues)
	}
	if p.DataParallel != 2 || p.Router != RouterPrefixAffinity || p.Dialect != DialectVLLM {
		t.Errorf("data parallel %d router %q dialect %q", p.DataParallel, p.Router, p.Dialect)
	}
	opts, err = simOptions(t, "--profile", "tiny", "--dialect", "sglang:unlabelled")
	if err != nil {
		t.Fatal(err)
	}
	if p, _ = LoadProfile("tiny"); opts.Profile != "tiny" || opts.Addr != "127.0.0.1:8000" {
		t.Errorf("options %+v", opts)
	}
	opts.Override(&p)
	if p.Dialect != DialectSGLang || p.DialectVersion != SGLangUnlabelled {
		t.Errorf("--dialect sglang:unlabelled gave %q %q", p.Dialect, p.DialectVersion)
	}
}

func TestFlagsErrors(t *testing.T) {
	t.Setenv("KVBENCH_TEST_EMPTY_KEY", "")
	tests := []struct {
		args []string
		want string
	}{
		{[]string{"--addr", "0.0.0.0:8000"}, `--addr "0.0.0.0:8000" is not a loopback address (pass --allow-remote`},
		{[]string{"--addr", ":8000"}, `--addr ":8000" is not a loopback address`},
		{[]string{"--addr", "8000"}, `--addr "8000": address 8000: missing port in address`},
		{[]string{"--speed", "-1"}, "--speed -1 must be >= 0"},
		{[]string{"--api-key-env", "KVBENCH_TEST_EMPTY_KEY"}, "environment variable KVBENCH_TEST_EMPTY_KEY from --api-key-env is empty"},
		{[]string{"--fail-every", "-1"}, "--fail-every -1 must be >= 0"},
		{[]string{"--store-threshold", "-2"}, "--store-threshold -2 must be >= 0"},
		{[]string{"--metrics-delay", "-1s"}, "--metrics-delay -1s must be >= 0"},
		{[]string{"--metric-value", "vllm:prompt_tokens_total"}, `--metric-value "vllm:prompt_tokens_total": want NAME=VALUE`},
		{[]string{"--metric-value", "=1"}, `--metric-value "=1": want NAME=VALUE`},
		{[]string{"--metric-value", "vllm:prompt_tokens_total=lots"}, `--metric-value "vllm:prompt_tokens_total=lots": want NAME=VALUE`},
		{[]string{"--profile", "tiny", "--profile-file", "x.toml"}, "give --profile or --profile-file, not both"},
		{[]string{"--profile", "no-such-profile"}, `unknown simulator profile "no-such-profile"`},
		{[]string{"--profile-file", "testdata/no-such-profile.toml"}, "no-such-profile.toml"},
		// Validate sees the profile with the flags applied.
		{[]string{"--profile", "tiny", "--metric-value", "vllm:no_such_metric=1"}, "vllm:no_such_metric"},
		{[]string{"--profile", "tiny", "--hang", "/v1/nothing"}, "/v1/nothing"},
		{[]string{"--profile", "tiny", "--metrics-fault", "slow"}, "slow"},
		{[]string{"--profile", "tiny", "--data-parallel", "2", "--router", "random"}, `router "random"`},
	}
	for _, tt := range tests {
		_, err := simOptions(t, tt.args...)
		if err == nil || !strings.Contains(err.Error(), tt.want) {
			t.Errorf("%q: err %v, want one containing %q", tt.args, err, tt.want)
		}
	}
	// --allow-remote lifts the loopback rule (nothing listens yet).
	if _, err := simOptions(t, "--profile", "tiny", "--addr", "0.0.0.0:0", "--allow-remote"); err != nil {
		t.Errorf("--allow-remote: %v", err)
	}
}

func TestRequireLoopback(t *testing.T) {
	for addr, ok := range map[string]bool{
		"127.0.0.1:8000": true, "localhost:0": true, "[::1]:8000": true, "127.1.2.3:80": true,
		"0.0.0.0:8000": false, ":8000": false, "192.0.2.1:8000": false, "[::]:8000": false, "example.com:80": false, "8000": false,
	} {
		if err := requireLoopback(addr); (err == nil) != ok {
			t.Errorf("requireLoopback(%q) = %v, want ok %v", addr, err, ok)
		}
	}
}

// TestBanner: the banner says where the server is, how to read another dialect with
// kvbench, and the faults injected.
func TestBanner(t *testing.T) {
	opts, err := simOptions(t, "--profile", "tiny", "--addr", "127.0.0.1:0", "--dialect", "sglang", "--fail-every", "4")
	if err != nil {
		t.Fatal(err)
	}
	srv, err := Start(opts)
	if err != nil {
		t.Fatal(err)
	}
	defer srv.Close()
	want := "kvbench sim serving " + srv.URL() + " (OpenAI base URL " + srv.URL() + "/v1); interrupt to stop\n" +
		srv.Profile().Summary() + "\n" +
		"speaking sglang: run with --backend sglang --metrics " + srv.URL() + "/metrics\n" +
		"faults: fail_every_nth_request = 4\n"
	if got := srv.Banner(); got != want {
		t.Errorf("banner\n%s\nwant\n%s", got, want)
	}
	plain, err := Start(Options{Profile: "tiny"})
	if err != nil {
		t.Fatal(err)
	}
	defer plain.Close()
	if b := plain.Banner(); strings.Contains(b, "speaking") || strings.Contains(b, "faults") || strings.Count(b, "\n") != 2 {
		t.Errorf("vLLM banner without faults:\n%s", b)
	}
}

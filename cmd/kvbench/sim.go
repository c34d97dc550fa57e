package main

import (
	"context"
	"flag"
	"fmt"
	"io"
	"net"
	"os"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/sim"
)

func init() {
	register(command{
		name:    "sim",
		summary: "serve the embedded vLLM-compatible engine (no GPU needed)",
		run:     runSim,
	})
}

func runSim(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("sim", "[--profile NAME | --profile-file FILE] [--addr HOST:PORT] [--speed X] [--api-key-env VAR] [--allow-remote] [--data-parallel N --router POLICY] [fault flags]",
		"kvbench sim --profile dsv4-offload16 --speed 50\n"+
			"curl -s http://127.0.0.1:8000/metrics | grep kv_offload\n"+
			"# rehearse faults: every 5th chat a 500, /tokenize hangs, no GPU prefix-hit counter,\n"+
			"# NaN prompt tokens, /metrics dead after 20 scrapes\n"+
			"kvbench sim --profile tiny --fail-every 5 --hang /tokenize --omit-metric vllm:prefix_cache_hits_total \\\n"+
			"  --metric-value vllm:prompt_tokens_total=NaN --metrics-fault error --metrics-fault-after 20\n"+
			"# two replicas, each with its own caches, requests sent in turn\n"+
			"kvbench sim --profile tiny --data-parallel 2 --router round-robin", stdout)
	profile := fs.String("profile", "dsv4-offload16", "embedded profile: "+strings.Join(sim.ProfileNames(), ", "))
	profileFile := fs.String("profile-file", "", "profile TOML file to serve instead of an embedded profile (same keys, faults included)")
	addr := fs.String("addr", "127.0.0.1:8000", "listen address HOST:PORT")
	speed := fs.Float64("speed", 0, "time scale factor (10 = ten times faster); 0 keeps the profile's")
	keyEnv := fs.String("api-key-env", "", "environment variable holding the API key /v1 requests must send")
	allowRemote := fs.Bool("allow-remote", false, "allow listening on a non-loopback address")
	// Fault flags override the profile's fault keys (named in parentheses).
	failEvery := fs.Int("fail-every", 0, "fault: chat requests N, 2N, ... get HTTP 500 (fail_every_nth_request)")
	cutAfter := fs.Int("cut-stream-after", 0, "fault: streams drop the connection after K tokens, no [DONE] (cut_stream_after_tokens)")
	malformedAt := fs.Int("malformed-sse-at", 0, "fault: a broken data: line precedes token K of every stream (malformed_sse_at_token)")
	restartAt := fs.Int("restart-at", 0, "fault: chat request R finds counters and caches reset, as after a restart (restart_at_request)")
	metricsDelay := fs.Duration("metrics-delay", 0, "fault: /metrics answers after this long (metrics_delay)")
	metricsFault := fs.String("metrics-fault", "", "fault: /metrics dies: error (HTTP 500) or hang (never answers) (metrics_fault)")
	metricsFaultAfter := fs.Int("metrics-fault-after", 0, "good /metrics scrapes before --metrics-fault starts (metrics_fault_after)")
	hangEvery := fs.Int("hang-every", 0, "fault: chat requests N, 2N, ... are read and never answered (hang_every_nth_request)")
	allocFailEvery := fs.Int("allocation-fail-every", 0, "fault: block stores N, 2N, ... find no room in the CPU tier (allocation_fail_every_nth_store)")
	dataParallel := fs.Int("data-parallel", 0, "run N independent replicas (each its own GPU pool and CPU tier) behind the one endpoint (data_parallel)")
	router := fs.String("router", "", "how --data-parallel replicas get requests: "+strings.Join(sim.Routers, " or ")+" (router)")
	dialect := fs.String("dialect", "", "serve another engine's metrics and API fields: NAME or NAME:VERSION, e.g. sglang:unlabelled, vllm:simple, llamacpp:no-cached-counter (dialect, dialect_version)")
	corruptReload := fs.Bool("corrupt-reload", false, "fault: blocks loaded from the CPU tier hold other KV than was stored, so a reloaded prompt answers differently (corrupt_reload)")
	storeThreshold := fs.Int("store-threshold", 0, "vLLM's store_threshold: store a block only after N lookups, N >= 2 (store_threshold)")
	var hangPaths, omitMetrics, metricValues stringList
	fs.Var(&hangPaths, "hang", "fault, repeatable: every request to this route is read and never answered, e.g. /v1/models (hang_paths)")
	fs.Var(&omitMetrics, "omit-metric", "fault, repeatable: leave this family out of /metrics, e.g. vllm:prefix_cache_hits_total (omit_metrics)")
	fs.Var(&metricValues, "metric-value", "fault, repeatable: NAME=VALUE pins every sample of a family, VALUE NaN, +Inf, -Inf or a number (metric_values)")
	positional, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(positional) > 0 {
		return usageErrorf("sim: unexpected arguments %q", positional)
	}
	if !*allowRemote {
		if err := requireLoopback(*addr); err != nil {
			return usageErrorf("sim: %v (pass --allow-remote to serve other machines)", err)
		}
	}
	if *speed < 0 {
		return usageErrorf("sim: --speed %g must be >= 0", *speed)
	}
	var apiKey string
	if *keyEnv != "" {
		if apiKey = os.Getenv(*keyEnv); apiKey == "" {
			return usageErrorf("sim: environment variable %s from --api-key-env is empty", *keyEnv)
		}
	}
	set := map[string]bool{}
	fs.Visit(func(f *flag.Flag) { set[f.Name] = true })
	for name, v := range map[string]int{"fail-every": *failEvery, "cut-stream-after": *cutAfter, "malformed-sse-at": *malformedAt,
		"restart-at": *restartAt, "metrics-fault-after": *metricsFaultAfter, "hang-every": *hangEvery,
		"allocation-fail-every": *allocFailEvery, "store-threshold": *storeThreshold, "data-parallel": *dataParallel} {
		if v < 0 {
			return usageErrorf("sim: --%s %d must be >= 0", name, v)
		}
	}
	if *metricsDelay < 0 {
		return usageErrorf("sim: --metrics-delay %v must be >= 0", *metricsDelay)
	}
	values := map[string]float64{}
	for _, nv := range metricValues {
		name, text, ok := strings.Cut(nv, "=")
		v, err := strconv.ParseFloat(text, 64)
		if !ok || name == "" || err != nil {
			return usageErrorf("sim: --metric-value %q: want NAME=VALUE with VALUE NaN, +Inf, -Inf or a number", nv)
		}
		values[name] = v
	}
	dialectName, dialectVersion, _ := strings.Cut(*dialect, ":")
	override := func(p *sim.Profile) {
		if set["dialect"] {
			p.SetDialect(dialectName, dialectVersion)
		}
		ints := []struct {
			flag string
			dst  *int
			v    int
		}{
			{"fail-every", &p.FailEveryNthRequest, *failEvery},
			{"cut-stream-after", &p.CutStreamAfterTokens, *cutAfter},
			{"malformed-sse-at", &p.MalformedSSEAtToken, *malformedAt},
			{"restart-at", &p.RestartAtRequest, *restartAt},
			{"metrics-fault-after", &p.MetricsFaultAfter, *metricsFaultAfter},
			{"hang-every", &p.HangEveryNthRequest, *hangEvery},
			{"allocation-fail-every", &p.AllocationFailEveryNthStore, *allocFailEvery},
			{"store-threshold", &p.StoreThreshold, *storeThreshold},
			{"data-parallel", &p.DataParallel, *dataParallel},
		}
		for _, f := range ints {
			if set[f.flag] {
				*f.dst = f.v
			}
		}
		if set["metrics-delay"] {
			p.MetricsDelay = *metricsDelay
		}
		if set["router"] {
			p.Router = *router
		}
		if set["metrics-fault"] {
			p.MetricsFault = *metricsFault
		}
		if set["corrupt-reload"] {
			p.CorruptReload = *corruptReload
		}
		p.HangPaths = append(p.HangPaths, hangPaths...)
		p.OmitMetrics = append(p.OmitMetrics, omitMetrics...)
		if len(values) > 0 && p.MetricValues == nil {
			p.MetricValues = map[string]float64{}
		}
		for name, v := range values {
			p.MetricValues[name] = v
		}
	}
	// Check the profile with the flags applied here, so that bad input is a usage error.
	var p sim.Profile
	if *profileFile != "" {
		if set["profile"] {
			return usageErrorf("sim: give --profile or --profile-file, not both")
		}
		p, err = sim.LoadProfileFile(*profileFile)
	} else {
		p, err = sim.LoadProfile(*profile)
	}
	if err != nil {
		return usageErrorf("sim: %v", err)
	}
	override(&p)
	if err := p.Validate(); err != nil {
		return usageErrorf("sim: %v", err)
	}
	srv, err := sim.Start(sim.Options{Profile: *profile, ProfileFile: *profileFile, Addr: *addr, Speed: *speed, APIKey: apiKey, Override: override})
	if err != nil {
		return fmt.Errorf("sim: %w", err)
	}
	fmt.Fprintf(stdout, "kvbench sim serving %s (OpenAI base URL %s/v1); interrupt to stop\n", srv.URL(), srv.URL())
	fmt.Fprintln(stdout, srv.Profile().Summary())
	if d := srv.Profile().Dialect; d != sim.DialectVLLM {
		fmt.Fprintf(stdout, "speaking %s: run with --backend %s --metrics %s\n", d, d, strings.Join(srv.MetricsURLs(), " --metrics "))
	}
	if faults := srv.Profile().Faults(); faults != "" {
		fmt.Fprintln(stdout, "faults: "+faults)
	}
	<-ctx.Done()
	if err := srv.Close(); err != nil {
		return fmt.Errorf("sim: stop: %w", err)
	}
	return nil
}

// requireLoopback fails unless addr's host is a loopback address or "localhost"; an empty
// host listens on every interface.
func requireLoopback(addr string) error {
	host, _, err := net.SplitHostPort(addr)
	if err != nil {
		return fmt.Errorf("--addr %q: %v", addr, err)
	}
	if host == "localhost" {
		return nil
	}
	if ip := net.ParseIP(host); ip == nil || !ip.IsLoopback() {
		return fmt.Errorf("--addr %q is not a loopback address", addr)
	}
	return nil
}

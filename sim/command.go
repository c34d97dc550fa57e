package sim

import (
	"flag"
	"fmt"
	"net"
	"os"
	"strconv"
	"strings"
	"time"
)

// RegisterFlags adds kvbench sim's flags to fs: the profile, the listen address, the speed,
// the API key and one flag per fault key, which overrides the profile's (the key is named in
// parentheses in the flag's help). Once fs is parsed, the returned function builds the
// Options the flags give, having loaded and validated the profile with them applied; its
// errors are bad input, one line naming the flag.
func RegisterFlags(fs *flag.FlagSet) func() (Options, error) {
	f := &simFlags{fs: fs}
	fs.StringVar(&f.profile, "profile", "dsv4-offload16", "embedded profile: "+strings.Join(ProfileNames(), ", "))
	fs.StringVar(&f.profileFile, "profile-file", "", "profile TOML file to serve instead of an embedded profile (same keys, faults included)")
	fs.StringVar(&f.addr, "addr", "127.0.0.1:8000", "listen address HOST:PORT")
	fs.Float64Var(&f.speed, "speed", 0, "time scale factor (10 = ten times faster); 0 keeps the profile's")
	fs.StringVar(&f.keyEnv, "api-key-env", "", "environment variable holding the API key /v1 requests must send")
	fs.BoolVar(&f.allowRemote, "allow-remote", false, "allow listening on a non-loopback address")
	// Each fault flag overrides the profile key in parentheses.
	fs.IntVar(&f.failEvery, "fail-every", 0, "fault: chat requests N, 2N, ... get HTTP 500 (fail_every_nth_request)")
	fs.IntVar(&f.cutAfter, "cut-stream-after", 0, "fault: streams drop the connection after K tokens, no [DONE] (cut_stream_after_tokens)")
	fs.IntVar(&f.malformedAt, "malformed-sse-at", 0, "fault: a broken data: line precedes token K of every stream (malformed_sse_at_token)")
	fs.IntVar(&f.restartAt, "restart-at", 0, "fault: chat request R finds counters and caches reset, as after a restart (restart_at_request)")
	fs.DurationVar(&f.metricsDelay, "metrics-delay", 0, "fault: /metrics answers after this long (metrics_delay)")
	fs.StringVar(&f.metricsFault, "metrics-fault", "", "fault: /metrics dies: error (HTTP 500) or hang (never answers) (metrics_fault)")
	fs.IntVar(&f.metricsFaultAfter, "metrics-fault-after", 0, "good /metrics scrapes before --metrics-fault starts (metrics_fault_after)")
	fs.IntVar(&f.hangEvery, "hang-every", 0, "fault: chat requests N, 2N, ... are read and never answered (hang_every_nth_request)")
	fs.IntVar(&f.allocFailEvery, "allocation-fail-every", 0, "fault: block stores N, 2N, ... find no room in the CPU tier (allocation_fail_every_nth_store)")
	fs.IntVar(&f.dataParallel, "data-parallel", 0, "run N independent replicas (each its own GPU pool and CPU tier) behind the one endpoint (data_parallel)")
	fs.StringVar(&f.router, "router", "", "how --data-parallel replicas get requests: "+strings.Join(Routers, " or ")+" (router)")
	fs.StringVar(&f.dialect, "dialect", "", "serve another engine's metrics and API fields: NAME or NAME:VERSION, e.g. sglang:unlabelled, vllm:simple, llamacpp:no-cached-counter (dialect, dialect_version)")
	fs.BoolVar(&f.corruptReload, "corrupt-reload", false, "fault: blocks loaded from the CPU tier hold other KV than was stored, so a reloaded prompt answers differently (corrupt_reload)")
	fs.IntVar(&f.storeThreshold, "store-threshold", 0, "vLLM's store_threshold: store a block only after N lookups, N >= 2 (store_threshold)")
	fs.Var(&f.hangPaths, "hang", "fault, repeatable: every request to this route is read and never answered, e.g. /v1/models (hang_paths)")
	fs.Var(&f.omitMetrics, "omit-metric", "fault, repeatable: leave this family out of /metrics, e.g. vllm:prefix_cache_hits_total (omit_metrics)")
	fs.Var(&f.metricValues, "metric-value", "fault, repeatable: NAME=VALUE pins every sample of a family, VALUE NaN, +Inf, -Inf or a number (metric_values)")
	return f.options
}

// simFlags holds the values of kvbench sim's flags.
type simFlags struct {
	fs                                   *flag.FlagSet
	profile, profileFile, addr, keyEnv   string
	speed                                float64
	allowRemote, corruptReload           bool
	failEvery, cutAfter, malformedAt     int
	restartAt, metricsFaultAfter         int
	hangEvery, allocFailEvery            int
	dataParallel, storeThreshold         int
	metricsDelay                         time.Duration
	metricsFault, router, dialect        string
	hangPaths, omitMetrics, metricValues repeated
}

func (f *simFlags) options() (Options, error) {
	if !f.allowRemote {
		if err := requireLoopback(f.addr); err != nil {
			return Options{}, fmt.Errorf("%v (pass --allow-remote to serve other machines)", err)
		}
	}
	if f.speed < 0 {
		return Options{}, fmt.Errorf("--speed %g must be >= 0", f.speed)
	}
	var apiKey string
	if f.keyEnv != "" {
		if apiKey = os.Getenv(f.keyEnv); apiKey == "" {
			return Options{}, fmt.Errorf("environment variable %s from --api-key-env is empty", f.keyEnv)
		}
	}
	for name, v := range map[string]int{"fail-every": f.failEvery, "cut-stream-after": f.cutAfter, "malformed-sse-at": f.malformedAt,
		"restart-at": f.restartAt, "metrics-fault-after": f.metricsFaultAfter, "hang-every": f.hangEvery,
		"allocation-fail-every": f.allocFailEvery, "store-threshold": f.storeThreshold, "data-parallel": f.dataParallel} {
		if v < 0 {
			return Options{}, fmt.Errorf("--%s %d must be >= 0", name, v)
		}
	}
	if f.metricsDelay < 0 {
		return Options{}, fmt.Errorf("--metrics-delay %v must be >= 0", f.metricsDelay)
	}
	values := map[string]float64{}
	for _, nv := range f.metricValues {
		name, text, ok := strings.Cut(nv, "=")
		v, err := strconv.ParseFloat(text, 64)
		if !ok || name == "" || err != nil {
			return Options{}, fmt.Errorf("--metric-value %q: want NAME=VALUE with VALUE NaN, +Inf, -Inf or a number", nv)
		}
		values[name] = v
	}
	set := map[string]bool{}
	f.fs.Visit(func(fl *flag.Flag) { set[fl.Name] = true })
	if f.profileFile != "" && set["profile"] {
		return Options{}, fmt.Errorf("give --profile or --profile-file, not both")
	}
	override := f.override(set, values)
	// Load and check the profile with the flags applied here, so that a bad one is bad input
	// rather than a failure to start.
	var p Profile
	var err error
	if f.profileFile != "" {
		p, err = LoadProfileFile(f.profileFile)
	} else {
		p, err = LoadProfile(f.profile)
	}
	if err != nil {
		return Options{}, err
	}
	override(&p)
	if err := p.Validate(); err != nil {
		return Options{}, err
	}
	return Options{Profile: f.profile, ProfileFile: f.profileFile, Addr: f.addr, Speed: f.speed, APIKey: apiKey, Override: override}, nil
}

// override returns the function that applies the flags given (set) to a loaded profile:
// a flag left out keeps the profile's key, and the repeatable ones add to its lists.
func (f *simFlags) override(set map[string]bool, values map[string]float64) func(*Profile) {
	dialectName, dialectVersion, _ := strings.Cut(f.dialect, ":")
	return func(p *Profile) {
		if set["dialect"] {
			p.SetDialect(dialectName, dialectVersion)
		}
		ints := []struct {
			flag string
			dst  *int
			v    int
		}{
			{"fail-every", &p.FailEveryNthRequest, f.failEvery},
			{"cut-stream-after", &p.CutStreamAfterTokens, f.cutAfter},
			{"malformed-sse-at", &p.MalformedSSEAtToken, f.malformedAt},
			{"restart-at", &p.RestartAtRequest, f.restartAt},
			{"metrics-fault-after", &p.MetricsFaultAfter, f.metricsFaultAfter},
			{"hang-every", &p.HangEveryNthRequest, f.hangEvery},
			{"allocation-fail-every", &p.AllocationFailEveryNthStore, f.allocFailEvery},
			{"store-threshold", &p.StoreThreshold, f.storeThreshold},
			{"data-parallel", &p.DataParallel, f.dataParallel},
		}
		for _, i := range ints {
			if set[i.flag] {
				*i.dst = i.v
			}
		}
		if set["metrics-delay"] {
			p.MetricsDelay = f.metricsDelay
		}
		if set["router"] {
			p.Router = f.router
		}
		if set["metrics-fault"] {
			p.MetricsFault = f.metricsFault
		}
		if set["corrupt-reload"] {
			p.CorruptReload = f.corruptReload
		}
		p.HangPaths = append(p.HangPaths, f.hangPaths...)
		p.OmitMetrics = append(p.OmitMetrics, f.omitMetrics...)
		if len(values) > 0 && p.MetricValues == nil {
			p.MetricValues = map[string]float64{}
		}
		for name, v := range values {
			p.MetricValues[name] = v
		}
	}
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

// Banner is what kvbench sim prints once serving: the URLs, the profile's summary, the
// kvbench flags that read another engine's dialect, and the faults injected.
func (s *Server) Banner() string {
	var b strings.Builder
	fmt.Fprintf(&b, "kvbench sim serving %s (OpenAI base URL %s/v1); interrupt to stop\n%s\n", s.URL(), s.URL(), s.profile.Summary())
	if d := s.profile.Dialect; d != DialectVLLM {
		fmt.Fprintf(&b, "speaking %s: run with --backend %s --metrics %s\n", d, d, strings.Join(s.MetricsURLs(), " --metrics "))
	}
	if faults := s.profile.Faults(); faults != "" {
		fmt.Fprintf(&b, "faults: %s\n", faults)
	}
	return b.String()
}

// repeated is a repeatable string flag.
type repeated []string

func (r *repeated) String() string     { return strings.Join(*r, ",") }
func (r *repeated) Set(v string) error { *r = append(*r, v); return nil }

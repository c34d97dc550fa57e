// Package tierplan sizes a host tier from what a run measured: it reads a run directory's
// trace step into kvbench trace size's configuration (--from: the GPU pool, the trace, its
// block size and window, bytes per stored token, the deployed host tier and the engine
// family's write policy, each with where it came from) and calibrates the host-tier model
// against the host share the run measured (--calibrate; docs/traces.md, "trace size").
package tierplan

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Engine families with a modelled host-tier policy (harness/engine's names).
const (
	EngineVLLM     = "vllm"
	EngineSGLang   = "sglang"
	EngineLlamaCpp = "llamacpp"
)

// MaxFitThreshold is the largest vLLM store_threshold a calibration tries.
const MaxFitThreshold = 8

// Run is what one run's trace step tells of its server's tiers.
type Run struct {
	Dir  string
	Step string
	// Engine is the run's engine family (preflight's backend; "" when the record has none)
	// and Dialects the metric dialects preflight recognised.
	Engine   string
	Dialects []string
	// Slots is the server's slot count preflight read (llama.cpp's /props; 0: unknown).
	Slots int
	// TraceFile and TraceSHA256 are the trace as the step read it; Format its format.
	TraceFile   string
	TraceSHA256 string
	Format      trace.Format
	BlockTokens int
	Window      trace.Window
	// GPUTokens, HostTokens (the deployed host tier) and BytesPerToken are nil where the
	// record does not say.
	GPUTokens       *trace.Sourced
	HostTokens      *trace.Sourced
	BytesPerToken   *trace.Sourced
	PoolHoldsOutput *trace.Sourced
	// StoresSkipped is what vLLM's store_threshold filter skipped (nil: no such counter),
	// StoresSkippedSource where it was read.
	StoresSkipped       *float64
	StoresSkippedSource string
	// Section is the step's section: the measured tiers, its ideal, how it was sent.
	Section *record.TraceSection
}

// Read loads the run in dir (runs.Load: every artifact's sha256 checked) and reads its
// trace step (the only one; repetition 0).
func Read(dir string) (*Run, error) {
	r, err := runs.Load(dir)
	if err != nil {
		return nil, err
	}
	var steps []derive.Step
	for _, st := range r.Repetitions[0].Steps {
		if st.Trace != nil {
			steps = append(steps, st)
		}
	}
	if len(steps) != 1 {
		return nil, fmt.Errorf("%s: the run has %d trace steps; trace size reads a run of exactly one", dir, len(steps))
	}
	st := steps[0]
	var sec *record.TraceSection
	for _, s := range r.Repetitions[0].Sections {
		if s.Step == st.Step {
			sec = s.Trace
		}
	}
	if sec == nil {
		return nil, fmt.Errorf("%s: step %s has no trace section", dir, st.Step)
	}
	tr := st.Trace
	out := &Run{Dir: dir, Step: st.Step, TraceFile: tr.File, TraceSHA256: tr.SHA256, BlockTokens: tr.BlockTokens, Section: sec,
		Window: trace.Window{Start: seconds(tr.StartSeconds), Duration: seconds(tr.DurationSeconds), Requests: tr.RequestLimit, MaxInputTokens: tr.MaxInputTokens}}
	if tr.Shard != nil {
		out.Window.Shard = trace.Shard{Index: tr.Shard.Index, Count: tr.Shard.Count}
	}
	if tr.Format != nil {
		out.Format = trace.Format(tr.Format.Format)
	}
	var pf struct {
		Backend  string   `json:"backend"`
		Dialects []string `json:"dialects"`
		Slots    int      `json:"slots"`
	}
	if len(r.Preflight) > 0 {
		if err := json.Unmarshal(r.Preflight, &pf); err != nil {
			return nil, fmt.Errorf("%s: preflight: %w", dir, err)
		}
	}
	out.Engine, out.Dialects, out.Slots = pf.Backend, pf.Dialects, pf.Slots
	out.sizes(tr.Ideal, r.Cache)
	if d := st.Span; d != nil {
		if v := d.Delta(metrics.StoresSkipped); v != nil {
			out.StoresSkipped, out.StoresSkippedSource = v, fmt.Sprintf("%s, +%s during the step", d.Values[metrics.StoresSkipped].Source, units.Whole(*v))
		} else if a := d.After(metrics.StoresSkipped); a != nil { // bound on its first skip: absent before
			out.StoresSkipped, out.StoresSkippedSource = a, fmt.Sprintf("%s, %s after the step (absent before it)", d.Values[metrics.StoresSkipped].Source, units.Whole(*a))
		}
	}
	return out, nil
}

func seconds(s float64) time.Duration { return time.Duration(math.Round(s * float64(time.Second))) }

// sizes reads the pool sizes: the step's ideal used the run's resolved sizes (the GPU pool
// the server reported, its host tier's GiB over the bytes per stored token), so the
// deployed host tier in tokens is the ideal's; the cache section stands in where the step
// has no ideal.
func (r *Run) sizes(ideal *record.IdealTiers, c record.Cache) {
	const gib = 1 << 30
	if ideal != nil {
		r.GPUTokens = &trace.Sourced{Value: ideal.GPUTokens, Source: "the run's ideal: " + ideal.GPUTokensSource}
		r.HostTokens = &trace.Sourced{Value: ideal.HostTokens, Source: "the run's ideal: " + ideal.HostTokensSource}
		r.PoolHoldsOutput = &trace.Sourced{Value: ideal.PoolHoldsOutput, Source: "the run's ideal (an engine's block pool holds each running request's partial block and output)"}
		if ideal.HostTokens > 0 && c.CPUOffloadGiB > 0 {
			r.BytesPerToken = &trace.Sourced{Value: int64(math.Round(c.CPUOffloadGiB * gib / float64(ideal.HostTokens))),
				Source: fmt.Sprintf("the run's ideal: its host tier's %s GiB over its %s host tokens", units.Exact(c.CPUOffloadGiB), units.Whole(float64(ideal.HostTokens)))}
		}
	} else if c.GPUKVCacheTokens > 0 {
		r.GPUTokens = &trace.Sourced{Value: int64(c.GPUKVCacheTokens), Source: "the run's cache section: " + c.GPUKVCacheTokensSource}
	}
	if r.BytesPerToken == nil && c.StoreBytesPerTokenMeasured != nil && *c.StoreBytesPerTokenMeasured > 0 {
		r.BytesPerToken = &trace.Sourced{Value: int64(math.Round(*c.StoreBytesPerTokenMeasured)), Source: "measured by the run (cache.store_bytes_per_token_measured)"}
	}
	if r.HostTokens == nil && c.CPUOffloadGiBSource != "" {
		switch {
		case c.CPUOffloadGiB <= 0:
			r.HostTokens = &trace.Sourced{Value: int64(0), Source: "the run's cache section: no host tier (" + c.CPUOffloadGiBSource + ")"}
		case r.BytesPerToken != nil:
			bpt := r.BytesPerToken.Value.(int64)
			r.HostTokens = &trace.Sourced{Value: int64(c.CPUOffloadGiB * gib / float64(bpt)), Source: fmt.Sprintf("the run's cache section: %s GiB (%s) / %d bytes per token", units.Exact(c.CPUOffloadGiB), c.CPUOffloadGiBSource, bpt)}
		}
	}
}

// DefaultPolicy is the policy the run's engine family runs, and why: vLLM's native connector,
// with store_threshold when its skipped-stores counter moved (the threshold itself is not
// exposed: 2 is assumed); SGLang HiCache's write_through, its default, since the record does
// not say which --hicache-write-policy the server ran.
func (r *Run) DefaultPolicy() (trace.Policy, string, error) {
	switch r.Engine {
	case EngineVLLM:
		if r.StoresSkipped != nil && *r.StoresSkipped > 0 {
			p, _ := trace.ParsePolicy(trace.PolicyVLLM + ":store_threshold=2")
			return p, "engine vllm; the reuse filter skipped stores (" + r.StoresSkippedSource + "), so store_threshold >= 2: 2 assumed (the server does not expose it; name it with --policy, or fit it with --calibrate)", nil
		}
		p, _ := trace.ParsePolicy(trace.PolicyVLLM)
		why := "engine vllm: its native connector; no skipped-stores counter, so no store_threshold seen"
		if r.StoresSkipped != nil {
			why = "engine vllm: its native connector; no store skipped (" + r.StoresSkippedSource + ")"
		}
		return p, why, nil
	case EngineSGLang:
		p, _ := trace.ParsePolicy(trace.PolicySGLangWriteThrough)
		return p, "engine sglang: write_through assumed, HiCache's default --hicache-write-policy (the record does not say which the server ran; name it with --policy, or fit it with --calibrate)", nil
	case EngineLlamaCpp:
		if r.Slots > 1 {
			p, _ := trace.ParsePolicy(fmt.Sprintf("%s:slots=%d,kv_unified=1", trace.PolicyLlamaCpp, r.Slots))
			return p, fmt.Sprintf("engine llamacpp: its --cache-ram prompt cache behind %d slots (preflight), on a unified KV cache as -np auto runs it, assumed (the record does not say; an explicit -np N without --kv-unified is %s:slots=%d)", r.Slots, trace.PolicyLlamaCpp, r.Slots), nil
		}
		p, _ := trace.ParsePolicy(trace.PolicyLlamaCpp)
		return p, "engine llamacpp: its --cache-ram prompt cache behind one slot", nil
	}
	return trace.Policy{}, "", fmt.Errorf("--policy: the run's engine %q has no modelled host-tier policy (vllm and sglang have); name one with --policy", r.Engine)
}

// Candidates are the policies a calibration tries for the run's engine family, and what it
// says of them: vLLM's native connector and store_threshold 2 to MaxFitThreshold; SGLang's
// three write policies (write_through_selective's threshold is fixed at 2 upstream); every
// modelled policy for another engine.
func (r *Run) Candidates() ([]trace.Policy, string) {
	var vllm, sglang []trace.Policy
	p, _ := trace.ParsePolicy(trace.PolicyVLLM)
	vllm = append(vllm, p)
	for n := 2; n <= MaxFitThreshold; n++ {
		p.StoreThreshold = n
		vllm = append(vllm, p)
	}
	for _, name := range []string{trace.PolicySGLangWriteThrough, trace.PolicySGLangWriteThroughSelective, trace.PolicySGLangWriteBack} {
		p, _ := trace.ParsePolicy(name)
		sglang = append(sglang, p)
	}
	switch r.Engine {
	case EngineVLLM:
		return vllm, ""
	case EngineSGLang:
		return sglang, ""
	case EngineLlamaCpp:
		p, _, _ := r.DefaultPolicy()
		if p.Slots <= 1 {
			return []trace.Policy{p}, ""
		}
		q := p
		q.KVUnified = false
		return []trace.Policy{p, q}, ""
	}
	return append(vllm, sglang...), fmt.Sprintf("the run's engine %q has no modelled policy of its own: every modelled policy was tried", r.Engine)
}

// Measured is the host share the run measured, for a calibration: an error says why the run
// cannot calibrate (its counters invalid, requests failed, the replay stopped, caches
// warmed before it).
func (r *Run) Measured() (float64, error) {
	s := r.Section
	switch {
	case !s.CountersValid:
		return 0, fmt.Errorf("--calibrate %s: step %s's counters are not valid (%s): no measured host share to fit", r.Dir, r.Step, strings.Join(s.InvalidReasons, "; "))
	case s.Interrupted || s.FailedRequests > 0 || s.Requests != s.PlannedRequests:
		return 0, fmt.Errorf("--calibrate %s: step %s sent %d of %d requests, %d failed: the measurement is not the window's", r.Dir, r.Step, s.Requests, s.PlannedRequests, s.FailedRequests)
	case s.WarmCaches != nil:
		return 0, fmt.Errorf("--calibrate %s: step %s was served from caches warmed before it (warm_caches): its host share is not the trace's", r.Dir, r.Step)
	case s.Tiers.Host == nil && r.Engine == EngineLlamaCpp:
		why := s.SlotSplitUnavailable
		if why == "" {
			why = "the step recorded no slot split"
		}
		return 0, fmt.Errorf("--calibrate %s: step %s measured no host share: llama.cpp has no tier counters, and its requests' split between the live slot and the host cache is unknown (%s); predict with --from (policy llamacpp, checked against llama-server in kvbench's CI: docs/traces.md)", r.Dir, r.Step, why)
	case s.Tiers.Host == nil:
		return 0, fmt.Errorf("--calibrate %s: step %s measured no host share (tiers.host_share is null: the server's counters do not split the tiers)", r.Dir, r.Step)
	case r.Engine == EngineLlamaCpp && s.Ideal == nil:
		// No ideal models llama.cpp's slot: the deployed size is the plan's (planFit).
	case s.Ideal == nil:
		return 0, fmt.Errorf("--calibrate %s: step %s has no ideal at the server's pool sizes (%s), so the deployed size is unknown", r.Dir, r.Step, s.IdealUnavailable)
	case s.Ideal.HostTokens <= 0:
		return 0, fmt.Errorf("--calibrate %s: the server had no host tier (%s): nothing to fit", r.Dir, s.Ideal.HostTokensSource)
	}
	return *s.Tiers.Host, nil
}

// ErrTraceChanged means the trace file is not the one the run replayed.
var ErrTraceChanged = errors.New("the trace changed since the run")

// TracePath is the trace to read: arg when given, else the run's, whose sha256 is checked;
// with verify, arg's too.
func (r *Run) TracePath(arg string, verify bool) (path, source string, err error) {
	path, source = arg, "command line (FILE)"
	if arg == "" {
		path, source, verify = r.TraceFile, "the run's record, sha256 verified", true
	}
	if !verify {
		return path, source, nil
	}
	sum, err := fileSHA256(path)
	if err != nil {
		if arg == "" {
			return "", "", fmt.Errorf("the trace the run replayed: %w (give the trace as FILE)", err)
		}
		return "", "", err
	}
	if sum != r.TraceSHA256 {
		return "", "", fmt.Errorf("%s: %w: sha256 %s, the run replayed %s", path, ErrTraceChanged, sum, r.TraceSHA256)
	}
	if arg != "" {
		source += ", sha256 verified against the run's"
	}
	return path, source, nil
}

func fileSHA256(path string) (string, error) {
	f, err := os.Open(path)
	if err != nil {
		return "", err
	}
	defer f.Close()
	h := sha256.New()
	if _, err := io.Copy(h, f); err != nil {
		return "", fmt.Errorf("%s: %w", path, err)
	}
	return hex.EncodeToString(h.Sum(nil)), nil
}

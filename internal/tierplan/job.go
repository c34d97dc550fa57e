package tierplan

import (
	"context"
	"flag"
	"fmt"
	"slices"
	"time"

	"github.com/anvil-serving/kvbench/harness/trace"
)

// SizeFlags are kvbench trace size's flags with --from and --calibrate.
type SizeFlags struct {
	*trace.SizeFlags
	from, calibrate *string
	deployed        trace.HostSizes
}

// RegisterSizeFlags adds kvbench trace size's flags, --from and --calibrate to fs.
func RegisterSizeFlags(fs *flag.FlagSet) *SizeFlags {
	f := &SizeFlags{SizeFlags: trace.NewSizeFlags(fs)}
	f.from = fs.String("from", "", "take the trace, its window and block size, the GPU pool, bytes per token, the deployed host tier and the engine's policy from the trace step of the run in `RUN_DIR` (a flag given wins; FILE, optional, replaces the run's trace)")
	f.calibrate = fs.String("calibrate", "", "as --from, and fit the policy to the host share the run in `RUN_DIR` measured at its deployed size: each size also gets the fitted policy's predicted_host_share (sizes default to 0 and 1/4 to 8 times the deployed one)")
	fs.Var(&f.deployed, "deployed-host", "with --from or --calibrate, the run's deployed host tier where its record does not say it (llama-server's --cache-ram, which it does not report): tokens, or bytes with a unit (needs --bytes-per-token)")
	return f
}

// SizeJob registers kvbench trace size's flags (RegisterSizeFlags, RegisterCurveFlags) and
// gives its job over the arguments left after them.
func SizeJob(fs *flag.FlagSet) func(args []string) (trace.FileJob, error) {
	f := RegisterSizeFlags(fs)
	curve := RegisterCurveFlags(fs)
	return func(args []string) (trace.FileJob, error) {
		p, err := f.Plan(args)
		if err == nil {
			err = curve.Apply(&p.Config)
		}
		if err != nil {
			return trace.FileJob{}, err
		}
		return trace.FileJob{Schema: trace.SizeSchema, Run: func(ctx context.Context) (trace.Report, error) {
			r, err := p.Run(ctx)
			if err != nil {
				return nil, err
			}
			return r, curve.Finish(r, time.Now())
		}}, nil
	}
}

// Plan plans the call over the arguments left after the flags: FILE, which --from and
// --calibrate make optional.
func (f *SizeFlags) Plan(args []string) (*Plan, error) {
	dir := *f.from
	if *f.calibrate != "" {
		if dir != "" && dir != *f.calibrate {
			return nil, fmt.Errorf("--from %s and --calibrate %s name different runs (--calibrate implies --from)", dir, *f.calibrate)
		}
		dir = *f.calibrate
	}
	if len(args) > 1 || (dir == "" && len(args) != 1) {
		return nil, fmt.Errorf("want one trace file, got %d arguments (with --from or --calibrate it is optional)", len(args))
	}
	if dir == "" {
		p := &Plan{Path: args[0], Deployed: -1}
		var err error
		p.Config, p.Window, err = f.Config()
		return p, err
	}
	traceArg := ""
	if len(args) == 1 {
		traceArg = args[0]
	}
	return NewPlan(f.SizeFlags, dir, traceArg, *f.calibrate != "", f.deployed)
}

// Plan is one kvbench trace size call: the trace, window and configuration, and with a run
// where each figure came from, its deployed size and the calibration to fit.
type Plan struct {
	Path   string
	Window trace.Window
	Config trace.SizeConfig
	From   *trace.SizeFrom
	// Deployed is the run's host tier in tokens (-1: none known); Measured the host share the
	// run measured there, set only when the plan models the run's own setup.
	Deployed int64
	Measured *float64
	fit      *fit
}

// fit is a calibration's measurement and what is simulated to fit it: the run's window, GPU
// pool and deployed size, never the flags' (those change what the fitted model predicts).
type fit struct {
	window     trace.Window
	cfg        trace.SizeConfig
	hostTokens int64
	measured   float64
	source     string
	candidates []trace.Policy
	notes      []string
}

// NewPlan reads the run in dir and fills the configuration from it where the flags were not
// given; traceArg (FILE; "" for the run's own trace) replaces the run's trace; deployed
// (--deployed-host, at most one size) the run's deployed host tier. With calibrate it also
// plans the fit, and the trace must be the one the run replayed.
func NewPlan(flags *trace.SizeFlags, dir, traceArg string, calibrate bool, deployed trace.HostSizes) (*Plan, error) {
	opt := "--from"
	if calibrate {
		opt = "--calibrate"
	}
	run, err := Read(dir)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opt, err)
	}
	cfg, err := flags.Base()
	if err != nil {
		return nil, err
	}
	p := &Plan{Deployed: -1, From: &trace.SizeFrom{Run: dir, Step: run.Step}}
	f := p.From
	cmd := func(flag string) string { return "command line (--" + flag + ")" }
	if run.Engine != "" {
		f.Engine = &trace.Sourced{Value: run.Engine, Source: "the run's preflight (backend)"}
	}
	path, src, err := run.TracePath(traceArg, calibrate)
	if err != nil {
		return nil, fmt.Errorf("%s: %w", opt, err)
	}
	p.Path, f.Trace = path, &trace.Sourced{Value: path, Source: src}
	runsTrace := traceArg == "" || calibrate // the run's trace: its window and format apply
	same := runsTrace                        // the plan models the run's own setup

	if flags.Given("block-tokens") {
		f.BlockTokens = &trace.Sourced{Value: int64(cfg.BlockTokens), Source: cmd("block-tokens")}
		same = same && cfg.BlockTokens == run.BlockTokens
	} else if run.BlockTokens <= 0 {
		f.BlockTokens = &trace.Sourced{Value: int64(cfg.BlockTokens), Source: "the trace format's (the run does not say)"}
		same = false
	} else {
		cfg.BlockTokens = run.BlockTokens
		f.BlockTokens = &trace.Sourced{Value: int64(cfg.BlockTokens), Source: "the run's trace step (block_tokens)"}
	}
	if runsTrace && !flags.Given("trace-format") && run.Format != "" {
		cfg.Format = run.Format
	}
	window := flags.Window()
	windowGiven := flags.Given("start") || flags.Given("duration") || flags.Given("requests") || flags.Given("max-input-tokens")
	switch {
	case windowGiven:
		f.Window = &trace.Sourced{Value: window.String(), Source: "command line (the window flags)"}
		same = same && window == run.Window
	case runsTrace:
		window = run.Window
		f.Window = &trace.Sourced{Value: window.String(), Source: "the run's trace step (its window)"}
	default:
		f.Window = &trace.Sourced{Value: window.String(), Source: "the whole trace (TRACE is not the run's trace)"}
	}
	if err := window.Validate(); err != nil {
		return nil, err
	}
	p.Window = window

	switch {
	case flags.Given("gpu-tokens"):
		cfg.GPUTokens = flags.GPUTokens()
		f.GPUTokens = &trace.Sourced{Value: cfg.GPUTokens, Source: cmd("gpu-tokens")}
		same = same && run.GPUTokens != nil && cfg.GPUTokens == run.GPUTokens.Value.(int64)
	case run.GPUTokens != nil:
		cfg.GPUTokens, f.GPUTokens = run.GPUTokens.Value.(int64), run.GPUTokens
	default:
		return nil, fmt.Errorf("--gpu-tokens: the run %s does not say its GPU KV pool size; give --gpu-tokens", dir)
	}
	switch {
	case flags.Given("pool-holds-output"):
		cfg.PoolHoldsOutput = flags.PoolHoldsOutput()
		f.PoolHoldsOutput = &trace.Sourced{Value: cfg.PoolHoldsOutput, Source: cmd("pool-holds-output")}
		same = same && run.PoolHoldsOutput != nil && cfg.PoolHoldsOutput == run.PoolHoldsOutput.Value.(bool)
	case run.PoolHoldsOutput == nil:
		f.PoolHoldsOutput = &trace.Sourced{Value: false, Source: "trace size's default (the run has no ideal to say)"}
		same = false
	default:
		cfg.PoolHoldsOutput, f.PoolHoldsOutput = run.PoolHoldsOutput.Value.(bool), run.PoolHoldsOutput
	}
	switch {
	case flags.Given("bytes-per-token"):
		cfg.BytesPerToken = flags.BytesPerToken()
		f.BytesPerToken = &trace.Sourced{Value: cfg.BytesPerToken, Source: cmd("bytes-per-token")}
	case run.BytesPerToken != nil:
		cfg.BytesPerToken, f.BytesPerToken = run.BytesPerToken.Value.(int64), run.BytesPerToken
	}
	if run.HostTokens != nil {
		p.Deployed, f.DeployedHostTokens = run.HostTokens.Value.(int64), run.HostTokens
	}
	if len(deployed) > 0 {
		d, err := deployedTokens(deployed, cfg.BytesPerToken)
		if err != nil {
			return nil, err
		}
		same = same && (run.HostTokens == nil || d == run.HostTokens.Value.(int64))
		p.Deployed, f.DeployedHostTokens = d, &trace.Sourced{Value: d, Source: cmd("deployed-host")}
	}
	if flags.Given("policy") {
		if cfg.Policy, err = flags.Policy(); err != nil {
			return nil, err
		}
		f.Policy = &trace.Sourced{Value: cfg.Policy.String(), Source: cmd("policy")}
	} else {
		var why string
		if cfg.Policy, why, err = run.DefaultPolicy(); err != nil {
			return nil, err
		}
		f.Policy = &trace.Sourced{Value: cfg.Policy.String(), Source: why}
	}
	if err := p.hostSizes(flags, &cfg); err != nil {
		return nil, err
	}
	p.Config = cfg
	if m := run.Section.Tiers.Host; m != nil && same && p.Deployed >= 0 {
		p.Measured = m
	}
	if calibrate {
		if p.fit, err = planFit(run, p); err != nil {
			return nil, err
		}
	}
	return p, nil
}

// hostSizes sets the sizes to evaluate: --host, else 0 and 1/4 to 8 times the deployed
// size, else trace size's default list; the deployed size is always among them.
func (p *Plan) hostSizes(flags *trace.SizeFlags, cfg *trace.SizeConfig) error {
	var err error
	src := "trace size's default list"
	switch {
	case flags.Given("host"):
		src = "command line (--host)"
		fallthrough
	case p.Deployed <= 0:
		if cfg.HostTokens, err = flags.HostTokens(cfg.BytesPerToken); err != nil {
			if cfg.BytesPerToken <= 0 {
				err = fmt.Errorf("%w (the run does not say its bytes per stored token)", err)
			}
			return err
		}
	default:
		d := p.Deployed
		cfg.HostTokens, src = []int64{0, d / 4, d / 2, d, 2 * d, 4 * d, 8 * d}, "0, then 1/4, 1/2, 1, 2, 4 and 8 times the deployed size"
	}
	if p.Deployed >= 0 && !slices.Contains(cfg.HostTokens, p.Deployed) {
		cfg.HostTokens = append(cfg.HostTokens, p.Deployed)
		src += ", and the deployed size"
	}
	p.From.HostSizes = &trace.Sourced{Value: fmt.Sprint(cfg.HostTokens), Source: src}
	return nil
}

// deployedTokens is --deployed-host in tokens.
func deployedTokens(sizes trace.HostSizes, bytesPerToken int64) (int64, error) {
	if len(sizes) != 1 {
		return 0, fmt.Errorf("--deployed-host %s: want one size", sizes.String())
	}
	h := sizes[0]
	if h.Bytes == 0 {
		return h.Tokens, nil
	}
	if bytesPerToken <= 0 {
		return 0, fmt.Errorf("--deployed-host %s is in bytes: give --bytes-per-token to turn it into tokens", h.Text)
	}
	return h.Bytes / bytesPerToken, nil
}

// planFit plans the calibration against what the run measured, at the sizes the step's
// ideal used; a llama.cpp step has no ideal (its slot is no LRU block pool), so its fit
// runs at the plan's GPU pool and block size (the run's, unless a flag gave them) and the
// deployed --cache-ram.
func planFit(run *Run, p *Plan) (*fit, error) {
	measured, err := run.Measured()
	if err != nil {
		return nil, err
	}
	ideal, s := run.Section.Ideal, run.Section
	ft := &fit{window: run.Window, measured: measured, source: s.Tiers.Source}
	switch {
	case ideal != nil:
		ft.hostTokens = ideal.HostTokens
		ft.cfg = trace.SizeConfig{BlockTokens: ideal.BlockTokens, Format: run.Format, GPUTokens: ideal.GPUTokens, PoolHoldsOutput: ideal.PoolHoldsOutput}
	case p.Deployed < 0:
		return nil, fmt.Errorf("--deployed-host: the run %s does not say its deployed host tier (llama-server does not report --cache-ram): give it with --deployed-host SIZE", run.Dir)
	case p.Deployed == 0:
		return nil, fmt.Errorf("--calibrate %s: the server had no host tier (--deployed-host 0): nothing to fit", run.Dir)
	default:
		c := p.Config
		ft.hostTokens = p.Deployed
		ft.cfg = trace.SizeConfig{BlockTokens: c.BlockTokens, Format: run.Format, GPUTokens: c.GPUTokens, PoolHoldsOutput: c.PoolHoldsOutput}
	}
	var note string
	ft.candidates, note = run.Candidates()
	if note != "" {
		ft.notes = append(ft.notes, note)
	}
	if c := trace.PolicyCaveat(run.Engine); c != "" {
		ft.notes = append(ft.notes, c)
	}
	if s.PeakInFlight > 1 {
		ft.notes = append(ft.notes, fmt.Sprintf("the run had up to %d requests in flight at once and the model serves them one at a time: the fit absorbs what concurrency changed, at this size only (replay with concurrency = 1 to calibrate)", s.PeakInFlight))
	}
	if ideal != nil && ideal.BlockSizeNote != "" {
		ft.notes = append(ft.notes, ideal.BlockSizeNote)
	}
	return ft, nil
}

// Run evaluates the plan: the sizes under the configured policy, and with a calibration the
// fit and the sizes again under the fitted policy.
func (p *Plan) Run(ctx context.Context) (*trace.SizeReport, error) {
	r, err := trace.SizeFile(ctx, p.Path, p.Window, p.Config)
	if err != nil {
		return nil, err
	}
	r.From = p.From
	if ft := p.fit; ft != nil {
		cal, pol, err := trace.FitFile(ctx, p.Path, ft.window, ft.cfg, ft.hostTokens, ft.measured, ft.candidates)
		if err != nil {
			return nil, err
		}
		cal.Run, cal.Step, cal.MeasuredSource, cal.Notes = p.From.Run, p.From.Step, ft.source, ft.notes
		pred := r
		if pol.String() != p.Config.Policy.String() {
			c := p.Config
			c.Policy = pol
			if pred, err = trace.SizeFile(ctx, p.Path, p.Window, c); err != nil {
				return nil, err
			}
		}
		r.Predict(pred, cal)
	}
	if p.Deployed >= 0 {
		r.MarkDeployed(p.Deployed, p.Measured)
	}
	return r, nil
}

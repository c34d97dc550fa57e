package sweep

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"io"
	"math"
	"path/filepath"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/tierplan"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Flags are kvbench sweep's own flags: the step and its levels, and the threshold.
type Flags struct {
	fs                                 *flag.FlagSet
	users, timeScales, step, endpoints *string
	threshold                          *float64
	calibrateLevel                     *int
}

// RegisterFlags adds kvbench sweep's own flags to fs.
func RegisterFlags(fs *flag.FlagSet) *Flags {
	return &Flags{
		fs:             fs,
		users:          fs.String("users", "", "conversation step: user counts to run, ascending, comma-separated (e.g. 8,16,32,64)"),
		timeScales:     fs.String("time-scales", "", "trace step (open loop): time_scale values to run, descending, so each level offers a higher request rate (e.g. 1,0.5,0.25)"),
		threshold:      fs.Float64("ttft-p90-ms", 0, "TTFT p90 (ms) a level must stay within to count toward capacity; 0: report levels only"),
		step:           fs.String("step", "", "the conversation or trace step to sweep (default: the scenario's only one)"),
		endpoints:      fs.String("endpoints", "", "trace step: the same server at several host-tier sizes, one OpenAI-compatible base URL each, comma-separated: the trace is replayed on each and the host-tier model calibrated at one predicts the others (docs/sweeps.md)"),
		calibrateLevel: fs.Int("calibrate-level", 1, "with --endpoints: the level (1 for the first endpoint) the host-tier model is calibrated at"),
	}
}

// Plan reads the flags into a sweep of sc; targetGiven says --endpoint or --metrics was
// given, which --endpoints replaces.
func (f *Flags) Plan(sc *scenarios.Scenario, targetGiven bool) (*Plan, error) {
	if *f.endpoints == "" {
		levelGiven := false
		f.fs.Visit(func(fl *flag.Flag) { levelGiven = levelGiven || fl.Name == "calibrate-level" })
		if levelGiven {
			return nil, errors.New("--calibrate-level names a level of a host-tier sweep: give it with --endpoints")
		}
		return NewPlan(sc, *f.step, *f.users, *f.timeScales, *f.threshold)
	}
	switch {
	case *f.users != "" || *f.timeScales != "":
		return nil, errors.New("--endpoints steps the host tier, not the load: give it without --users or --time-scales")
	case *f.threshold != 0:
		return nil, errors.New("--ttft-p90-ms decides a capacity as load rises; a host-tier sweep (--endpoints) runs one load")
	case targetGiven:
		return nil, errors.New("--endpoints names every level's server (each read at its own /metrics): give it without --endpoint or --metrics")
	}
	return NewHostTierPlan(sc, *f.step, *f.endpoints, *f.calibrateLevel)
}

// NewHostTierPlan plans a host-tier sweep of sc's trace step (stepID, or its only one) over
// endpoints, calibrated at level calibrate (1-based).
func NewHostTierPlan(sc *scenarios.Scenario, stepID, endpoints string, calibrate int) (*Plan, error) {
	idx, err := findStep(sc, stepID)
	if err != nil {
		return nil, err
	}
	if !sc.Steps[idx].IsTrace() {
		return nil, fmt.Errorf("--endpoints: step %s is not a trace step: a host-tier sweep replays a trace", sc.Steps[idx].ID)
	}
	var urls []string
	for _, u := range strings.Split(endpoints, ",") {
		u = strings.TrimSpace(u)
		if !scenarios.IsHTTPURL(u) {
			return nil, fmt.Errorf("--endpoints: %q is not an http(s) URL", u)
		}
		urls = append(urls, u)
	}
	switch {
	case len(urls) < 2:
		return nil, fmt.Errorf("--endpoints: give at least two servers (one host-tier size each), got %d", len(urls))
	case len(urls) > MaxLevels:
		return nil, fmt.Errorf("--endpoints: %d levels, at most %d", len(urls), MaxLevels)
	case calibrate < 1 || calibrate > len(urls):
		return nil, fmt.Errorf("--calibrate-level %d: the sweep has levels 1 to %d", calibrate, len(urls))
	}
	return &Plan{Scenario: sc, Step: idx, Endpoints: urls, CalibrateLevel: calibrate - 1}, nil
}

// fitHostTier calibrates the host-tier model at the plan's calibration level (trace size
// --calibrate on its run, every level's size asked for) and sets each level's predicted
// host share; what prevents it is recorded, never a failed sweep: the measurements stand.
func fitHostTier(ctx context.Context, p *Plan, dir string, sw *record.Sweep) {
	fit := &record.SweepHostTierFit{}
	sw.HostTier = fit
	if p.CalibrateLevel >= len(sw.Levels) {
		fit.Unavailable = fmt.Sprintf("level %d, the calibration's, did not run", p.CalibrateLevel+1)
		return
	}
	at := sw.Levels[p.CalibrateLevel]
	fit.CalibratedFrom = at.Run
	var sizes []string
	for _, l := range sw.Levels {
		if l.HostTokens != nil {
			sizes = append(sizes, strconv.FormatInt(*l.HostTokens, 10))
		}
	}
	// The same call as kvbench trace size --calibrate RUN --host SIZES.
	fs := flag.NewFlagSet("trace size", flag.ContinueOnError)
	fs.SetOutput(io.Discard)
	tf := tierplan.RegisterSizeFlags(fs)
	args := []string{"--calibrate", filepath.Join(dir, at.Run)}
	if len(sizes) > 0 {
		args = append(args, "--host", strings.Join(sizes, ","))
	}
	if err := fs.Parse(args); err != nil {
		fit.Unavailable = err.Error()
		return
	}
	plan, err := tf.Plan(nil)
	if err != nil {
		fit.Unavailable = err.Error()
		return
	}
	rep, err := plan.Run(ctx)
	if err != nil {
		fit.Unavailable = err.Error()
		return
	}
	c := rep.Calibration
	fit.Policy, fit.ResidualPoints, fit.Fits, fit.Finding = c.Policy, c.ResidualPoints, c.Fits, c.Finding
	for i := range sw.Levels {
		l := &sw.Levels[i]
		for _, s := range rep.Sizes {
			if l.HostTokens != nil && s.HostTokens == *l.HostTokens {
				l.PredictedHostShare = s.PredictedHostShare
			}
		}
		if i == p.CalibrateLevel || l.PredictedHostShare == nil || l.Tiers.Host == nil {
			continue
		}
		e := 100 * math.Abs(*l.PredictedHostShare-*l.Tiers.Host)
		if fit.MaxErrorPoints == nil || e > *fit.MaxErrorPoints {
			fit.MaxErrorPoints = &e
		}
	}
}

package trace

import (
	"context"
	"fmt"
	"math"
	"strings"
)

// FitTolerancePoints is the residual, in points of host share, within which a calibration
// fits.
const FitTolerancePoints = 1.0

// NoFitFinding is what a calibration says when no candidate policy fits.
const NoFitFinding = "no modelled policy reproduces the measured host share within a point: the server does something the model does not know"

// Sourced is a figure trace size took from somewhere other than its own flags' defaults,
// and where.
type Sourced struct {
	Value  any    `json:"value"`
	Source string `json:"source"`
}

// SizeFrom is where trace size --from found each figure: the run, its trace step, and per
// figure its value and source (a flag given on the command line wins over the run).
type SizeFrom struct {
	Run                string   `json:"run"`
	Step               string   `json:"step"`
	Engine             *Sourced `json:"engine"`
	Trace              *Sourced `json:"trace"`
	Window             *Sourced `json:"window"`
	BlockTokens        *Sourced `json:"block_tokens"`
	GPUTokens          *Sourced `json:"gpu_tokens"`
	PoolHoldsOutput    *Sourced `json:"pool_holds_output"`
	BytesPerToken      *Sourced `json:"bytes_per_token"` // null when nothing gives it
	DeployedHostTokens *Sourced `json:"deployed_host_tokens"`
	Policy             *Sourced `json:"policy"`
	HostSizes          *Sourced `json:"host_sizes"`
}

// Calibration is trace size --calibrate's fit: the run replayed the trace at its deployed
// host tier and measured the host share; each candidate policy is simulated over the run's
// window at that size, with the run's GPU pool, and the closest is the fitted policy.
type Calibration struct {
	Run  string `json:"run"`
	Step string `json:"step"`
	// HostTokens is the deployed size the run measured at; GPUTokens its GPU pool.
	HostTokens        int64   `json:"host_tokens"`
	GPUTokens         int64   `json:"gpu_tokens"`
	MeasuredHostShare float64 `json:"measured_host_share"`
	// MeasuredSource is where the measured split came from (the run's tiers.source).
	MeasuredSource string `json:"measured_source"`
	// Policy is the fitted policy, PredictedHostShare what it gives at HostTokens and
	// ResidualPoints that minus the measured share, in points.
	Policy             string  `json:"policy"`
	PredictedHostShare float64 `json:"predicted_host_share"`
	ResidualPoints     float64 `json:"residual_points"`
	// Fits: |ResidualPoints| <= TolerancePoints.
	Fits            bool        `json:"fits"`
	TolerancePoints float64     `json:"tolerance_points"`
	Candidates      []Candidate `json:"candidates"`
	Finding         string      `json:"finding"`
	// Notes say what of the run the model does not follow (requests in flight together).
	Notes []string `json:"notes,omitempty"`
}

// Candidate is one policy a calibration tried.
type Candidate struct {
	Policy             string  `json:"policy"`
	PredictedHostShare float64 `json:"predicted_host_share"`
	ResidualPoints     float64 `json:"residual_points"`
}

// FitFile simulates the window w of the trace at path at one host-tier size under each
// candidate policy (cfg gives the GPU pool, block size, format and pool_holds_output) and
// fits the measured host share: the candidate of the smallest residual, the first among
// equals, is the fitted policy.
func FitFile(ctx context.Context, path string, w Window, cfg SizeConfig, hostTokens int64, measured float64, candidates []Policy) (*Calibration, Policy, error) {
	if len(candidates) == 0 {
		return nil, Policy{}, fmt.Errorf("no candidate policy to fit")
	}
	c := &Calibration{HostTokens: hostTokens, GPUTokens: cfg.GPUTokens, MeasuredHostShare: measured, TolerancePoints: FitTolerancePoints}
	cfg.HostTokens = []int64{hostTokens}
	best := -1
	for i, p := range candidates {
		cfg.Policy = p
		r, err := SizeFile(ctx, path, w, cfg)
		if err != nil {
			return nil, Policy{}, err
		}
		pred := r.Sizes[0].HostShare
		c.Candidates = append(c.Candidates, Candidate{Policy: p.String(), PredictedHostShare: pred, ResidualPoints: 100 * (pred - measured)})
		if best < 0 || math.Abs(c.Candidates[i].ResidualPoints) < math.Abs(c.Candidates[best].ResidualPoints) {
			best = i
		}
	}
	b := c.Candidates[best]
	c.Policy, c.PredictedHostShare, c.ResidualPoints = b.Policy, b.PredictedHostShare, b.ResidualPoints
	c.Fits = math.Abs(b.ResidualPoints) <= FitTolerancePoints+1e-9
	if c.Fits {
		c.Finding = fmt.Sprintf("%s reproduces the measured host share (%s) to %.2f points at the deployed %s host tokens; the sizes are predicted with it", b.Policy, percent(measured), math.Abs(b.ResidualPoints), thousands(hostTokens))
	} else {
		c.Finding = fmt.Sprintf("%s (closest: %s, %+.2f points); the predictions use it and are no better than that", NoFitFinding, b.Policy, b.ResidualPoints)
	}
	return c, candidates[best], nil
}

// Predict sets each size's predicted host share from pred, the same sizes under the fitted
// policy, and adds the calibration.
func (r *SizeReport) Predict(pred *SizeReport, c *Calibration) {
	r.Calibration = c
	for i := range r.Sizes {
		v := pred.Sizes[i].HostShare
		r.Sizes[i].PredictedHostShare = &v
	}
}

// MarkDeployed marks the sizes of hostTokens tokens as the server's, with the host share it
// measured there (nil: not measured).
func (r *SizeReport) MarkDeployed(hostTokens int64, measured *float64) {
	for i := range r.Sizes {
		if r.Sizes[i].HostTokens == hostTokens {
			r.Sizes[i].Deployed, r.Sizes[i].MeasuredHostShare = true, measured
		}
	}
}

// writeText writes where --from found each figure.
func (f *SizeFrom) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "\nfrom run %s (step %s):\n", f.Run, f.Step)
	for _, x := range []struct {
		name string
		v    *Sourced
	}{{"engine", f.Engine}, {"trace", f.Trace}, {"window", f.Window}, {"block tokens", f.BlockTokens}, {"GPU tokens", f.GPUTokens},
		{"pool holds output", f.PoolHoldsOutput}, {"bytes per token", f.BytesPerToken}, {"deployed host tokens", f.DeployedHostTokens},
		{"policy", f.Policy}, {"host sizes", f.HostSizes}} {
		if x.v == nil {
			fmt.Fprintf(b, "  %-21s unknown\n", x.name)
			continue
		}
		v := fmt.Sprint(x.v.Value)
		if n, ok := x.v.Value.(int64); ok {
			v = thousands(n)
		}
		fmt.Fprintf(b, "  %-21s %s (%s)\n", x.name, v, x.v.Source)
	}
}

// writeText writes the calibration's fit and its candidates.
func (c *Calibration) writeText(b *strings.Builder) {
	fmt.Fprintf(b, "\ncalibration at the deployed %s host tokens (GPU %s): measured host share %s (%s)\n", thousands(c.HostTokens), thousands(c.GPUTokens), percent(c.MeasuredHostShare), c.MeasuredSource)
	fit := "fits: within a point"
	if !c.Fits {
		fit = "does not fit"
	}
	fmt.Fprintf(b, "  fitted policy %s: predicts %s, residual %+.2f points (%s)\n", c.Policy, percent(c.PredictedHostShare), c.ResidualPoints, fit)
	var parts []string
	for _, x := range c.Candidates {
		parts = append(parts, fmt.Sprintf("%s %s (%+.2f)", x.Policy, percent(x.PredictedHostShare), x.ResidualPoints))
	}
	fmt.Fprintf(b, "  candidates: %s\n  %s\n", strings.Join(parts, ", "), c.Finding)
	for _, n := range c.Notes {
		fmt.Fprintf(b, "  note: %s\n", n)
	}
}

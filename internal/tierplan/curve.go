package tierplan

// The flags here price the sizes by a reload-curve run on the same server (--curve RUN_DIR,
// --gpu-hour-cost) and draw them (--html FILE): docs/traces.md, "What a size buys".

import (
	"errors"
	"flag"
	"fmt"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/report"
)

// CurveFlags are trace size's --curve, --gpu-hour-cost and --html.
type CurveFlags struct {
	curve, html string
	cost        *costFlag
}

// RegisterCurveFlags adds the flags to fs.
func RegisterCurveFlags(fs *flag.FlagSet) *CurveFlags {
	f := &CurveFlags{cost: &costFlag{}}
	fs.StringVar(&f.curve, "curve", "", "a reload-curve run on the same server (kvbench run reload-curve): prices each size's host hits, and the GPU hits, in prefill seconds saved per hour of trace time")
	fs.Var(f.cost, "gpu-hour-cost", "with --curve: the price of one GPU-hour, which turns the seconds saved into cost per hour (a server of N GPUs: N times the price)")
	fs.StringVar(&f.html, "html", "", "also write the sizes as a self-contained HTML page to this new file: host share and seconds saved against tier size, the knee marked")
	return f
}

// Apply loads the curve run into cfg; its errors are bad input naming the flag.
func (f *CurveFlags) Apply(cfg *trace.SizeConfig) error {
	if f.cost.given && f.curve == "" {
		return errors.New("--gpu-hour-cost prices the seconds --curve gives: give --curve RUN_DIR too")
	}
	if f.curve == "" {
		return nil
	}
	c, err := LoadCurve(f.curve)
	if err != nil {
		return fmt.Errorf("--curve %s: %w", f.curve, err)
	}
	cfg.Curve = c
	if f.cost.given {
		cfg.GPUHourCost = &f.cost.v
	}
	return nil
}

// Finish writes the page of r when --html asked for one.
func (f *CurveFlags) Finish(r *trace.SizeReport, now time.Time) error {
	if f.html == "" {
		return nil
	}
	page, err := report.SizePage(r, now)
	if err != nil {
		return err
	}
	if _, err := runs.WriteOutput(f.html, page); err != nil {
		return cli.OutputError("--html", f.html, err)
	}
	r.HTML = f.html
	return nil
}

// LoadCurve reads the reload curve of the run in dir; the run must hold exactly one.
func LoadCurve(dir string) (*trace.PrefillCurve, error) {
	r, err := runs.Load(dir)
	if err != nil {
		return nil, err
	}
	var ids []string
	for _, c := range r.Curves {
		ids = append(ids, c.ID)
	}
	switch len(r.Curves) {
	case 0:
		return nil, fmt.Errorf("the run (%s) has no reload curve: run the reload-curve scenario on the server (kvbench run reload-curve)", r.Scenario.Name)
	case 1:
	default:
		return nil, fmt.Errorf("the run has %d reload curves (%s): pricing reads one; use a run of one", len(ids), strings.Join(ids, ", "))
	}
	c, err := trace.NewPrefillCurve(dir, r.Curves[0])
	if err != nil {
		return nil, err
	}
	c.Model, c.Engine = r.Identify().Model, r.Runtime.Engine
	return c, nil
}

// costFlag is a price >= 0 that remembers whether it was given.
type costFlag struct {
	v     float64
	given bool
}

func (c *costFlag) String() string {
	if c == nil || !c.given {
		return ""
	}
	return strconv.FormatFloat(c.v, 'g', -1, 64)
}

// Set implements flag.Value.
func (c *costFlag) Set(s string) error {
	v, err := strconv.ParseFloat(strings.TrimSpace(s), 64)
	if err != nil || v < 0 || v > 1e9 {
		return fmt.Errorf("%q is not a price per GPU-hour (a number >= 0, such as 2.5)", s)
	}
	c.v, c.given = v, true
	return nil
}

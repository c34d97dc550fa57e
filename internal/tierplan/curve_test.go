package tierplan

import (
	"flag"
	"io"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/trace"
)

// TestFlags: a price needs a curve, a price is a number >= 0, and a run without a reload
// curve prices nothing.
func TestFlags(t *testing.T) {
	for _, c := range []struct {
		args []string
		err  string
	}{
		{nil, ""},
		{[]string{"--gpu-hour-cost", "2"}, "--gpu-hour-cost prices the seconds --curve gives"},
		{[]string{"--gpu-hour-cost", "lots"}, `"lots" is not a price per GPU-hour`},
		{[]string{"--curve", "../../cmd/kvbench/testdata/compare/baseline"}, "has no reload curve: run the reload-curve scenario"},
	} {
		fs := flag.NewFlagSet("t", flag.ContinueOnError)
		fs.SetOutput(io.Discard)
		f := RegisterCurveFlags(fs)
		err := fs.Parse(c.args)
		var cfg trace.SizeConfig
		if err == nil {
			err = f.Apply(&cfg)
		}
		if (err == nil) != (c.err == "") || (err != nil && !strings.Contains(err.Error(), c.err)) {
			t.Errorf("%v: err %v, want %q", c.args, err, c.err)
		}
		if cfg.Curve != nil || cfg.GPUHourCost != nil {
			t.Errorf("%v: priced without a curve: %+v", c.args, cfg)
		}
	}
}

// Package sweep runs one conversation step at rising user counts, or one trace step at
// rising request rates, each level a run of its own, and records the capacity: the highest
// level whose TTFT p90 stays within a threshold.
package sweep

import (
	"context"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/internal/target"
	"github.com/anvil-serving/kvbench/scenarios"
)

// MaxLevels bounds a sweep's levels.
const MaxLevels = 32

// LevelSeedStride separates the prompt seeds of a sweep's levels: level k uses
// prompt.seed + 1000k, so a level's users do not find the previous level's conversations
// (the same users, the same bytes) in the server's caches.
const LevelSeedStride = 1000

// Plan is a sweep of one step of a scenario: user counts for a conversation step, time
// scales for a trace step (each a higher request rate than the last).
type Plan struct {
	Scenario    *scenarios.Scenario
	Step        int // the index of the step swept
	Users       []int
	TimeScales  []float64
	ThresholdMS float64 // TTFT p90 a level must stay within; 0: report levels only
	// Endpoints are a host-tier sweep's servers, one host-tier size each (hosttier.go), and
	// CalibrateLevel the index of the level the host-tier model is calibrated at.
	Endpoints      []string
	CalibrateLevel int
}

// NewPlan finds the step to sweep (stepID, or the scenario's only conversation or trace
// step) and reads its levels: users ("8,16,32") for a conversation, timeScales ("1,0.5")
// for an open-loop trace step. The errors name the flag: they are the user's to fix.
func NewPlan(sc *scenarios.Scenario, stepID, users, timeScales string, thresholdMS float64) (*Plan, error) {
	// NaN and infinity would mean no threshold, or one every level stays within.
	if math.IsNaN(thresholdMS) || math.IsInf(thresholdMS, 0) || thresholdMS < 0 {
		return nil, fmt.Errorf("--ttft-p90-ms must be a positive number of milliseconds, or 0 to report levels only (got %g)", thresholdMS)
	}
	idx, err := findStep(sc, stepID)
	if err != nil {
		return nil, err
	}
	p := &Plan{Scenario: sc, Step: idx, ThresholdMS: thresholdMS}
	st := sc.Steps[idx]
	switch {
	case st.IsTrace() && users != "":
		return nil, fmt.Errorf("step %s is a trace step: step its request rate with --time-scales, not --users", st.ID)
	case !st.IsTrace() && timeScales != "":
		return nil, fmt.Errorf("step %s is a conversation: step its users with --users, not --time-scales", st.ID)
	case st.IsTrace() && st.ClosedLoop():
		return nil, fmt.Errorf("%s: trace step %s is a closed loop (concurrency set): --time-scales steps an open loop's request rate", sc.Position(fmt.Sprintf("step[%d].concurrency", idx)), st.ID)
	case st.IsTrace():
		if p.TimeScales, err = ParseTimeScales(timeScales); err != nil {
			return nil, fmt.Errorf("--time-scales: %w", err)
		}
	default:
		if p.Users, err = ParseUsers(users); err != nil {
			return nil, fmt.Errorf("--users: %w", err)
		}
	}
	return p, nil
}

// IsTrace reports whether the sweep steps a trace step's request rate.
func (p *Plan) IsTrace() bool { return p.Scenario.Steps[p.Step].IsTrace() }

// Levels is the number of levels.
func (p *Plan) Levels() int { return max(len(p.Users), len(p.TimeScales), len(p.Endpoints)) }

// Level is level k's scenario, the step alone with its level's users or time scale, its
// prompts seeded apart from the other levels' (see LevelSeedStride), with its name.
func (p *Plan) Level(k int) (*scenarios.Scenario, string) {
	sc := p.Scenario
	c := *sc
	c.Prompt.Seed = sc.Prompt.Seed + int64(k)*LevelSeedStride
	st := sc.Steps[p.Step]
	var name string
	switch {
	case len(p.Endpoints) > 0:
		c.Target.Endpoint, c.Target.Metrics = p.Endpoints[k], target.DefaultMetrics(p.Endpoints[k], sc.Target.Backend) // the endpoint's own
		c.Name = fmt.Sprintf("%s-host-tier-%d", sc.Name, k+1)
		name = "endpoint " + redact.URL(p.Endpoints[k])
	case p.IsTrace():
		x := p.TimeScales[k]
		st.TimeScale = x
		c.Name = fmt.Sprintf("%s-time-scale-%s", sc.Name, strconv.FormatFloat(x, 'f', -1, 64))
		name = fmt.Sprintf("time_scale %g", x)
	default:
		n := p.Users[k]
		st.Users, st.Concurrency = n, n
		c.Name = fmt.Sprintf("%s-users-%d", sc.Name, n)
		name = fmt.Sprintf("%d users", n)
	}
	c.Steps = []scenarios.Step{st}
	c.Gates = slices.DeleteFunc(slices.Clone(sc.Gates), func(g scenarios.Gate) bool { return g.Step != st.ID })
	return &c, name
}

// RunLevel runs one level's scenario, its run directory created in dir.
type RunLevel func(ctx context.Context, level *scenarios.Scenario, dir string) (*runner.Outcome, error)

// Result is a finished sweep: its record, written to Dir, and each level's failed gates
// (the sweep goes on past them).
type Result struct {
	Record      *record.Sweep
	Dir         string
	GatesFailed []string
}

// Run runs p's levels in order, each with run, in a sweep directory created in outDir, and
// writes the sweep record there: at the start and as each level ends with status running
// (as run.json is at each step's end), so a killed sweep keeps the levels it finished. A level that fails or is interrupted ends the sweep with
// what was measured; failed gates do not. When no level measured anything, no sweep
// directory is left behind and the level's error comes back as it was.
func Run(ctx context.Context, p *Plan, outDir, version string, console io.Writer, run RunLevel) (*Result, error) {
	start := time.Now()
	dir, err := runs.NewRunDir(outDir, p.Scenario.Name+"-sweep", start)
	if err != nil {
		return nil, err
	}
	sw := &record.Sweep{
		Schema: record.SweepSchema, ObservedAt: start.UTC().Format(time.RFC3339), Status: record.StatusRunning,
		Scenario: p.Scenario.Name, Step: p.Scenario.Steps[p.Step].ID, Load: record.SweepUsers, Kvbench: record.Kvbench{Version: version},
	}
	if p.IsTrace() {
		sw.Load = record.SweepRequestRate
		if len(p.Endpoints) > 0 {
			sw.Load = record.SweepHostTier
		}
		if sh := p.Scenario.Steps[p.Step].Shard; !sh.IsWhole() {
			sw.Shard = &record.TraceShard{Index: sh.Index, Count: sh.Count}
		}
	}
	if p.ThresholdMS > 0 {
		sw.TTFTP90ThresholdMS = &p.ThresholdMS
	}
	res := &Result{Record: sw, Dir: dir}
	path := filepath.Join(dir, runs.SweepFile)
	if _, err := runs.ReplaceJSON(path, sw); err != nil {
		os.Remove(dir) // only ever empty here
		return nil, err
	}
	for k := range p.Levels() {
		if ctx.Err() != nil {
			sw.Status, sw.StopReason = record.StatusInterrupted, "interrupted: "+context.Cause(ctx).Error()
			break
		}
		level, name := p.Level(k)
		requests := 0
		for _, l := range sw.Levels {
			requests += l.Requests
		}
		fmt.Fprintf(console, "sweep level: %s [%s]\n", name, runner.ProgressText(k, p.Levels(), "levels done", requests, time.Since(start)))
		out, err := run(ctx, level, dir)
		if err != nil && out == nil && len(sw.Levels) == 0 {
			// Nothing was measured (the server refused or could not be reached, or a signal
			// came first): no sweep is left behind, and the error keeps its exit code.
			os.Remove(path)
			os.Remove(dir) // only ever empty here
			if ctx.Err() != nil {
				return nil, fmt.Errorf("sweep interrupted before its first level: %w", err)
			}
			return nil, err
		}
		if err != nil {
			if ctx.Err() != nil {
				sw.Status, sw.StopReason = record.StatusInterrupted, fmt.Sprintf("interrupted at %s: %v", name, context.Cause(ctx))
			} else {
				sw.Status, sw.StopReason = record.StatusFailed, fmt.Sprintf("%s: %v", name, err)
			}
			break
		}
		l, err := levelOf(p, k, dir, out)
		if err != nil {
			return nil, err
		}
		sw.Levels = append(sw.Levels, l)
		if sw.Status == record.StatusRunning {
			if _, err := runs.ReplaceJSON(path, sw); err != nil {
				return nil, err
			}
		}
		if out.Interrupted {
			sw.Status, sw.StopReason = record.StatusInterrupted, fmt.Sprintf("%s: %s", name, out.Record.StopReason)
			break
		}
		if out.Failed != "" {
			sw.Status, sw.StopReason = record.StatusFailed, fmt.Sprintf("%s: %s", name, out.Failed)
			break
		}
		if g := out.GateSummary(); g != "" {
			res.GatesFailed = append(res.GatesFailed, fmt.Sprintf("%s: %s", name, g))
		}
	}
	if len(sw.Levels) == 0 {
		os.Remove(path)
		if entries, _ := os.ReadDir(dir); len(entries) == 0 {
			os.Remove(dir)
		}
		return nil, fmt.Errorf("sweep: no level ran: %s", sw.StopReason)
	}
	if sw.Status == record.StatusRunning {
		sw.Status = record.StatusCompleted
	}
	sw.Decide()
	if len(p.Endpoints) > 0 {
		sw.CapacityReason = "a host-tier sweep decides no capacity: its levels are host-tier sizes, not loads"
		fitHostTier(ctx, p, dir, sw)
	}
	if _, err := runs.ReplaceJSON(path, sw); err != nil {
		return nil, err
	}
	return res, nil
}

// levelOf is the sweep record's line for level k, which out ran.
func levelOf(p *Plan, k int, dir string, out *runner.Outcome) (record.SweepLevel, error) {
	rel, _ := filepath.Rel(dir, out.Dir)
	sum, err := runs.FileSHA256(out.RecordPath)
	if err != nil {
		return record.SweepLevel{}, err
	}
	step := p.Scenario.Steps[p.Step].ID
	var threshold *float64
	if p.ThresholdMS > 0 {
		threshold = &p.ThresholdMS
	}
	if !p.IsTrace() {
		return record.SweepLevelOf(p.Users[k], rel, sum, out.Record.Status, out.Record.Conversation(step), threshold), nil
	}
	ts := out.Record.Trace(step)
	if len(p.Endpoints) > 0 {
		return record.SweepHostTierLevelOf(redact.URL(p.Endpoints[k]), rel, sum, out.Record.Status, ts, threshold), nil
	}
	var rate *float64
	if ts != nil {
		rate = ts.OfferedRequestsPerSecond
	}
	return record.SweepTraceLevelOf(p.TimeScales[k], rate, rel, sum, out.Record.Status, ts, threshold), nil
}

// ParseUsers reads an ascending list of user counts.
func ParseUsers(s string) ([]int, error) {
	if s == "" {
		return nil, fmt.Errorf("give the user counts, e.g. --users 8,16,32")
	}
	var out []int
	for _, f := range strings.Split(s, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(f))
		if err != nil || n < 1 || n > scenarios.MaxUsers {
			return nil, fmt.Errorf("%q is not a user count between 1 and %d", f, scenarios.MaxUsers)
		}
		if len(out) > 0 && n <= out[len(out)-1] {
			return nil, fmt.Errorf("user counts must ascend (%d after %d)", n, out[len(out)-1])
		}
		out = append(out, n)
	}
	if len(out) > MaxLevels {
		return nil, fmt.Errorf("%d levels, at most %d", len(out), MaxLevels)
	}
	return out, nil
}

// ParseTimeScales reads a descending list of time scales: each level offers a higher rate.
func ParseTimeScales(s string) ([]float64, error) {
	if s == "" {
		return nil, fmt.Errorf("give the time scales, e.g. --time-scales 1,0.5,0.25")
	}
	var out []float64
	for _, f := range strings.Split(s, ",") {
		v, err := strconv.ParseFloat(strings.TrimSpace(f), 64)
		if err != nil || !(v >= scenarios.MinTimeScale && v <= scenarios.MaxTimeScale) {
			return nil, fmt.Errorf("%q is not a time scale between %g and %g", f, scenarios.MinTimeScale, scenarios.MaxTimeScale)
		}
		if len(out) > 0 && v >= out[len(out)-1] {
			return nil, fmt.Errorf("time scales must descend, so the request rate rises (%g after %g)", v, out[len(out)-1])
		}
		out = append(out, v)
	}
	if len(out) > MaxLevels {
		return nil, fmt.Errorf("%d levels, at most %d", len(out), MaxLevels)
	}
	return out, nil
}

// findStep finds the step to sweep: id, or the scenario's only conversation or trace step.
func findStep(sc *scenarios.Scenario, id string) (int, error) {
	var found []int
	for i := range sc.Steps {
		if (sc.Steps[i].IsConversation() || sc.Steps[i].IsTrace()) && (id == "" || sc.Steps[i].ID == id) {
			found = append(found, i)
		}
	}
	switch {
	case len(found) == 1:
		return found[0], nil
	case id != "":
		return 0, fmt.Errorf("%s: no conversation or trace step %q", sc.Path, id)
	case len(found) == 0:
		return 0, fmt.Errorf("%s: no step with kind = \"conversation\" or \"trace\" to sweep", sc.Path)
	default:
		return 0, fmt.Errorf("%s: %d conversation and trace steps: name one with --step", sc.Path, len(found))
	}
}

package sweep

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"math"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/runner"
	"github.com/anvil-serving/kvbench/scenarios"
)

func chat(t *testing.T) *scenarios.Scenario {
	t.Helper()
	sc, err := scenarios.Builtin("chat-capacity-offload16")
	if err != nil {
		t.Fatal(err)
	}
	return sc
}

func TestParseLevels(t *testing.T) {
	if u, err := ParseUsers("2, 4,8"); err != nil || len(u) != 3 || u[2] != 8 {
		t.Errorf("ParseUsers = %v, %v", u, err)
	}
	for _, bad := range []string{"", "4,2", "0", "x", strings.Repeat("1,", 40) + "1"} {
		if _, err := ParseUsers(bad); err == nil {
			t.Errorf("ParseUsers(%q) accepted", bad)
		}
	}
	if s, err := ParseTimeScales("1,0.5,0.25"); err != nil || len(s) != 3 {
		t.Errorf("ParseTimeScales = %v, %v", s, err)
	}
	for _, bad := range []string{"", "0.5,1", "0", "NaN"} {
		if _, err := ParseTimeScales(bad); err == nil {
			t.Errorf("ParseTimeScales(%q) accepted", bad)
		}
	}
}

// TestPlanLevels: a conversation step is stepped by users, not time scales; each level runs
// the step alone with its own users, under its own name, its prompts seeded apart.
func TestPlanLevels(t *testing.T) {
	sc := chat(t)
	if _, err := NewPlan(sc, "", "", "1,0.5", 0); err == nil || !strings.Contains(err.Error(), "not --time-scales") {
		t.Errorf("time scales on a conversation: %v", err)
	}
	if _, err := NewPlan(sc, "nope", "2", "", 0); err == nil || !strings.Contains(err.Error(), `no conversation or trace step "nope"`) {
		t.Errorf("unknown step: %v", err)
	}
	for _, bad := range []float64{-1, math.NaN(), math.Inf(1)} {
		if _, err := NewPlan(sc, "", "2", "", bad); err == nil || !strings.Contains(err.Error(), "--ttft-p90-ms must be a positive number") {
			t.Errorf("threshold %g: %v, want it refused", bad, err)
		}
	}
	p, err := NewPlan(sc, "", "2,4", "", 500)
	if err != nil {
		t.Fatal(err)
	}
	if p.Levels() != 2 || p.IsTrace() {
		t.Fatalf("levels %d, trace %v", p.Levels(), p.IsTrace())
	}
	l1, name := p.Level(1)
	if name != "4 users" || l1.Name != sc.Name+"-users-4" || len(l1.Steps) != 1 || l1.Steps[0].Users != 4 || l1.Steps[0].Concurrency != 4 {
		t.Errorf("level 1: %q %q %+v", name, l1.Name, l1.Steps)
	}
	if l1.Prompt.Seed != sc.Prompt.Seed+LevelSeedStride {
		t.Errorf("level 1 seed %d, want %d", l1.Prompt.Seed, sc.Prompt.Seed+LevelSeedStride)
	}
	if sc.Steps[0].Users == 4 {
		t.Error("a level changed the scenario it came from")
	}
}

// fakeLevel writes a run record for each level and returns an outcome whose gates fail at
// the levels in failAt.
func fakeLevel(t *testing.T, failAt map[string]bool) RunLevel {
	return func(_ context.Context, level *scenarios.Scenario, dir string) (*runner.Outcome, error) {
		run := filepath.Join(dir, level.Name)
		if err := os.Mkdir(run, 0o755); err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(run, "run.json")
		if err := os.WriteFile(path, []byte("{}"), 0o644); err != nil {
			t.Fatal(err)
		}
		out := &runner.Outcome{Dir: run, RecordPath: path, Record: derive.Of(&record.Run{Status: record.StatusCompleted}, nil)}
		if failAt[level.Name] {
			out.Gates = []record.GateResult{{Gate: scenarios.Gate{Step: "chat"}, Reason: "ttft too high"}}
		}
		return out, nil
	}
}

// TestRunGoesOnPastFailedGates: a level's failed gates are listed and the next level runs;
// the sweep record names every level's run directory with its sha256.
func TestRunGoesOnPastFailedGates(t *testing.T) {
	sc := chat(t)
	p, err := NewPlan(sc, "", "2,4", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	var console strings.Builder
	res, err := Run(context.Background(), p, t.TempDir(), "test", &console, fakeLevel(t, map[string]bool{sc.Name + "-users-2": true}))
	if err != nil {
		t.Fatal(err)
	}
	if len(res.Record.Levels) != 2 || res.Record.Status != record.StatusCompleted {
		t.Fatalf("levels %d, status %s", len(res.Record.Levels), res.Record.Status)
	}
	if len(res.GatesFailed) != 1 || !strings.HasPrefix(res.GatesFailed[0], "2 users: 1 gate(s) failed: chat: ttft too high") {
		t.Errorf("gates failed %q", res.GatesFailed)
	}
	if res.Record.Levels[1].Run != sc.Name+"-users-4" || res.Record.Levels[1].RunSHA256 == "" {
		t.Errorf("level 1 %+v", res.Record.Levels[1])
	}
	// Each level says how far the sweep has got: levels done of all, and past the first the ETA.
	if !runs.IsSweep(res.Dir) || !strings.Contains(console.String(), "sweep level: 2 users [0/2 levels done (0%)]\n") ||
		!strings.Contains(console.String(), "sweep level: 4 users [1/2 levels done (50%)") || !strings.Contains(console.String(), "ETA ") {
		t.Errorf("no sweep record in %s, console %q", res.Dir, console.String())
	}
	dirs, sweeps, err := runs.ExpandDirs([]string{res.Dir, "other"})
	if err != nil || len(dirs) != 3 || dirs[2] != "other" || len(sweeps) != 1 || len(sweeps[0].Levels) != 2 {
		t.Errorf("ExpandDirs = %v, %v, %v", dirs, sweeps, err)
	}
}

// TestRunLeavesNothingWhenNothingRan: a first level that measured nothing leaves no sweep
// directory, and its error comes back as it was (its exit code with it).
func TestRunLeavesNothingWhenNothingRan(t *testing.T) {
	p, err := NewPlan(chat(t), "", "2,4", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	refused := errors.New("server refused")
	_, err = Run(context.Background(), p, out, "test", &strings.Builder{}, func(context.Context, *scenarios.Scenario, string) (*runner.Outcome, error) {
		return nil, refused
	})
	if !errors.Is(err, refused) {
		t.Fatalf("err = %v", err)
	}
	if entries, _ := os.ReadDir(out); len(entries) != 0 {
		t.Errorf("left %d entries behind", len(entries))
	}
}

// TestRunStopsAtAnInterruptedLevel: the sweep record says interrupted, with the level.
func TestRunStopsAtAnInterruptedLevel(t *testing.T) {
	sc := chat(t)
	p, err := NewPlan(sc, "", "2,4", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	level := fakeLevel(t, nil)
	res, err := Run(context.Background(), p, t.TempDir(), "test", &strings.Builder{}, func(ctx context.Context, l *scenarios.Scenario, dir string) (*runner.Outcome, error) {
		out, err := level(ctx, l, dir)
		out.Interrupted, out.Record.StopReason = true, "received SIGINT"
		return out, err
	})
	if err != nil {
		t.Fatal(err)
	}
	if res.Record.Status != record.StatusInterrupted || len(res.Record.Levels) != 1 || res.Record.StopReason != "2 users: received SIGINT" {
		t.Errorf("status %s, %d levels, reason %q", res.Record.Status, len(res.Record.Levels), res.Record.StopReason)
	}
}

// TestRunWritesTheRecordAsLevelsEnd: while a level runs, sweep.json is on disk saying
// running and listing every level that ended, so a kill keeps them.
func TestRunWritesTheRecordAsLevelsEnd(t *testing.T) {
	sc := chat(t)
	p, err := NewPlan(sc, "", "2,4", "", 0)
	if err != nil {
		t.Fatal(err)
	}
	level := fakeLevel(t, nil)
	var seen []record.Sweep
	res, err := Run(context.Background(), p, t.TempDir(), "test", &strings.Builder{}, func(ctx context.Context, l *scenarios.Scenario, dir string) (*runner.Outcome, error) {
		data, err := os.ReadFile(filepath.Join(dir, runs.SweepFile))
		if err != nil {
			t.Fatalf("no sweep record while %s runs: %v", l.Name, err)
		}
		var s record.Sweep
		if err := json.Unmarshal(data, &s); err != nil {
			t.Fatal(err)
		}
		seen = append(seen, s)
		return level(ctx, l, dir)
	})
	if err != nil {
		t.Fatal(err)
	}
	if len(seen) != 2 || seen[0].Status != record.StatusRunning || len(seen[0].Levels) != 0 || seen[1].Status != record.StatusRunning || len(seen[1].Levels) != 1 || seen[1].Levels[0].Users != 2 {
		t.Fatalf("records seen while levels ran: %+v", seen)
	}
	data, err := os.ReadFile(filepath.Join(res.Dir, runs.SweepFile))
	if err != nil || !strings.Contains(string(data), `"status": "completed"`) {
		t.Errorf("final record: %v\n%s", err, data)
	}
}

// TestHostTierPlan: --endpoints needs a trace step, two servers or more and a level to
// calibrate at, and replaces the load flags and the target; each level goes to its own
// server and reads that server's /metrics.
func TestHostTierPlan(t *testing.T) {
	sc := chat(t)
	if _, err := NewHostTierPlan(sc, "", "http://a:1/v1,http://b:1/v1", 1); err == nil || !strings.Contains(err.Error(), "not a trace step") {
		t.Errorf("a conversation: %v", err)
	}
	tr := &scenarios.Scenario{Name: "t", Path: "t.toml", Steps: []scenarios.Step{{ID: "load", Kind: "trace"}}}
	for _, c := range []struct {
		endpoints string
		level     int
		want      string
	}{
		{"http://a:1/v1", 1, "at least two"},
		{"http://a:1/v1,ftp://b", 1, "not an http(s) URL"},
		{"http://a:1/v1,http://b:1/v1", 3, "levels 1 to 2"},
	} {
		if _, err := NewHostTierPlan(tr, "", c.endpoints, c.level); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%s level %d: %v, want %q", c.endpoints, c.level, err, c.want)
		}
	}
	p, err := NewHostTierPlan(tr, "", "http://a:1/v1, http://b:2/v1", 2)
	if err != nil {
		t.Fatal(err)
	}
	level, _ := p.Level(1)
	if p.Levels() != 2 || p.CalibrateLevel != 1 || level.Target.Endpoint != "http://b:2/v1" || len(level.Target.Metrics) != 1 || level.Target.Metrics[0] != "http://b:2/metrics" {
		t.Errorf("plan %+v, level 2 target %+v", p, level.Target)
	}
}

// TestFlagsRefuseMixes: --endpoints runs one load on its own servers, and --calibrate-level
// belongs to it.
func TestFlagsRefuseMixes(t *testing.T) {
	tr := &scenarios.Scenario{Name: "t", Path: "t.toml", Steps: []scenarios.Step{{ID: "load", Kind: "trace"}}}
	two := "--endpoints=http://a:1/v1,http://b:1/v1"
	for _, c := range []struct {
		args        []string
		targetGiven bool
		want        string
	}{
		{[]string{two, "--time-scales", "1,0.5"}, false, "without --users or --time-scales"},
		{[]string{two, "--ttft-p90-ms", "100"}, false, "runs one load"},
		{[]string{two}, true, "without --endpoint or --metrics"},
		{[]string{"--calibrate-level", "2", "--time-scales", "1"}, false, "give it with --endpoints"},
	} {
		fs := flag.NewFlagSet("sweep", flag.ContinueOnError)
		f := RegisterFlags(fs)
		if err := fs.Parse(c.args); err != nil {
			t.Fatal(err)
		}
		if _, err := f.Plan(tr, c.targetGiven); err == nil || !strings.Contains(err.Error(), c.want) {
			t.Errorf("%v: %v, want %q", c.args, err, c.want)
		}
	}
}

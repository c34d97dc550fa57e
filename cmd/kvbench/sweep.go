package main

import (
	"context"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"slices"
	"strconv"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/termsafe"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "sweep", summary: "run a conversation step at several user counts, or a trace step at several request rates, and report the capacity within a TTFT p90", run: runSweep})
}

// maxSweepLevels bounds a sweep's user counts.
const maxSweepLevels = 32

func runSweep(ctx context.Context, args []string, stdout, stderr io.Writer) error {
	var o runOptions
	fs := o.register("sweep", stdout, "SCENARIO (--users 8,16,32,64 | --time-scales 1,0.5,0.25) [--ttft-p90-ms X] [flags]",
		"kvbench sweep chat-capacity-offload16 --endpoint http://127.0.0.1:8000/v1 --users 8,16,32,64 --ttft-p90-ms 2000\n"+
			"kvbench sweep my-trace.toml --trace conversation_trace.jsonl --endpoint http://127.0.0.1:8000/v1 --time-scales 1,0.5,0.25 --ttft-p90-ms 2000")
	usersFlag := fs.String("users", "", "conversation step: user counts to run, ascending, comma-separated (e.g. 8,16,32,64)")
	scalesFlag := fs.String("time-scales", "", "trace step (open loop): time_scale values to run, descending, so each level offers a higher request rate (e.g. 1,0.5,0.25)")
	threshold := fs.Float64("ttft-p90-ms", 0, "TTFT p90 (ms) a level must stay within to count toward capacity; 0: report levels only")
	stepID := fs.String("step", "", "the conversation or trace step to sweep (default: the scenario's only one)")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("sweep: want one scenario file or built-in name, got %d", len(args))
	}
	if o.format != "text" && o.format != "json" {
		return usageErrorf("sweep: --format must be text or json")
	}
	if err := runs.CheckOutputDir(o.out); err != nil {
		return usageErrorf("sweep: --out: %w", err)
	}
	if *threshold < 0 {
		return usageErrorf("sweep: --ttft-p90-ms must not be negative")
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return err
	}
	if err := o.target.apply(sc); err != nil {
		return err
	}
	idx, err := sweepStep(sc, *stepID)
	if err != nil {
		return usageError(err)
	}
	traceSweep := sc.Steps[idx].IsTrace()
	var users []int
	var scales []float64
	switch {
	case traceSweep && *usersFlag != "":
		return usageErrorf("sweep: step %s is a trace step: step its request rate with --time-scales, not --users", sc.Steps[idx].ID)
	case !traceSweep && *scalesFlag != "":
		return usageErrorf("sweep: step %s is a conversation: step its users with --users, not --time-scales", sc.Steps[idx].ID)
	case traceSweep && sc.Steps[idx].ClosedLoop():
		return usageErrorf("sweep: %s: trace step %s is a closed loop (concurrency set): --time-scales steps an open loop's request rate", sc.Position(fmt.Sprintf("step[%d].concurrency", idx)), sc.Steps[idx].ID)
	case traceSweep:
		if scales, err = parseTimeScales(*scalesFlag); err != nil {
			return usageErrorf("sweep: --time-scales: %v", err)
		}
	default:
		if users, err = parseUsers(*usersFlag); err != nil {
			return usageErrorf("sweep: --users: %v", err)
		}
	}
	// What a level's run would refuse before sending anything (the key's variable, hosts
	// the file names, probes) is refused before the sweep directory exists.
	if _, err := o.admit(sc); err != nil {
		return err
	}
	consoleW := stdout
	if o.format == "json" {
		consoleW = stderr
	}
	start := time.Now()
	dir, err := runs.NewRunDir(o.out, sc.Name+"-sweep", start)
	if err != nil {
		return err
	}
	sw := &record.Sweep{
		Schema: record.SweepSchema, ObservedAt: start.UTC().Format(time.RFC3339), Status: record.StatusCompleted,
		Scenario: sc.Name, Step: sc.Steps[idx].ID, Load: record.SweepUsers, Kvbench: record.Kvbench{Version: kvbenchVersion()},
	}
	if traceSweep {
		sw.Load = record.SweepRequestRate
	}
	if *threshold > 0 {
		sw.TTFTP90ThresholdMS = threshold
	}
	lo := o
	lo.out, lo.format = dir, "text"
	// gatesFailed holds each level's failed gates (the implicit one fails a step whose
	// requests failed): the sweep goes on, and exits 3 as run would.
	var gatesFailed []string
	n := max(len(users), len(scales))
	for k := range n {
		if ctx.Err() != nil {
			sw.Status, sw.StopReason = record.StatusInterrupted, "interrupted: "+context.Cause(ctx).Error()
			break
		}
		var level *scenarios.Scenario
		var name string
		if traceSweep {
			level, name = withTimeScale(sc, idx, scales[k], k), fmt.Sprintf("time_scale %g", scales[k])
		} else {
			level, name = withUsers(sc, idx, users[k], k), fmt.Sprintf("%d users", users[k])
		}
		fmt.Fprintf(consoleW, "sweep level: %s\n", name)
		out, err := runScenario(ctx, level, lo, consoleW, stderr)
		if err != nil && out == nil && len(sw.Levels) == 0 {
			// Nothing was measured (the server refused or could not be reached, or a signal
			// came first): no sweep is left behind, and the error keeps its exit code.
			os.Remove(dir) // only ever empty here
			if ctx.Err() != nil {
				return fmt.Errorf("sweep interrupted before its first level: %w", err)
			}
			return err
		}
		if err != nil {
			if ctx.Err() != nil {
				sw.Status, sw.StopReason = record.StatusInterrupted, fmt.Sprintf("interrupted at %s: %v", name, context.Cause(ctx))
			} else {
				sw.Status, sw.StopReason = record.StatusFailed, fmt.Sprintf("%s: %v", name, err)
			}
			break
		}
		rel, _ := filepath.Rel(dir, out.Dir)
		sum, err := runs.FileSHA256(out.RecordPath)
		if err != nil {
			return err
		}
		if traceSweep {
			ts := out.Record.Trace(sw.Step)
			var rate *float64
			if ts != nil {
				rate = ts.OfferedRequestsPerSecond
			}
			sw.Levels = append(sw.Levels, record.SweepTraceLevelOf(scales[k], rate, rel, sum, out.Record.Status, ts, sw.TTFTP90ThresholdMS))
		} else {
			sw.Levels = append(sw.Levels, record.SweepLevelOf(users[k], rel, sum, out.Record.Status, out.Record.Conversation(sw.Step), sw.TTFTP90ThresholdMS))
		}
		if out.Interrupted {
			sw.Status, sw.StopReason = record.StatusInterrupted, fmt.Sprintf("%s: %s", name, out.Record.StopReason)
			break
		}
		if out.Failed != "" {
			sw.Status, sw.StopReason = record.StatusFailed, fmt.Sprintf("%s: %s", name, out.Failed)
			break
		}
		if err := outcomeError(out); err != nil {
			gatesFailed = append(gatesFailed, fmt.Sprintf("%s: %v", name, err))
		}
	}
	if len(sw.Levels) == 0 {
		if entries, _ := os.ReadDir(dir); len(entries) == 0 {
			os.Remove(dir)
		}
		return fmt.Errorf("sweep: no level ran: %s", sw.StopReason)
	}
	sw.Decide()
	if _, err := runs.WriteJSON(filepath.Join(dir, runs.SweepFile), sw); err != nil {
		return err
	}
	if o.format == "json" {
		if err := printJSON(stdout, sw); err != nil {
			return err
		}
	} else {
		fmt.Fprintln(stdout)
		if err := sw.WriteText(termsafe.NewWriter(stdout)); err != nil {
			return err
		}
	}
	fmt.Fprintf(consoleW, "sweep record: %s\n", filepath.Join(dir, runs.SweepFile))
	// The exit code follows run's: a sweep that did less than asked exits 1, one whose levels
	// failed gates 3.
	if sw.Status != record.StatusCompleted {
		return &exitError{code: exitRuntime, err: fmt.Errorf("sweep %s: %s; what was measured is in %s", sw.Status, sw.StopReason, dir)}
	}
	if len(gatesFailed) > 0 {
		return &exitError{code: exitGateFailed, err: fmt.Errorf("sweep: %d level(s) failed gates: %s; the records are in %s", len(gatesFailed), strings.Join(gatesFailed, "; "), dir)}
	}
	return nil
}

// parseUsers reads an ascending list of user counts.
func parseUsers(s string) ([]int, error) {
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
	if len(out) > maxSweepLevels {
		return nil, fmt.Errorf("%d levels, at most %d", len(out), maxSweepLevels)
	}
	return out, nil
}

// parseTimeScales reads a descending list of time scales: each level offers a higher rate.
func parseTimeScales(s string) ([]float64, error) {
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
	if len(out) > maxSweepLevels {
		return nil, fmt.Errorf("%d levels, at most %d", len(out), maxSweepLevels)
	}
	return out, nil
}

// sweepStep finds the step to sweep: id, or the scenario's only conversation or trace step.
func sweepStep(sc *scenarios.Scenario, id string) (int, error) {
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

// levelSeedStride separates the prompt seeds of a sweep's levels: level k uses
// prompt.seed + 1000k, so a level's users do not find the previous level's conversations
// (the same users, the same bytes) in the server's caches.
const levelSeedStride = 1000

// withUsers is sc with only step idx, run by n users as level k, named for the level.
func withUsers(sc *scenarios.Scenario, idx, n, k int) *scenarios.Scenario {
	c := *sc
	c.Prompt.Seed = sc.Prompt.Seed + int64(k)*levelSeedStride
	st := sc.Steps[idx]
	st.Users, st.Concurrency = n, n
	c.Steps = []scenarios.Step{st}
	c.Gates = slices.DeleteFunc(slices.Clone(sc.Gates), func(g scenarios.Gate) bool { return g.Step != st.ID })
	c.Name = fmt.Sprintf("%s-users-%d", sc.Name, n)
	return &c
}

// withTimeScale is sc with only trace step idx, replayed at time scale x as level k, named for
// the level; its prompts are seeded apart from the other levels' (see levelSeedStride).
func withTimeScale(sc *scenarios.Scenario, idx int, x float64, k int) *scenarios.Scenario {
	c := *sc
	c.Prompt.Seed = sc.Prompt.Seed + int64(k)*levelSeedStride
	st := sc.Steps[idx]
	st.TimeScale = x
	c.Steps = []scenarios.Step{st}
	c.Gates = slices.DeleteFunc(slices.Clone(sc.Gates), func(g scenarios.Gate) bool { return g.Step != st.ID })
	c.Name = fmt.Sprintf("%s-time-scale-%s", sc.Name, strconv.FormatFloat(x, 'f', -1, 64))
	return &c
}

// expandSweeps replaces each sweep directory among dirs by its levels' run directories, so a
// report shows every level of a sweep.
func expandSweeps(dirs []string) ([]string, error) {
	var out []string
	for _, d := range dirs {
		if !runs.IsSweep(d) {
			out = append(out, d)
			continue
		}
		s, err := runs.LoadSweep(d)
		if err != nil {
			return nil, usageError(err)
		}
		for _, l := range s.Levels {
			if l.Run != "" {
				out = append(out, filepath.Join(d, l.Run))
			}
		}
	}
	return out, nil
}

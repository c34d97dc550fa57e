package runs

import (
	"fmt"
	"os"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// killedSweep is a sweep directory as kill -9 leaves it during its second level: two
// level run directories (chat-capacity-offload16 at 2 and 4 users, each run.json still
// running), and sweep.json, when listFirst, still running and listing the first level.
func killedSweep(t *testing.T, listFirst bool) string {
	t.Helper()
	sc, err := scenarios.Builtin("chat-capacity-offload16")
	if err != nil {
		t.Fatal(err)
	}
	dir := filepath.Join(t.TempDir(), sc.Name+"-sweep-20260101T000000Z")
	if err := os.Mkdir(dir, 0o755); err != nil {
		t.Fatal(err)
	}
	var levels []record.SweepLevel
	for _, users := range []int{2, 4} {
		lv := *sc
		st := sc.Steps[0]
		st.Users, st.Concurrency = users, users
		lv.Steps, lv.Name = []scenarios.Step{st}, fmt.Sprintf("%s-users-%d", sc.Name, users)
		info := derive.RunInfo{Scenario: &lv, ObservedAt: time.Unix(0, 0), Status: record.StatusRunning}
		run, err := CreateRunDir(dir, lv.Name, time.Unix(0, 0), derive.NewRun(info))
		if err != nil {
			t.Fatal(err)
		}
		sum, _ := FileSHA256(filepath.Join(run, "run.json"))
		levels = append(levels, record.SweepLevel{Users: users, Run: filepath.Base(run), RunSHA256: sum, Status: record.StatusInterrupted})
	}
	if listFirst {
		th := 500.0
		sw := record.Sweep{Schema: record.SweepSchema, Status: record.StatusRunning, Scenario: sc.Name, Step: sc.Steps[0].ID, Load: record.SweepUsers, TTFTP90ThresholdMS: &th, Levels: levels[:1]}
		if _, err := WriteJSON(filepath.Join(dir, SweepFile), sw); err != nil {
			t.Fatal(err)
		}
	}
	return dir
}

// TestLoadKilledSweep: a sweep killed mid-level, with sweep.json still running or never
// written, loads as incomplete with every level directory it holds, in load order.
func TestLoadKilledSweep(t *testing.T) {
	for _, listFirst := range []bool{true, false} {
		dir := killedSweep(t, listFirst)
		if !IsSweep(dir) {
			t.Fatalf("listed %v: not a sweep", listFirst)
		}
		s, err := LoadSweep(dir)
		if err != nil {
			t.Fatalf("listed %v: %v", listFirst, err)
		}
		if s.Status != record.StatusIncomplete || !strings.Contains(s.StopReason, "the sweep did not finish") {
			t.Errorf("listed %v: status %q (%s)", listFirst, s.Status, s.StopReason)
		}
		if s.Scenario != "chat-capacity-offload16" || s.Step == "" || s.Load != record.SweepUsers {
			t.Errorf("listed %v: scenario %q step %q load %q", listFirst, s.Scenario, s.Step, s.Load)
		}
		if len(s.Levels) != 2 || s.Levels[0].Users != 2 || s.Levels[1].Users != 4 || s.Levels[1].Status != record.StatusIncomplete {
			t.Fatalf("listed %v: levels %+v", listFirst, s.Levels)
		}
		if s.CapacityUsers != nil || !strings.Contains(s.CapacityReason, "no capacity decided") {
			t.Errorf("listed %v: capacity %v (%s)", listFirst, s.CapacityUsers, s.CapacityReason)
		}
	}
	// A directory of runs that is no sweep is not taken for one.
	plain := filepath.Join(t.TempDir(), "results")
	os.Mkdir(plain, 0o755)
	if IsSweep(plain) {
		t.Error("a plain directory is taken for a sweep")
	}
}

package runs

import (
	"bytes"
	"encoding/json"
	"errors"
	"fmt"
	"io/fs"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
)

func TestWriteJSONNeverOverwrites(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "run.json")
	sum, err := WriteJSON(p, map[string]int{"a": 1})
	if err != nil {
		t.Fatal(err)
	}
	if got, _ := FileSHA256(p); got != sum {
		t.Fatalf("returned sha %s, file has %s", sum, got)
	}
	if _, err := WriteJSON(p, map[string]int{"a": 2}); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("second write: %v", err)
	}
	data, _ := os.ReadFile(p)
	if string(data) != "{\n  \"a\": 1\n}\n" {
		t.Fatalf("file changed: %q", data)
	}
	entries, _ := os.ReadDir(dir)
	if len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
}

func TestNewRunDirNeverReuses(t *testing.T) {
	parent := t.TempDir()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	a, err := NewRunDir(parent, "eviction/6x", at)
	if err != nil {
		t.Fatal(err)
	}
	b, err := NewRunDir(parent, "eviction/6x", at)
	if err != nil {
		t.Fatal(err)
	}
	if filepath.Base(a) != "eviction_6x-20261130T100000Z" || filepath.Base(b) != "eviction_6x-20261130T100000Z-1" {
		t.Fatalf("dirs %s %s", a, b)
	}
}

// demoRuns are a `kvbench demo` output written before the run record was typed (the study
// package's fixture): a primary run with a sequence and a replay, and a control run.
var demoRuns = []string{
	"../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z",
	"../../internal/study/testdata/demo/offload8-control-20261201T060010Z",
}

// TestRunRecordRoundTrip: run.json decodes into its Go type and encodes back to the same
// bytes, so nothing of a record is lost or reordered by reading it.
func TestRunRecordRoundTrip(t *testing.T) {
	for _, dir := range demoRuns {
		r, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "run.json"))
		got, err := json.MarshalIndent(r.Run, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		if !bytes.Equal(append(got, '\n'), want) {
			t.Fatalf("%s: run.json changed in a decode/encode round trip:\n%s", dir, got)
		}
	}
}

// TestBuildReproducesRunRecord: the record derived from the step artifacts and what the run
// knew besides them is byte for byte the run.json the run wrote.
func TestBuildReproducesRunRecord(t *testing.T) {
	for _, dir := range demoRuns {
		r, err := Load(dir)
		if err != nil {
			t.Fatal(err)
		}
		observed, err := time.Parse(time.RFC3339, r.ObservedAt)
		if err != nil {
			t.Fatal(err)
		}
		cache := r.Cache
		cache.StoreBytesPerTokenMeasured, cache.LoadBytesPerTokenMeasured = nil, nil
		info := derive.RunInfo{
			Scenario: r.Scenario, ObservedAt: observed, Status: r.Status, StopReason: r.StopReason,
			KvbenchVersion: r.Kvbench.Version, ServedModel: r.Model.ServedName, ModelRoot: r.Model.Repo,
			ServerVersion: r.Runtime.Engine, Cache: cache, Preflight: r.Preflight, Probes: r.Probes,
			Gates: r.Gates,
		}
		if r.Repeats != nil {
			info.Repeat = r.Repeats.Count
		}
		for _, f := range r.Files[1:] {
			info.Artifacts = append(info.Artifacts, record.ArtifactRef{Step: f.Step, Path: filepath.Base(f.Path), SHA256: f.SHA256})
		}
		rec := derive.NewRun(info)
		rec.Derive(r.Repetitions)
		got, err := json.MarshalIndent(rec, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		want, _ := os.ReadFile(filepath.Join(dir, "run.json"))
		if !bytes.Equal(append(got, '\n'), want) {
			t.Fatalf("%s: the rebuilt record differs from run.json:\n%s", dir, got)
		}
	}
}

func TestLoadRefusesChangedArtifact(t *testing.T) {
	dst := t.TempDir()
	src := demoRuns[1]
	entries, _ := os.ReadDir(src)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if e.Name() == "step-02-replay.json" {
			data = bytes.Replace(data, []byte(`"gpu_hit"`), []byte(`"cpu_reload"`), 1)
		}
		os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644)
	}
	if _, err := Load(dst); !errors.Is(err, ErrArtifactChanged) {
		t.Fatalf("err = %v, want ErrArtifactChanged", err)
	}
	// An edited run.json verdict does not follow from the (unchanged) artifact.
	dst2 := t.TempDir()
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if e.Name() == "run.json" {
			data = bytes.Replace(data, []byte(`"verdict": "gpu_hit"`), []byte(`"verdict": "cpu_reload"`), 1)
		}
		os.WriteFile(filepath.Join(dst2, e.Name()), data, 0o644)
	}
	if _, err := Load(dst2); !errors.Is(err, ErrArtifactChanged) || !strings.Contains(err.Error(), "replay") {
		t.Fatalf("edited run.json verdict: err = %v, want ErrArtifactChanged naming the step", err)
	}
	if _, err := Load(t.TempDir()); !errors.Is(err, ErrNotRun) {
		t.Fatalf("empty dir: err = %v, want ErrNotRun", err)
	}
}

func TestIdentityMismatches(t *testing.T) {
	a, err := Load(demoRuns[0])
	if err != nil {
		t.Fatal(err)
	}
	b, err := Load(demoRuns[1])
	if err != nil {
		t.Fatal(err)
	}
	if mm := Mismatches(a.Identify(), a.Identify()); len(mm) != 0 {
		t.Fatalf("a run differs from itself: %v", mm)
	}
	mm := Mismatches(a.Identify(), b.Identify())
	if len(mm) == 0 || mm[0].Field != "scenario" {
		t.Fatalf("mismatches %v, want the scenario first", mm)
	}
}

// The control section derived from the artifacts is the one run.json recorded; a primary
// run has none.
func TestControlSectionFromArtifacts(t *testing.T) {
	primary, err := Load(demoRuns[0])
	if err != nil {
		t.Fatal(err)
	}
	control, err := Load(demoRuns[1])
	if err != nil {
		t.Fatal(err)
	}
	if primary.Control != nil {
		t.Error("a primary run has a control section")
	}
	data, err := os.ReadFile(filepath.Join(demoRuns[1], "run.json"))
	if err != nil {
		t.Fatal(err)
	}
	var written record.Run
	if err := json.Unmarshal(data, &written); err != nil || written.Control == nil || control.Control == nil {
		t.Fatalf("control sections: written %v, derived %v (%v)", written.Control, control.Control, err)
	}
	got, _ := json.Marshal(control.Control)
	want, _ := json.Marshal(written.Control)
	if !bytes.Equal(got, want) {
		t.Fatalf("derived control section\n%s\nrun.json has\n%s", got, want)
	}
	if cs := control.Control; cs.ReplayVerdict != "gpu_hit" || cs.SetupValid != "no" || cs.Interpretation == "" {
		t.Errorf("control section %+v", cs)
	}
}

// TestIdentityLeavesOutColdTwins: a replay's cold twin resends the replay's prompt, so a run
// with twins has the prompt identities of one without: they still compare.
func TestIdentityLeavesOutColdTwins(t *testing.T) {
	r, err := Load(demoRuns[0])
	if err != nil {
		t.Fatal(err)
	}
	before := r.Identify()
	with := *r.Run
	with.Repetitions = slices.Clone(r.Repetitions)
	steps := slices.Clone(with.Repetitions[0].Steps)
	last := &steps[len(steps)-1]
	twin := last.Requests[0]
	twin.IndexInStep, twin.Replay, twin.ColdTwin = 1, false, &record.ColdTwin{Mechanism: "cache_salt", Field: "cache_salt", Value: "s"}
	last.Requests = append(slices.Clone(last.Requests), twin)
	with.Repetitions[0].Steps = steps
	after := (&Run{Run: &with}).Identify()
	if mm := Mismatches(before, after); len(mm) != 0 || len(after.Order) != len(before.Order) {
		t.Fatalf("a cold twin changed the identity: %+v", mm)
	}
}

// TestLoadAllKeepsTheOrderGiven: runs come back in the order named (compare's baseline
// first, a push's last wins); the first directory that does not load is the error.
func TestLoadAllKeepsTheOrderGiven(t *testing.T) {
	rs, err := LoadAll([]string{demoRuns[1], demoRuns[0]})
	if err != nil {
		t.Fatal(err)
	}
	if len(rs) != 2 || rs[0].Dir != demoRuns[1] || rs[1].Dir != demoRuns[0] {
		t.Fatalf("loaded %d runs, want the two in the order given", len(rs))
	}
	empty := t.TempDir()
	if rs, err := LoadAll([]string{demoRuns[0], empty}); err == nil || !strings.Contains(err.Error(), empty) || rs != nil {
		t.Errorf("a directory that is not a run: %v", err)
	}
}

// TestMismatchesSayTheTracesDiffer: runs of two traces differ in every prompt of the trace
// step; the mismatch says the traces differ, once, instead of listing each prompt.
func TestMismatchesSayTheTracesDiffer(t *testing.T) {
	id := func(trace string, prompts ...string) Identity {
		i := Identity{Scenario: "s", Model: "m", Prompts: map[string]string{}, Shapes: map[string]string{}, Traces: map[string]string{"load": trace}}
		for k, p := range prompts {
			key := fmt.Sprintf("load[%d]", k)
			i.Prompts[key], i.Order = p, append(i.Order, key)
		}
		i.Prompts["warm[0]"], i.Order = "w", append(i.Order, "warm[0]")
		return i
	}
	mm := Mismatches(id("aaa", "p1", "p2", "p3"), id("bbb", "q1", "q2"))
	if len(mm) != 1 || mm[0] != (Mismatch{"trace of step load (sha256)", "aaa", "bbb"}) {
		t.Errorf("mismatches %+v, want the one trace", mm)
	}
	if mm := Mismatches(id("aaa", "p1"), id("aaa", "q1")); len(mm) != 1 || mm[0].Field != "prompt identity of load[0]" {
		t.Errorf("same trace, another prompt: %+v", mm)
	}
}

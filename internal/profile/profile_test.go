package profile

import (
	"errors"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// readProfile checks that path holds a profile: pprof writes them gzip-compressed.
func readProfile(t *testing.T, path string) {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil || len(data) < 2 || data[0] != 0x1f || data[1] != 0x8b {
		t.Errorf("%s: %d bytes, %v; want a gzipped profile", path, len(data), err)
	}
}

func TestStartWritesBothProfiles(t *testing.T) {
	dir := t.TempDir()
	cpu, mem := filepath.Join(dir, "cpu.out"), filepath.Join(dir, "mem.out")
	if err := os.WriteFile(mem, []byte("an old profile"), 0o644); err != nil {
		t.Fatal(err)
	}
	stop, err := Start(File{"--cpuprofile", cpu}, File{"--memprofile", mem})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	readProfile(t, cpu)
	readProfile(t, mem) // replaced: a profile is not a record
}

func TestStartFallsBackToEnv(t *testing.T) {
	dir := filepath.Join(t.TempDir(), "made")
	t.Setenv(Env, dir)
	own := filepath.Join(t.TempDir(), "mine.pprof")
	stop, err := Start(File{"--cpuprofile", ""}, File{"--memprofile", own})
	if err != nil {
		t.Fatal(err)
	}
	if err := stop(); err != nil {
		t.Fatal(err)
	}
	readProfile(t, filepath.Join(dir, "cpu.pprof"))
	readProfile(t, own)
	if _, err := os.Stat(filepath.Join(dir, "mem.pprof")); !errors.Is(err, os.ErrNotExist) {
		t.Errorf("a named --memprofile still wrote %s's mem.pprof: %v", Env, err)
	}
}

func TestStartNoProfiles(t *testing.T) {
	t.Setenv(Env, "")
	stop, err := Start(File{"--cpuprofile", ""}, File{"--memprofile", ""})
	if err != nil || stop() != nil {
		t.Fatalf("no files: %v", err)
	}
}

// TestStartBadFiles: what the user must fix is ErrBadInput, names the flag or variable and
// leaves nothing behind; the run directory's files stay as they were.
func TestStartBadFiles(t *testing.T) {
	run := t.TempDir()
	runJSON := filepath.Join(run, "run.json")
	record := `{"schema": "anvil-serving.kv-offload-replay/v1"}`
	if err := os.WriteFile(runJSON, []byte(record), 0o644); err != nil {
		t.Fatal(err)
	}
	notDir := filepath.Join(t.TempDir(), "file")
	if err := os.WriteFile(notDir, nil, 0o644); err != nil {
		t.Fatal(err)
	}
	for _, tt := range []struct {
		name     string
		env      string
		cpu, mem string
		want     string
		is       error
	}{
		{"cpu over run.json", "", runJSON, "", "--cpuprofile: ", runs.ErrInsideRun},
		{"mem into a run", "", "", filepath.Join(run, "mem.pprof"), "--memprofile: ", runs.ErrInsideRun},
		{"a directory", "", t.TempDir(), "", "--cpuprofile: ", os.ErrExist},
		{"missing directory", "", filepath.Join(notDir, "cpu.pprof"), "", "--cpuprofile: ", nil},
		{"env not a directory", notDir, "", "", Env + "=" + notDir + ": ", nil},
	} {
		t.Run(tt.name, func(t *testing.T) {
			t.Setenv(Env, tt.env)
			stop, err := Start(File{"--cpuprofile", tt.cpu}, File{"--memprofile", tt.mem})
			if stop != nil || !errors.Is(err, ErrBadInput) || !strings.HasPrefix(err.Error(), tt.want) || tt.is != nil && !errors.Is(err, tt.is) {
				t.Errorf("err %v; want ErrBadInput starting %q (and %v)", err, tt.want, tt.is)
			}
		})
	}
	if data, _ := os.ReadFile(runJSON); string(data) != record {
		t.Errorf("run.json changed: %s", data)
	}
	if entries, _ := os.ReadDir(run); len(entries) != 1 {
		t.Errorf("run directory gained files: %v", entries)
	}
}

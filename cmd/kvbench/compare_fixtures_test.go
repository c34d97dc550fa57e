package main

import (
	"os"
	"os/exec"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/sim"
)

// TestWriteCompareFixtures rewrites testdata/compare (the fixed runs the compare goldens and
// the report tests read) from live runs on the embedded engine. It runs only on request:
//
//	KVBENCH_GEN_FIXTURES=1 go test ./cmd/kvbench -run TestWriteCompareFixtures && go test ./cmd/kvbench -update
func TestWriteCompareFixtures(t *testing.T) {
	if os.Getenv("KVBENCH_GEN_FIXTURES") == "" {
		t.Skip()
	}
	file := writeScenario(t, regressionScenario)
	dst := filepath.Join("testdata", "compare")
	os.MkdirAll(dst, 0o755)
	cp := func(src, name string) {
		os.RemoveAll(filepath.Join(dst, name))
		if out, err := exec.Command("cp", "-r", src, filepath.Join(dst, name)).CombinedOutput(); err != nil {
			t.Fatal(string(out))
		}
	}
	cp(runTiny(t, file, 2, func(p *sim.Profile) { p.JitterFraction, p.JitterSeed = 0.1, 5 }), "baseline")
	cp(runTiny(t, file, 2, func(p *sim.Profile) {
		p.JitterFraction, p.JitterSeed = 0.1, 6
		p.PrefillTokensPerSecond *= 0.7
		p.CPUOffloadGiB = 0.00390625
	}), "candidate")
	other := writeScenario(t, strings.Replace(strings.Replace(regressionScenario, "nightly-tiny", "other-tiny", 1), "seed = 3", "seed = 9", 1))
	cp(runTiny(t, other, 0, nil), "other-scenario")
}

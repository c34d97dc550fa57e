package claims

import (
	"encoding/json"
	"errors"
	"path/filepath"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// The fixtures: seed 001's claim and the demo's eviction+replay run it describes.
var (
	seedClaim = filepath.Join("..", "..", "cmd", "kvbench", "testdata", "claims", "seed001-replay.toml")
	demoRun   = filepath.Join("..", "..", "internal", "study", "testdata", "demo", "eviction-6x150k-replay-20261201T060008Z")
)

// TestVerifyFilesIsVerifyOfWhatItLoads: the record of VerifyFiles is Verify's of the claim
// and runs it names; a claim or a run that does not load is an error naming it.
func TestVerifyFilesIsVerifyOfWhatItLoads(t *testing.T) {
	at := time.Date(2026, 12, 1, 9, 0, 0, 0, time.UTC)
	got, err := VerifyFiles(seedClaim, []string{demoRun}, "test", at)
	if err != nil {
		t.Fatal(err)
	}
	claim, err := Load(seedClaim)
	if err != nil {
		t.Fatal(err)
	}
	r, err := runs.Load(demoRun)
	if err != nil {
		t.Fatal(err)
	}
	want := Verify(claim, []*runs.Run{r}, "test", at)
	gj, _ := json.Marshal(got)
	wj, _ := json.Marshal(want)
	if string(gj) != string(wj) || len(got.Results) == 0 || len(got.Runs) != 1 {
		t.Fatalf("VerifyFiles:\n%s\nwant Verify's:\n%s", gj, wj)
	}
	if _, err := VerifyFiles("no-such-claim.toml", []string{demoRun}, "test", at); err == nil || !strings.Contains(err.Error(), "no-such-claim.toml") {
		t.Errorf("a missing claim: %v", err)
	}
	if _, err := VerifyFiles(seedClaim, []string{demoRun, t.TempDir()}, "test", at); !errors.Is(err, runs.ErrNotRun) {
		t.Errorf("a directory that is not a run: %v, want runs.ErrNotRun", err)
	}
}

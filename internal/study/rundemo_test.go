package study

import (
	"context"
	"errors"
	"io"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/scenarios"
)

// TestRunDemoRefusesBeforeRunning: an engine the embedded engine cannot serve these studies
// in, or an --out it may not write, is an InputError, and no study runs.
func TestRunDemoRefusesBeforeRunning(t *testing.T) {
	ran := 0
	run := func(context.Context, *scenarios.Scenario, DemoTarget, string) (string, error) {
		ran++
		return "", errors.New("not reached")
	}
	err := RunDemo(context.Background(), io.Discard, DemoOptions{Engine: engine.LlamaCpp, Out: t.TempDir()}, run)
	var ie *InputError
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "--engine "+engine.LlamaCpp.Name) {
		t.Errorf("llama.cpp on the embedded engine: %v, want an InputError naming --engine", err)
	}
	insideRun := "testdata/demo/eviction-6x150k-replay-20261201T060008Z" // a run directory
	def, err := engine.ByName(engine.Default)
	if err != nil {
		t.Fatal(err)
	}
	// With endpoints given no embedded engine starts; the output directory is checked first.
	err = RunDemo(context.Background(), io.Discard, DemoOptions{Engine: def, Endpoint: "http://127.0.0.1:1/v1", Out: insideRun}, run)
	if !errors.As(err, &ie) || !strings.Contains(err.Error(), "demo: --out") {
		t.Errorf("--out inside a run directory: %v, want an InputError naming --out", err)
	}
	if ran != 0 {
		t.Fatalf("%d studies ran after a refusal", ran)
	}
}

// TestRunDemoRunsBothStudiesAgainstTheEndpoints: with endpoints given, the two studies run
// in order against them (the control against its own), in one demo directory, with the
// engine's name as their backend; an interrupted study ends the demo with its error.
func TestRunDemoRunsBothStudiesAgainstTheEndpoints(t *testing.T) {
	def, err := engine.ByName("sglang")
	if err != nil {
		t.Fatal(err)
	}
	var got []string
	var dirs []string
	stop := errors.New("interrupted")
	run := func(_ context.Context, sc *scenarios.Scenario, tg DemoTarget, dir string) (string, error) {
		got = append(got, sc.Name+" "+tg.Endpoint+" "+tg.Backend)
		dirs = append(dirs, dir)
		if len(got) == 2 {
			return "", stop
		}
		return filepath.Join(dir, "first"), nil
	}
	out := t.TempDir()
	err = RunDemo(context.Background(), io.Discard, DemoOptions{Engine: def, Endpoint: "http://a/v1", ControlEndpoint: "http://b/v1", Out: out}, run)
	if !errors.Is(err, stop) {
		t.Fatalf("error %v, want the interrupted study's", err)
	}
	studies := DemoStudies(def.Name)
	want := []string{studies[0].Scenario + " http://a/v1 sglang", studies[1].Scenario + " http://b/v1 sglang"}
	if strings.Join(got, "; ") != strings.Join(want, "; ") {
		t.Fatalf("studies ran %q, want %q", got, want)
	}
	if dirs[0] != dirs[1] || filepath.Dir(dirs[0]) != out || !strings.HasPrefix(filepath.Base(dirs[0]), "demo-") {
		t.Errorf("run directories under %v, want one demo directory in %s", dirs, out)
	}
}

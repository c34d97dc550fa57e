package study

import (
	"fmt"
	"io"
	"path/filepath"
	"slices"

	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/scenarios"
)

// WriteDemo writes the demo's records into dir (study.json of the two runs and, where the
// runs measured bytes per stored token, accounting.json for one GPU's pool), then the seed
// table on w. Engines that count stores in tokens or blocks measure no bytes per token:
// with accountingOptional their accounting is skipped with a line on w saying why. It
// returns the files it wrote.
func WriteDemo(w io.Writer, dir string, eviction, control *runs.Run, accountingOptional bool) ([]string, error) {
	loaded := []*runs.Run{eviction, control}
	st, err := Summarize(loaded, dir, false)
	if err != nil {
		return nil, err
	}
	if _, err := runs.WriteJSON(filepath.Join(dir, "study.json"), st); err != nil {
		return nil, err
	}
	files := []string{"study.json"}
	acc, err := Accounting(loaded, PoolSpec{GPUs: 1}, dir)
	switch {
	case err != nil && accountingOptional:
		fmt.Fprintf(w, "\naccounting skipped: %v\n", err)
	case err != nil:
		return files, err
	default:
		if _, err := runs.WriteJSON(filepath.Join(dir, "accounting.json"), acc); err != nil {
			return files, err
		}
		files = append(files, "accounting.json")
	}
	if _, err := fmt.Fprintln(w); err != nil {
		return files, err
	}
	return files, WriteSeedTable(w, eviction.Run, control.Run)
}

// DemoStudy is one of the demo's two runs: a built-in scenario and the embedded engine's
// profile that serves it when no endpoint is given.
type DemoStudy struct {
	Scenario, Profile string
}

// DemoStudies are the demo's runs for engine: seed 001's eviction replay on a 16-way
// offload pool and its offload8 control, each in the engine's own built-in where it has one
// (other ports, metrics URLs or gates).
func DemoStudies(engine string) []DemoStudy {
	builtin := func(base, suffix string) string {
		if slices.Contains(scenarios.BuiltinNames(), engine+suffix) {
			return engine + suffix
		}
		return base
	}
	return []DemoStudy{
		{Scenario: builtin("eviction-6x150k-replay", "-eviction-replay"), Profile: "dsv4-offload16"},
		{Scenario: builtin("offload8-control", "-offload8-control"), Profile: "dsv4-offload8"},
	}
}

package export

import (
	"bytes"
	"flag"
	"fmt"
	"os"
	"slices"
	"sort"
	"strings"
	"testing"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/compare"
	"github.com/anvil-serving/kvbench/harness/runs"
)

//go:generate go test -run TestFleetDocListsEverySeries -update .

var update = flag.Bool("update", false, "rewrite the generated part of docs/fleet.md")

const (
	fleetDoc = "../../docs/fleet.md"
	// The generated list sits between these two lines; the rest of the page is written by hand.
	seriesBegin = "<!-- series: generated from internal/export's catalog by `go generate ./internal/export`; do not edit -->\n"
	seriesEnd   = "<!-- end of series -->\n"
)

// seriesLabels returns, per family, the labels the fixture runs and their comparison export
// beyond the run's identity (and a summary's quantile), so the list shows what a query can
// match on as kvbench really writes it.
func seriesLabels(t *testing.T) map[string][]string {
	t.Helper()
	base, cand, single := load(t, repeatedRun), load(t, "../../cmd/kvbench/testdata/compare/candidate"), load(t, singleRun)
	var all []*dto.MetricFamily
	for _, r := range []*runs.Run{base, single, richRun(t)} {
		fams, err := PerRequestFamilies(r, nil)
		if err != nil {
			t.Fatal(err)
		}
		all = append(all, fams...)
	}
	res, err := compare.Compare(base, cand, compare.Options{Tolerance: compare.DefaultTolerance})
	if err != nil {
		t.Fatal(err)
	}
	cf, err := CompareFamiliesFor(res, nil, true)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, cf...)
	sf, err := SweepFamilies(fixtureSweep(), nil)
	if err != nil {
		t.Fatal(err)
	}
	all = append(all, sf...)
	rate := fixtureSweep()
	rate.CapacityRequestsPerSecond = ptr(4.2)
	rf, _ := SweepFamilies(rate, nil)
	all = append(all, rf...)
	skip := map[string]bool{"quantile": true}
	for _, l := range append(Identity(base), Identity(single)...) {
		skip[l.Name] = true
	}
	labels := map[string][]string{}
	for _, f := range all {
		if _, ok := labels[f.GetName()]; !ok {
			labels[f.GetName()] = []string{}
		}
		for _, m := range f.GetMetric() {
			for _, l := range m.GetLabel() {
				if !skip[l.GetName()] && !slices.Contains(labels[f.GetName()], l.GetName()) {
					labels[f.GetName()] = append(labels[f.GetName()], l.GetName())
				}
			}
		}
	}
	return labels
}

// seriesList renders the catalog as docs/fleet.md's table: every family, its type, its
// labels and its help text, then the names earlier versions used.
func seriesList(t *testing.T) string {
	labels := seriesLabels(t)
	names := make([]string, 0, len(catalog))
	for name := range catalog {
		names = append(names, name)
	}
	sort.Strings(names)
	var b strings.Builder
	b.WriteString("| series | type | labels | meaning |\n|---|---|---|---|\n")
	for _, name := range names {
		f := catalog[name]
		ls, ok := labels[name]
		if !ok {
			t.Errorf("%s: no fixture run or comparison exports it, so its labels are unknown", name)
		}
		typ := "gauge"
		switch {
		case f.typ == summary && strings.HasPrefix(name, "kvbench_step_"):
			typ = "summary (`quantile` 0.5, 0.9, 0.99; `_sum`, `_count` = requests measured)"
		case f.typ == summary:
			typ = "summary (`quantile` 0, 0.5, 1; `_sum`, `_count` = repetitions measured)"
		}
		cell := "none"
		if len(ls) > 0 {
			ls = slices.Sorted(slices.Values(ls))
			cell = "`" + strings.Join(ls, "`, `") + "`"
			cell = strings.Replace(cell, "`request`", "`request` (with --per-request-series)", 1)
		}
		fmt.Fprintf(&b, "| `%s` | %s | %s | %s |\n", name, typ, cell, strings.ReplaceAll(f.help, "|", `\|`))
	}
	old := make([]string, 0, len(Renamed))
	for name := range Renamed {
		old = append(old, name)
	}
	sort.Strings(old)
	b.WriteString("\nEarlier versions named two series with a `_count` suffix on a gauge, which promtool refuses, and three ratios without `_ratio`; no old name is pushed any more. Over pushes of both, query `new or old` (`kvbench_repeats_repetitions or kvbench_repeats_count`):\n\n")
	for _, name := range old {
		fmt.Fprintf(&b, "- `%s` is now `%s`\n", name, Renamed[name])
	}
	return b.String()
}

// TestFleetDocListsEverySeries: docs/fleet.md lists exactly the series the catalog declares,
// as seriesList renders them; -update (or go generate) rewrites that part of the page.
func TestFleetDocListsEverySeries(t *testing.T) {
	data, err := os.ReadFile(fleetDoc)
	if err != nil {
		t.Fatal(err)
	}
	head, rest, ok := bytes.Cut(data, []byte(seriesBegin))
	if !ok {
		t.Fatalf("%s has no line %q", fleetDoc, seriesBegin)
	}
	_, tail, ok := bytes.Cut(rest, []byte(seriesEnd))
	if !ok {
		t.Fatalf("%s has no line %q after the list's start", fleetDoc, seriesEnd)
	}
	want := seriesList(t)
	if *update {
		page := slices.Concat(head, []byte(seriesBegin+want+seriesEnd), tail)
		if err := os.WriteFile(fleetDoc, page, 0o644); err != nil {
			t.Fatal(err)
		}
		return
	}
	got := strings.Split(string(rest[:len(rest)-len(tail)-len(seriesEnd)]), "\n")
	for i, line := range strings.Split(want, "\n") {
		if i >= len(got) || got[i] != line {
			t.Fatalf("%s's series list is stale (run go generate ./internal/export): at its line %d the catalog has\n%s", fleetDoc, i+1, line)
		}
	}
	if n := strings.Count(want, "\n") + 1; len(got) != n {
		t.Fatalf("%s's series list is stale (run go generate ./internal/export): %d lines, the catalog's %d", fleetDoc, len(got), n)
	}
}

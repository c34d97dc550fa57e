package export

import (
	"bytes"
	"errors"
	"fmt"
	"io"
	"sort"
	"strings"

	dto "github.com/prometheus/client_model/go"
	"github.com/prometheus/common/expfmt"

	"github.com/anvil-serving/kvbench/harness/runs"
)

// ErrDuplicate means two runs export the same series: same identity and extra labels.
var ErrDuplicate = errors.New("two runs export the same series")

// Merge combines the families of several runs into one set, sorted by name. The same series
// from two runs is refused: a textfile or a scrape may hold a series once.
func Merge(sets ...[]*dto.MetricFamily) ([]*dto.MetricFamily, error) {
	byName := map[string]*dto.MetricFamily{}
	seen := map[string]bool{}
	for _, set := range sets {
		for _, f := range set {
			m, ok := byName[f.GetName()]
			if !ok {
				m = &dto.MetricFamily{Name: f.Name, Help: f.Help, Type: f.Type}
				byName[f.GetName()] = m
			}
			for _, s := range f.Metric {
				key := seriesKey(f.GetName(), s.Label)
				if seen[key] {
					return nil, fmt.Errorf("%w: %s", ErrDuplicate, key)
				}
				seen[key] = true
				m.Metric = append(m.Metric, s)
			}
		}
	}
	out := make([]*dto.MetricFamily, 0, len(byName))
	for _, f := range byName {
		out = append(out, f)
	}
	sort.Slice(out, func(i, j int) bool { return out[i].GetName() < out[j].GetName() })
	return out, nil
}

func seriesKey(name string, labels []*dto.LabelPair) string {
	parts := make([]string, 0, len(labels))
	for _, l := range labels {
		parts = append(parts, fmt.Sprintf("%s=%q", l.GetName(), l.GetValue()))
	}
	return name + "{" + strings.Join(parts, ",") + "}"
}

// WriteOpenMetrics writes fams in the OpenMetrics 1.0 text format, # EOF included. Samples
// carry no timestamps: node_exporter's textfile collector refuses them.
func WriteOpenMetrics(w io.Writer, fams []*dto.MetricFamily) error {
	enc := expfmt.NewEncoder(w, expfmt.NewFormat(expfmt.TypeOpenMetrics))
	for _, f := range fams {
		if err := enc.Encode(f); err != nil {
			return fmt.Errorf("encoding %s: %w", f.GetName(), err)
		}
	}
	if c, ok := enc.(expfmt.Closer); ok {
		return c.Close()
	}
	return nil
}

// OpenMetrics returns the OpenMetrics text of rs's and sweeps' series, each labelled with its
// identity and extra, per request too with perRequest. The text is whole or absent: an error (two runs with the same series,
// an ErrDuplicate) leaves nothing half-written for a collector to read.
func OpenMetrics(rs []*runs.Run, sweeps []Sweep, extra []Label, perRequest bool) ([]byte, error) {
	sets, err := sweepSets(sweeps, extra)
	if err != nil {
		return nil, err
	}
	for _, r := range rs {
		fams, err := FamiliesFor(r, append(Identity(r), extra...), perRequest)
		if err != nil {
			return nil, fmt.Errorf("%s: %w", r.Dir, err)
		}
		sets = append(sets, fams)
	}
	fams, err := Merge(sets...)
	if err != nil {
		return nil, err
	}
	var buf bytes.Buffer
	if err := WriteOpenMetrics(&buf, fams); err != nil {
		return nil, err
	}
	return buf.Bytes(), nil
}

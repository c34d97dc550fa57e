package metrics

import (
	"maps"
	"slices"
	"strings"

	dto "github.com/prometheus/client_model/go"
)

// tierLabels are the labels whose values name where tokens or bytes were, or which way they
// moved. A family the profile splits by one of them (some selector matches on it) has a
// value for each tier the model knows; a series under any other value is a tier the model
// does not know, and its amount is reported, never dropped nor read as another tier's 0.
var tierLabels = []string{"source", "cache_source", "tier", "transfer_type", "cache_level"}

// Unattributed is the amount under one label value of a family kvbench reads that no
// selector of the engine's model matches: a source, tier or direction a newer server added.
type Unattributed struct {
	Family string  `json:"family"`
	Label  string  `json:"label"`
	Value  string  `json:"value"`
	Amount float64 `json:"amount"`
	// Unit is "tokens", "bytes" or "seconds", read from the family's name.
	Unit string `json:"unit"`
	// Model is the engine model (profile) that does not know the value.
	Model string `json:"model"`
}

// Key identifies the series group across snapshots.
func (u Unattributed) Key() string { return u.Family + "\xff" + u.Label + "\xff" + u.Value }

// unitOf reads a family's unit from its name.
func unitOf(family string) string {
	switch {
	case strings.Contains(family, "bytes"):
		return "bytes"
	case strings.Contains(family, "_time") || strings.Contains(family, "seconds"):
		return "seconds"
	}
	return "tokens"
}

// tierSplits lists, per family the profile's counters read and per tier label, the
// matchers the profile has on that label: the values it knows.
func (p Profile) tierSplits() map[string]map[string][]Label {
	out := map[string]map[string][]Label{}
	for _, c := range Counters() {
		for _, sel := range p.Counters[c] {
			for _, l := range sel.Labels {
				if !slices.Contains(tierLabels, l.Name) {
					continue
				}
				if out[sel.Metric] == nil {
					out[sel.Metric] = map[string][]Label{}
				}
				out[sel.Metric][l.Name] = append(out[sel.Metric][l.Name], l)
			}
		}
	}
	return out
}

// knownValue reports whether v is a value of label the profile reads on family.
func knownValue(known []Label, v string) bool {
	return slices.ContainsFunc(known, func(l Label) bool { return l.matches(v) })
}

// unattributed lists the series groups of e under tier-label values the profile does not
// know, combined by the parallelism rule (tokens take one rank, bytes and seconds add up) per family, label and value, in a stable order.
func (e Exposition) unattributed(p Profile) []Unattributed {
	splits := p.tierSplits()
	var out []Unattributed
	for _, family := range slices.Sorted(maps.Keys(splits)) {
		mf := e.families[family]
		if mf == nil {
			continue
		}
		for _, label := range slices.Sorted(maps.Keys(splits[family])) {
			known := splits[family][label]
			var values []string
			for _, m := range mf.GetMetric() {
				v, ok := labelValue(m, label)
				if ok && !knownValue(known, v) && !slices.Contains(values, v) {
					values = append(values, v)
				}
			}
			slices.Sort(values)
			for _, v := range values {
				sel := Selector{Metric: family, Labels: []Label{{Name: label, Value: v}}}
				amount, n, _ := e.aggregate(sel, p.Parallelism, combining{perRank: unitOf(family) != "tokens", counter: true})
				if n == 0 {
					continue
				}
				out = append(out, Unattributed{Family: family, Label: label, Value: v, Amount: amount, Unit: unitOf(family), Model: p.Name})
			}
		}
	}
	return out
}

// labelValue is m's value of label; ok is false when m does not carry it.
func labelValue(m *dto.Metric, label string) (string, bool) {
	for _, lp := range m.GetLabel() {
		if lp.GetName() == label {
			return lp.GetValue(), true
		}
	}
	return "", false
}

// knownSeries reports whether some series of mf carries, on each tier label sel matches
// on, a value the profile knows: only then does a lazy family's missing series read 0. A
// family whose only series are under values the model does not know proves nothing of the
// tiers it knows, and they stay absent.
func knownSeries(mf *dto.MetricFamily, sel Selector, p Profile) bool {
	splits := p.tierSplits()[sel.Metric]
	for _, m := range mf.GetMetric() {
		ok := true
		for _, w := range sel.Labels {
			if !slices.Contains(tierLabels, w.Name) {
				continue
			}
			if v, has := labelValue(m, w.Name); has && !knownValue(splits[w.Name], v) {
				ok = false
			}
		}
		if ok {
			return true
		}
	}
	return false
}

// mergeUnattributed sums the groups of several URLs by family, label and value.
func mergeUnattributed(lists ...[]Unattributed) []Unattributed {
	var out []Unattributed
	for _, l := range lists {
		for _, u := range l {
			if i := slices.IndexFunc(out, func(o Unattributed) bool { return o.Key() == u.Key() }); i >= 0 {
				out[i].Amount += u.Amount
				continue
			}
			out = append(out, u)
		}
	}
	return out
}

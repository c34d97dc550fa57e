package metrics

import (
	"fmt"
	"maps"
	"slices"
	"sort"
)

// Profile maps kvbench's normalized counters and gauges to a backend's metric names (package
// engine defines one per engine). Each has an ordered list of candidates: the first one found
// in an exposition wins, so older and newer name generations can both be listed.
type Profile struct {
	Name     string
	Counters map[Counter][]Selector
	Gauges   map[Gauge][]Selector
	// LazyFamilies are families whose series appear only after their first event, in every
	// version that has them. When such a family is declared in an exposition without any
	// series (a single-process prometheus_client prints HELP and TYPE of a registered family),
	// or has series that all carry the labels the selector matches on (only this label value
	// has not been seen yet), the missing series reads 0. A family whose series lack the
	// selector's label belongs to a version without that split: the reading stays absent.
	LazyFamilies map[string]bool
	// LiveWhen also makes a family lazy, for expositions that never declare an unused family
	// (prometheus_client's multiprocess collector, which SGLang, trtllm-serve and vLLM with
	// PROMETHEUS_MULTIPROC_DIR use): the family's missing series reads 0 only while one of
	// these sibling series is served, because upstream creates it with them, so its version
	// and tier are live. Without a live sibling the reading stays absent.
	LiveWhen map[string][]Selector
	// CacheInfo is the info-gauge family whose labels carry the KV cache config ("" for none).
	CacheInfo string
	// BlockCounters are counted in KV blocks, not tokens: a snapshot multiplies them by the
	// block size the server's cache config reports, else by BlockSize; with neither the
	// reading is unreadable (a block count is no token count).
	BlockCounters map[Counter]bool
	BlockSize     int
	// BlockHelp maps a family to a phrase of its HELP text that says the server counts it
	// in blocks (vLLM's gpu_prefix_cache_* before May 2025: "number of cached blocks"): read
	// from such a server, the family converts like BlockCounters.
	BlockHelp map[string]string
	// Parallelism says which labels are ranks of one replica and which are replicas: the
	// one rule by which every family's series combine.
	Parallelism Parallelism
	// BlockGauges are gauges counted in blocks, converted like BlockCounters (TensorRT-LLM's
	// device pool in blocks).
	BlockGauges map[Gauge]bool
	// Shapes recognise the upstream versions (dialects) an exposition can be; a snapshot
	// names those that match, for preflight to explain.
	Shapes []Shape
}

// Shape is one upstream dialect of an engine's exposition, recognised from what it serves.
type Shape struct {
	Name  string
	Match func(Exposition) bool
}

// MustSelectors parses selector texts written in code; a malformed one is a programming
// error and panics.
func MustSelectors(texts ...string) []Selector {
	out := make([]Selector, len(texts))
	for i, t := range texts {
		out[i] = mustSelector(t)
	}
	return out
}

// WithOverrides returns a copy of p where each key (a normalized counter or gauge name) reads
// only from the given selector, so a fork that renames metrics still works. An override of a
// family the profile declares lazy stays lazy.
func (p Profile) WithOverrides(overrides map[string]string) (Profile, error) {
	out := p.clone()
	keys := slices.Sorted(maps.Keys(overrides))
	for _, key := range keys {
		sel, err := ParseSelector(overrides[key])
		if err != nil {
			return Profile{}, fmt.Errorf("metric override %s: %w", key, err)
		}
		switch {
		case slices.Contains(Counters(), Counter(key)):
			out.Counters[Counter(key)] = []Selector{sel}
		case slices.Contains(Gauges(), Gauge(key)):
			out.Gauges[Gauge(key)] = []Selector{sel}
		default:
			return Profile{}, fmt.Errorf("metric override %s: unknown counter (known: %v)", key, knownNames())
		}
	}
	return out, nil
}

func knownNames() []string {
	var names []string
	for _, c := range Counters() {
		names = append(names, string(c))
	}
	for _, g := range Gauges() {
		names = append(names, string(g))
	}
	sort.Strings(names)
	return names
}

func (p Profile) clone() Profile {
	out := p
	out.Counters = maps.Clone(p.Counters)
	out.Gauges = maps.Clone(p.Gauges)
	out.LazyFamilies = maps.Clone(p.LazyFamilies)
	out.BlockCounters = maps.Clone(p.BlockCounters)
	out.BlockHelp = maps.Clone(p.BlockHelp)
	out.LiveWhen = maps.Clone(p.LiveWhen)
	out.Parallelism.Shards = slices.Clone(p.Parallelism.Shards)
	out.Parallelism.Replicas = slices.Clone(p.Parallelism.Replicas)
	out.Parallelism.Within = slices.Clone(p.Parallelism.Within)
	out.Parallelism.RankSummed = maps.Clone(p.Parallelism.RankSummed)
	out.BlockGauges = maps.Clone(p.BlockGauges)
	out.Shapes = slices.Clone(p.Shapes)
	if out.Counters == nil {
		out.Counters = map[Counter][]Selector{}
	}
	if out.Gauges == nil {
		out.Gauges = map[Gauge][]Selector{}
	}
	return out
}

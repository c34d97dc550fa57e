package metrics

import (
	"fmt"
	"math"
	"slices"
	"strconv"
	"strings"
	"time"

	dto "github.com/prometheus/client_model/go"

	"github.com/anvil-serving/kvbench/harness/units"
)

// lazyNote marks a reading of 0 taken from a lazy family that has no series for it yet.
const lazyNote = " (lazy, no series yet)"

// Reading is one normalized counter or gauge. Absent (Present false) is not zero: the server
// does not serve that counter, and nothing can be proven from it.
type Reading struct {
	Value   float64
	Present bool
	Source  string // the selector it came from, joined by " + " when sources differ; "" when absent
	// Unreadable is set when the server serves the counter but its value is not a number
	// kvbench can use ("NaN", "+Inf", "-Inf"): not present, and not 0 either.
	Unreadable string
}

// Ptr is the reading as a pointer, nil when absent: absent is never 0.
func (r Reading) Ptr() *float64 {
	if !r.Present {
		return nil
	}
	v := r.Value
	return &v
}

// Snapshot is every normalized reading of one target at one moment, summed over engines and
// over the target's metrics URLs.
type Snapshot struct {
	TakenAt  time.Time           `json:"taken_at,omitzero"` // earliest scrape start among Sources
	Backend  string              `json:"backend"`           // profile name
	Sources  []string            `json:"sources"`           // URLs or files
	Counters map[Counter]Reading `json:"counters"`
	Gauges   map[Gauge]Reading   `json:"gauges"`
	Cache    CacheConfig         `json:"cache"`
	// Replicas are the activity counters per replica, listed only when there are several.
	Replicas []ReplicaReading `json:"replicas,omitempty"`
}

// CacheConfig is the KV cache setup a server reports. Each data-parallel engine has its own
// GPU block pool, so pools are listed per engine and also summed.
type CacheConfig struct {
	Present      bool          `json:"present"`
	Source       string        `json:"source,omitempty"`               // the info family it came from
	BlockSize    int           `json:"block_size,omitempty"`           // tokens per block when all engines agree, else 0
	NumGPUBlocks int           `json:"num_gpu_blocks_total,omitempty"` // summed over engines
	GPUKVTokens  int           `json:"gpu_kv_tokens_total,omitempty"`  // sum over engines of num_gpu_blocks x block_size
	Engines      []EngineCache `json:"engines,omitempty"`
}

// EngineCache is one engine's cache config series.
type EngineCache struct {
	Source              string            `json:"source"` // URL or file
	Engine              string            `json:"engine,omitempty"`
	BlockSize           int               `json:"block_size,omitempty"`
	NumGPUBlocks        int               `json:"num_gpu_blocks,omitempty"`
	GPUKVTokens         int               `json:"gpu_kv_tokens,omitempty"`
	CacheDtype          string            `json:"cache_dtype,omitempty"`
	PrefixCaching       *bool             `json:"enable_prefix_caching,omitempty"` // nil when the label is missing or unreadable
	KVOffloadingBackend string            `json:"kv_offloading_backend,omitempty"`
	KVOffloadingSizeGiB float64           `json:"kv_offloading_size_gib,omitempty"` // vLLM's --kv-offloading-size; 0 when unset
	Labels              map[string]string `json:"labels"`                           // every label as served
}

// Snapshot reads every counter, gauge and the cache config from the expositions of one target
// and sums them. Each exposition picks its own first-present candidate, so URLs running
// different name generations still add up.
func (p Profile) Snapshot(exps ...Exposition) Snapshot {
	snaps := make([]Snapshot, len(exps))
	for i, e := range exps {
		snaps[i] = p.snapshotOne(e)
	}
	if len(snaps) == 0 {
		return p.toTokens(p.snapshotOne(Exposition{}))
	}
	return p.toTokens(Merge(snaps...))
}

// toTokens converts the block-counted readings of s to tokens, after merging: the block size
// may come from another URL (KVBM serves its counters apart from the engine's cache config).
func (p Profile) toTokens(s Snapshot) Snapshot {
	block, from := s.Cache.BlockSize, "server cache config"
	if block <= 0 {
		block, from = p.BlockSize, "engine default"
	}
	for _, c := range Counters() {
		r := s.Counters[c]
		if !p.BlockCounters[c] || !r.Present {
			continue
		}
		if block <= 0 {
			s.Counters[c] = Reading{Source: r.Source, Unreadable: "a block count with no block size"}
			continue
		}
		r.Value *= float64(block)
		r.Source += fmt.Sprintf(" x %d tokens/block (%s)", block, from)
		s.Counters[c] = r
	}
	return s
}

func (p Profile) snapshotOne(e Exposition) Snapshot {
	s := Snapshot{
		TakenAt:  e.ScrapedAt,
		Backend:  p.Name,
		Counters: make(map[Counter]Reading, len(Counters())),
		Gauges:   make(map[Gauge]Reading, len(Gauges())),
	}
	if e.Source != "" {
		s.Sources = []string{e.Source}
	}
	for _, c := range Counters() {
		s.Counters[c] = e.read(p.Counters[c], p.LazyFamilies, p.RankLabels, false)
	}
	for _, g := range Gauges() {
		s.Gauges[g] = e.read(p.Gauges[g], p.LazyFamilies, p.RankLabels, g.takesMax())
	}
	if p.CacheInfo != "" {
		s.Cache = e.cacheConfig(p.CacheInfo)
	}
	s.Replicas = e.replicas(p)
	return s
}

// dropSingleReplica leaves Replicas empty for a server of one replica, whose sums say it all.
func (s *Snapshot) dropSingleReplica() {
	if len(s.Replicas) < 2 {
		s.Replicas = nil
	}
}

// read returns the first candidate with a matching series, summed (or maxed) over series.
// A candidate whose value is NaN or infinite is skipped; when no other one has a number, the
// reading is unreadable (served, but neither present nor 0).
func (e Exposition) read(candidates []Selector, lazy map[string]bool, ranks map[string]string, takeMax bool) Reading {
	var unreadable Reading
	for _, sel := range candidates {
		if v, n := e.aggregate(sel, ranks[sel.Metric], takeMax); n > 0 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				if unreadable.Unreadable == "" {
					unreadable = Reading{Source: sel.String(), Unreadable: units.Exact(v)}
				}
				continue // a non-finite counter proves nothing
			}
			return Reading{Value: v, Present: true, Source: sel.String()}
		}
		if lazy[sel.Metric] && e.Has(sel.Metric) {
			return Reading{Value: 0, Present: true, Source: sel.String() + lazyNote}
		}
	}
	return unreadable
}

// aggregate sums (or maxes) the values of sel's matching series; n is how many matched.
// Series that differ only in rankLabel are one replica's ranks: the max of them counts once.
func (e Exposition) aggregate(sel Selector, rankLabel string, takeMax bool) (v float64, n int) {
	mf := e.families[sel.Metric]
	value := sampleValue
	if mf == nil {
		// name_sum of a histogram or summary reads its sum (seconds of lookup delay).
		base, ok := strings.CutSuffix(sel.Metric, "_sum")
		if mf = e.families[base]; !ok || mf == nil {
			return 0, 0
		}
		value = sampleSum
	}
	var replicas map[string]float64 // rank-free label set -> max over its ranks
	if rankLabel != "" {
		replicas = map[string]float64{}
	}
	for _, m := range mf.GetMetric() {
		if !matches(m, sel.Labels) {
			continue
		}
		x, ok := value(mf.GetType(), m)
		if !ok {
			continue
		}
		if replicas != nil {
			key := replicaKey(m, rankLabel)
			if old, seen := replicas[key]; seen {
				replicas[key] = max(old, x)
				continue
			}
			replicas[key] = x
		}
		switch {
		case n == 0:
			v = x
		case takeMax:
			v = max(v, x)
		default:
			v += x
		}
		n++
	}
	if replicas != nil && n > 0 {
		v = 0
		for _, x := range replicas {
			if takeMax {
				v = max(v, x)
			} else {
				v += x
			}
		}
	}
	return v, n
}

// replicaKey is m's label set without rankLabel.
func replicaKey(m *dto.Metric, rankLabel string) string {
	var b strings.Builder
	for _, lp := range m.GetLabel() {
		if lp.GetName() != rankLabel {
			b.WriteString(lp.GetName() + "=" + lp.GetValue() + "\xff")
		}
	}
	return b.String()
}

func sampleValue(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_COUNTER:
		return m.GetCounter().GetValue(), m.Counter != nil
	case dto.MetricType_GAUGE:
		return m.GetGauge().GetValue(), m.Gauge != nil
	case dto.MetricType_UNTYPED:
		return m.GetUntyped().GetValue(), m.Untyped != nil
	}
	return 0, false // histograms and summaries are not counters
}

func sampleSum(t dto.MetricType, m *dto.Metric) (float64, bool) {
	switch t {
	case dto.MetricType_HISTOGRAM:
		return m.GetHistogram().GetSampleSum(), m.Histogram != nil
	case dto.MetricType_SUMMARY:
		return m.GetSummary().GetSampleSum(), m.Summary != nil
	}
	return 0, false
}

// matches treats a missing label as "", as PromQL does.
func matches(m *dto.Metric, want []Label) bool {
	for _, w := range want {
		got := ""
		for _, lp := range m.GetLabel() {
			if lp.GetName() == w.Name {
				got = lp.GetValue()
				break
			}
		}
		if got != w.Value {
			return false
		}
	}
	return true
}

func (e Exposition) cacheConfig(family string) CacheConfig {
	mf := e.families[family]
	if mf == nil {
		return CacheConfig{}
	}
	var engines []EngineCache
	for _, m := range mf.GetMetric() {
		labels := make(map[string]string, len(m.GetLabel()))
		for _, lp := range m.GetLabel() {
			labels[lp.GetName()] = lp.GetValue()
		}
		ec := EngineCache{
			Source:              e.Source,
			Engine:              labels["engine"],
			BlockSize:           atoiOrZero(labels["block_size"]),
			NumGPUBlocks:        atoiOrZero(labels["num_gpu_blocks"]),
			CacheDtype:          labels["cache_dtype"],
			KVOffloadingBackend: labels["kv_offloading_backend"],
			Labels:              labels,
		}
		ec.GPUKVTokens = ec.BlockSize * ec.NumGPUBlocks
		if b, err := strconv.ParseBool(labels["enable_prefix_caching"]); err == nil {
			ec.PrefixCaching = &b
		}
		if gib, err := strconv.ParseFloat(labels["kv_offloading_size"], 64); err == nil && gib > 0 && !math.IsInf(gib, 0) {
			ec.KVOffloadingSizeGiB = gib
		}
		engines = append(engines, ec)
	}
	return summarizeCache(family, engines)
}

func summarizeCache(source string, engines []EngineCache) CacheConfig {
	if len(engines) == 0 {
		return CacheConfig{}
	}
	c := CacheConfig{Present: true, Source: source, Engines: engines, BlockSize: engines[0].BlockSize}
	for _, e := range engines {
		if e.BlockSize != c.BlockSize {
			c.BlockSize = 0
		}
		c.NumGPUBlocks += e.NumGPUBlocks
		c.GPUKVTokens += e.GPUKVTokens
	}
	return c
}

// atoiOrZero reads label values like "15360"; vLLM writes "None" for unset ones.
func atoiOrZero(s string) int {
	n, err := strconv.Atoi(s)
	if err != nil || n < 0 {
		return 0
	}
	return n
}

// Merge combines snapshots of several metrics URLs of one target: counters and the running and
// waiting gauges add up, kv_usage takes the max, engines' cache configs are listed together. A
// reading is present when any snapshot has it; URLs that lack it add nothing.
func Merge(snaps ...Snapshot) Snapshot {
	if len(snaps) == 0 {
		return Snapshot{}
	}
	out := Snapshot{
		Backend:  snaps[0].Backend,
		Counters: map[Counter]Reading{},
		Gauges:   map[Gauge]Reading{},
	}
	var engines []EngineCache
	cacheSource := ""
	for _, s := range snaps {
		if !s.TakenAt.IsZero() && (out.TakenAt.IsZero() || s.TakenAt.Before(out.TakenAt)) {
			out.TakenAt = s.TakenAt
		}
		out.Sources = append(out.Sources, s.Sources...)
		for c, r := range s.Counters {
			out.Counters[c] = combine(out.Counters[c], r, false)
		}
		for g, r := range s.Gauges {
			out.Gauges[g] = combine(out.Gauges[g], r, g.takesMax())
		}
		out.Replicas = append(out.Replicas, s.Replicas...)
		if s.Cache.Present {
			engines = append(engines, s.Cache.Engines...)
			cacheSource = s.Cache.Source
		}
	}
	out.Cache = summarizeCache(cacheSource, engines)
	out.dropSingleReplica()
	return out
}

func combine(acc, r Reading, takeMax bool) Reading {
	switch {
	case acc.Unreadable != "":
		return acc // one URL's NaN makes the sum meaningless
	case r.Unreadable != "":
		return r
	case !r.Present:
		return acc
	case !acc.Present:
		return r
	}
	if takeMax {
		acc.Value = max(acc.Value, r.Value)
	} else {
		acc.Value += r.Value
	}
	if !slices.Contains(strings.Split(acc.Source, " + "), r.Source) {
		acc.Source += " + " + r.Source
	}
	return acc
}

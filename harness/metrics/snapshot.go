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
	// Resolution is the step between the values the server can print for this reading,
	// where it prints fewer significant digits than the value's integer part has
	// (llama.cpp's 6 digits above 10^6); 0 when the value is exact to the unit.
	Resolution float64
	// Note is what a reader must know of the value (ranks that disagree, a sum over ranks
	// of unknown count: Parallelism); "" when nothing.
	Note string
	// blocks: the server counts this reading in blocks (Profile.BlockHelp).
	blocks bool
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
	// Shapes names the upstream dialects the expositions were recognised as (Profile.Shapes).
	Shapes []string `json:"shapes,omitempty"`
	// Unattributed are the amounts under label values of read families that the engine's
	// model does not know (unattributed.go): reported, never dropped.
	Unattributed []Unattributed `json:"unattributed,omitempty"`
	// UnreadFamilies are the cache families served that the profile does not read
	// (Profile.UnreadFamilies), over every exposition.
	UnreadFamilies []string `json:"unread_families"`
}

// CacheConfig is the KV cache setup a server reports. Each data-parallel engine has its own
// GPU block pool, so pools are listed per engine and also summed.
type CacheConfig struct {
	Present      bool   `json:"present"`
	Source       string `json:"source,omitempty"`               // the info family it came from
	BlockSize    int    `json:"block_size,omitempty"`           // tokens per block when all engines agree, else 0
	NumGPUBlocks int    `json:"num_gpu_blocks_total,omitempty"` // summed over engines
	GPUKVTokens  int    `json:"gpu_kv_tokens_total,omitempty"`  // sum over engines of each one's device pool in tokens
	// HostTierTokens is the host tier's size in tokens where the server reports it (SGLang's
	// hicache_host_total_tokens), summed over engines; 0 when it does not.
	HostTierTokens int `json:"host_tier_tokens_total,omitempty"`
	// HostTierSource is the family HostTierTokens came from.
	HostTierSource string        `json:"host_tier_source,omitempty"`
	Engines        []EngineCache `json:"engines,omitempty"`
}

// EngineCache is one engine's cache config series.
type EngineCache struct {
	Source       string `json:"source"` // URL or file
	Engine       string `json:"engine,omitempty"`
	BlockSize    int    `json:"block_size,omitempty"`
	NumGPUBlocks int    `json:"num_gpu_blocks,omitempty"`
	// GPUKVTokens is vLLM's kv_cache_size_tokens where served (right for hybrid models,
	// whose block count times block size is not their capacity), else num_gpu_blocks x
	// block_size; for engines without a cache config family, their pool gauge.
	GPUKVTokens         int               `json:"gpu_kv_tokens,omitempty"`
	HostTierTokens      int               `json:"host_tier_tokens,omitempty"`
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
		if !p.BlockCounters[c] && !r.blocks || !r.Present {
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
		s.Counters[c] = e.read(p.Counters[c], p, combining{perRank: addsOverRanks(c), counter: true})
	}
	for _, g := range Gauges() {
		sels := p.Gauges[g]
		if g == ProcessStart && len(sels) == 0 {
			sels = processStartFamily
		}
		s.Gauges[g] = e.read(sels, p, combining{takeMax: g.takesMax(), perRank: g == HostTierUsageBytes})
	}
	if p.CacheInfo != "" {
		s.Cache = e.cacheConfig(p.CacheInfo)
	}
	p.sizesFromGauges(&s, e.Source)
	s.Replicas = e.replicas(p)
	s.Unattributed = e.unattributed(p)
	s.UnreadFamilies = p.UnreadFamilies(e)
	for _, sh := range p.Shapes {
		if sh.Match != nil && sh.Match(e) {
			s.Shapes = append(s.Shapes, sh.Name)
		}
	}
	return s
}

// sizesFromGauges converts block-counted gauges to tokens and, for a server without a cache
// config family, takes its device pool, block size and host tier from its size gauges.
func (p Profile) sizesFromGauges(s *Snapshot, source string) {
	block := s.Cache.BlockSize
	if b := s.Gauges[BlockSizeTokens]; block <= 0 && b.Present && b.Value > 0 {
		block = int(b.Value)
	}
	for _, g := range Gauges() {
		r := s.Gauges[g]
		if !p.BlockGauges[g] || !r.Present {
			continue
		}
		if block <= 0 {
			s.Gauges[g] = Reading{Source: r.Source, Unreadable: "a block count with no block size"}
			continue
		}
		r.Value *= float64(block)
		r.Source += fmt.Sprintf(" x %d tokens/block", block)
		s.Gauges[g] = r
	}
	pool, host := s.Gauges[GPUPoolTokens], s.Gauges[HostTierTokens]
	if s.Cache.Present || !pool.Present && !host.Present {
		return
	}
	ec := EngineCache{Source: source, BlockSize: max(block, 0), Labels: map[string]string{}}
	from := ""
	if pool.Present && pool.Value > 0 {
		ec.GPUKVTokens, from = int(pool.Value), pool.Source
	}
	if host.Present && host.Value > 0 {
		ec.HostTierTokens = int(host.Value)
	}
	if from == "" && ec.HostTierTokens == 0 {
		return
	}
	s.Cache = summarizeCache(from, []EngineCache{ec})
	if ec.HostTierTokens > 0 {
		s.Cache.HostTierSource = host.Source
	}
}

// dropSingleReplica leaves Replicas empty for a server of one replica, whose sums say it all.
func (s *Snapshot) dropSingleReplica() {
	if len(s.Replicas) < 2 {
		s.Replicas = nil
	}
}

// read returns the first candidate with a matching series, combined over series by the
// profile's Parallelism. A candidate whose value is NaN or infinite is skipped; when no other
// one has a number, the reading is unreadable (served, but neither present nor 0). A
// candidate of a lazy family with no series reads 0 when the exposition shows the family is
// live (lazyZero).
func (e Exposition) read(candidates []Selector, p Profile, how combining) Reading {
	var unreadable Reading
	for _, sel := range candidates {
		if v, n, notes := e.aggregate(sel, p.Parallelism, how); n > 0 {
			if math.IsNaN(v) || math.IsInf(v, 0) {
				if unreadable.Unreadable == "" {
					unreadable = Reading{Source: sel.String(), Unreadable: units.Exact(v)}
				}
				continue // a non-finite counter proves nothing
			}
			phrase := p.BlockHelp[sel.Metric]
			blocks := phrase != "" && strings.Contains(e.Help(sel.Metric), phrase)
			return Reading{Value: v, Present: true, Source: sel.String(), Resolution: e.resolution[sel.Metric], blocks: blocks, Note: strings.Join(notes, "; ")}
		}
		if why, ok := e.lazyZero(sel, p); ok {
			return Reading{Value: 0, Present: true, Source: sel.String() + why}
		}
	}
	return unreadable
}

// lazyZero decides whether sel's missing series is a lazy family's "not yet" (0) rather than
// a series this server never emits (absent), and says why. A family whose series lack the
// selector's labels belongs to a version without that split: never lazy.
func (e Exposition) lazyZero(sel Selector, p Profile) (string, bool) {
	family := strings.TrimSuffix(sel.Metric, "_sum")
	if _, ok := e.families[sel.Metric]; ok {
		family = sel.Metric
	}
	mf := e.families[family]
	served := mf != nil && len(mf.GetMetric()) > 0
	if served && (!carriesLabels(mf, sel.Labels) || !knownSeries(mf, sel, p)) {
		return "", false
	}
	if p.LazyFamilies[family] && (served || e.declared[family]) {
		return lazyNote, true
	}
	for _, sib := range p.LiveWhen[family] {
		if e.Serves(sib) {
			return " (lazy, no series yet; live: " + sib.String() + ")", true
		}
	}
	return "", false
}

// carriesLabels reports whether every series of mf carries every label want matches on (a
// matcher of "" selects series without the label, so it needs none): the family splits by
// those labels, so a value not seen yet is a series not created yet.
func carriesLabels(mf *dto.MetricFamily, want []Label) bool {
	for _, m := range mf.GetMetric() {
		for _, w := range want {
			if !w.Regex && w.Value == "" {
				continue
			}
			if !slices.ContainsFunc(m.GetLabel(), func(lp *dto.LabelPair) bool { return lp.GetName() == w.Name }) {
				return false
			}
		}
	}
	return true
}

// aggregate combines the values of sel's matching series (Parallelism); n is how many
// matched, notes what the combination found.
func (e Exposition) aggregate(sel Selector, par Parallelism, how combining) (v float64, n int, notes []string) {
	mf := e.families[sel.Metric]
	value := sampleValue
	family := sel.Metric
	if mf == nil {
		// name_sum of a histogram or summary reads its sum (seconds of lookup delay).
		base, ok := strings.CutSuffix(sel.Metric, "_sum")
		if mf = e.families[base]; !ok || mf == nil {
			return 0, 0, nil
		}
		value, family = sampleSum, base
	}
	// values: replica key -> rank -> that rank's sum over its within labels.
	values := map[string]map[string]float64{}
	unranked := true
	for _, m := range mf.GetMetric() {
		if !matches(m, sel.Labels) {
			continue
		}
		x, ok := value(mf.GetType(), m)
		if !ok {
			continue
		}
		n++
		key, rank, ranked := par.shardOf(m)
		unranked = unranked && !ranked
		if values[key] == nil {
			values[key] = map[string]float64{}
		}
		values[key][rank] += x
	}
	if n == 0 {
		return 0, 0, nil
	}
	v, notes = par.combineRanks(family, values, unranked, how)
	return v, n, notes
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
		if !w.matches(got) {
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
		if n := atoiOrZero(labels["kv_cache_size_tokens"]); n > 0 {
			ec.GPUKVTokens = n
		}
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
		c.HostTierTokens += e.HostTierTokens
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
	cacheSource, hostSource := "", ""
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
		out.Unattributed = mergeUnattributed(out.Unattributed, s.Unattributed)
		for _, sh := range s.Shapes {
			if !slices.Contains(out.Shapes, sh) {
				out.Shapes = append(out.Shapes, sh)
			}
		}
		if s.Cache.Present {
			engines = append(engines, s.Cache.Engines...)
			cacheSource = s.Cache.Source
			if s.Cache.HostTierSource != "" {
				hostSource = s.Cache.HostTierSource
			}
		}
	}
	out.Cache = summarizeCache(cacheSource, engines)
	out.UnreadFamilies = mergeUnread(snaps)
	if out.Cache.HostTierTokens > 0 {
		out.Cache.HostTierSource = hostSource
	}
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
	acc.Resolution = max(acc.Resolution, r.Resolution)
	acc.blocks = acc.blocks || r.blocks
	if r.Note != "" && !strings.Contains(acc.Note, r.Note) {
		acc.Note = strings.TrimPrefix(acc.Note+"; "+r.Note, "; ")
	}
	if !slices.Contains(strings.Split(acc.Source, " + "), r.Source) {
		acc.Source += " + " + r.Source
	}
	return acc
}

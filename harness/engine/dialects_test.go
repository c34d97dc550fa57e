package engine

import (
	"path/filepath"
	"slices"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// TestDialects reads an exposition written from each upstream shape (testdata/dialects) and
// checks every reading that shape changes: a series the version never emits is absent,
// never 0; a lazy series reads 0 only where the family is live; units, label splits and
// sources are as upstream has them. Each case names the dialects it must be recognised as.
func TestDialects(t *testing.T) {
	cases := []struct {
		name     string
		def      *Definition
		files    []string
		dialects []string
		counters map[metrics.Counter]want
		gauges   map[metrics.Gauge]want
		check    func(t *testing.T, s metrics.Snapshot)
	}{
		{
			// Defect 1: no cache_source label, so no tier split: absent, not "lazy 0".
			name: "sglang without cache_source", def: SGLang, files: []string{"sglang-sg1.prom"},
			dialects: []string{"sglang-cached-unlabelled"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {absent: true},
				metrics.ExternalPrefixHits: {absent: true},
				metrics.CachedFromHost:     {absent: true},
				metrics.PromptTokensCached: {value: 12800},
				metrics.ReloadTokens:       {value: 11264, inSrc: `pool=""`},
				metrics.StoreTokens:        {absent: true}, // defect 2: evictions are no store
				metrics.DeviceEvictions:    {value: 36000, inSrc: "evicted_tokens"},
				metrics.LoadSeconds:        {value: 0.042},
				metrics.StoreBytes:         {absent: true},
				metrics.LoadBytes:          {absent: true}, // the family is newer: never a lazy 0
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if c := s.Cache; !c.Present || c.GPUKVTokens != 40000 {
					t.Errorf("GPU pool from max_total_num_tokens: %+v", c)
				}
			},
		},
		{
			name: "sglang HiCache off", def: SGLang, files: []string{"sglang-sg2-hicache-off.prom"},
			dialects: []string{"sglang-cache-source", "sglang-hicache-off"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {value: 4096, inSrc: `cache_source="total"`},
				metrics.ExternalPrefixHits: {absent: true}, // no host tier, not a host 0
				metrics.ReloadTokens:       {absent: true},
				metrics.StoreTokens:        {absent: true},
				metrics.DeviceEvictions:    {value: 36000},
			},
		},
		{
			name: "sglang cache_source, no host hit yet", def: SGLang, files: []string{"sglang-sg2.prom"},
			dialects: []string{"sglang-cache-source"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {value: 4096, inSrc: `cache_source="device"`},
				metrics.ExternalPrefixHits: {value: 0, inSrc: "live: "},
				metrics.ReloadTokens:       {value: 0, inSrc: "live: "},
				metrics.StoreTokens:        {absent: true}, // no GPU->host counter before the pool split
				metrics.LoadBytes:          {absent: true},
			},
		},
		{
			// Defect 3: storage_<backend>, the kv pool only, host + storage as the host tier,
			// the tier's size and fill.
			name: "sglang pool split with storage", def: SGLang, files: []string{"sglang-sg3.prom"},
			dialects: []string{"sglang-cache-source", "sglang-pool-split", "sglang-storage"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {value: 4096},
				metrics.ExternalPrefixHits: {value: 6000 + 5264},
				metrics.CachedFromHost:     {value: 6000},
				metrics.CachedFromDisk:     {value: 5264, inSrc: "storage_"},
				metrics.ReloadTokens:       {value: 11264, inSrc: `pool="kv"`},
				metrics.StoreTokens:        {value: 52000, inSrc: "hicache_backup_tokens_total"},
				metrics.StoreBytes:         {value: 7.6e9},
				metrics.LoadBytes:          {value: 1.7e9},
				metrics.PromptTokens:       {value: 69600},
				metrics.DiskStagedTokens:   {value: 5264},
				metrics.DiskStoreTokens:    {value: 30000},
			},
			gauges: map[metrics.Gauge]want{
				metrics.HostTierTokens:     {value: 826000},
				metrics.HostTierUsedTokens: {value: 52000},
				metrics.BlockSizeTokens:    {value: 1},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if c := s.Cache; c.GPUKVTokens != 40000 || c.HostTierTokens != 826000 || c.BlockSize != 1 {
					t.Errorf("sizes %+v", c)
				}
			},
		},
		{
			name: "sglang pool split before the first load-back", def: SGLang, files: []string{"sglang-sg3-fresh.prom"},
			dialects: []string{"sglang-cache-source", "sglang-pool-split"},
			counters: map[metrics.Counter]want{
				metrics.ReloadTokens:       {value: 0, inSrc: "live: "},
				metrics.LoadBytes:          {value: 0, inSrc: "live: "},
				metrics.ExternalPrefixHits: {value: 0, inSrc: "live: "},
				metrics.StoreTokens:        {value: 6000},
			},
		},
		{
			// Issue 30: the newest collector labels the radix families by rank. Tokens are the
			// same tokens on each tensor-parallel rank (one rank, not 2 x), bytes each rank's
			// shard (they add up); storage hits as the literal "storage"; UnifiedRadixCache
			// runs HiCache, so no "HiCache off" is said while host hits move.
			name: "sglang radix families per rank, TP 2", def: SGLang, files: []string{"sglang-sg4-ranks.prom"},
			dialects: []string{"sglang-cache-source", "sglang-pool-split", "sglang-storage-literal", "sglang-radix-ranks"},
			counters: map[metrics.Counter]want{
				metrics.ReloadTokens:       {value: 11264, inSrc: `pool="kv"`, note: "-"},
				metrics.StoreTokens:        {value: 52000, note: "-"},
				metrics.DeviceEvictions:    {value: 36000, note: "-"},
				metrics.LoadBytes:          {value: 1.7e9},
				metrics.StoreBytes:         {value: 7.6e9},
				metrics.ExternalPrefixHits: {value: 6000 + 5264},
				metrics.CachedFromHost:     {value: 6000},
				metrics.CachedFromDisk:     {value: 5264, inSrc: "storage|storage_.+"},
				metrics.DiskStagedTokens:   {value: 5264},
				metrics.DiskStoreTokens:    {value: 30000},
			},
		},
		{
			// Issue 30: the older unlabelled radix family at TP 2 is the multiprocess sum of
			// both ranks' equal counts; with the TP size unknown the reading says so.
			name: "sglang unlabelled radix family, TP 2, size unknown", def: SGLang, files: []string{"sglang-sg3-tp2.prom"},
			dialects: []string{"sglang-cache-source", "sglang-pool-split"},
			counters: map[metrics.Counter]want{
				metrics.ReloadTokens:   {value: 22528, note: "uncertain: sglang:load_back_tokens_total has no rank labels"},
				metrics.StoreTokens:    {value: 104000, note: "TP x tokens"},
				metrics.LoadBytes:      {value: 1.7e9, note: "-"}, // bytes add up over ranks
				metrics.CachedFromHost: {value: 11264, note: "-"},
			},
		},
		{
			// Issue 30 item 4: a reload from the fs tier, promoted through the CPU tier.
			name: "vllm tiering spec with an fs tier", def: VLLM, files: []string{"vllm-tiered-fs.prom"},
			dialects: []string{"vllm-offload-flat", "vllm-offload-tiering", "vllm-cached-by-source"},
			counters: map[metrics.Counter]want{
				metrics.LoadBytes:                 {value: 253755392},
				metrics.DiskStagedBytes:           {value: 253755392, inSrc: `tier=~"[0-9]+:fs"`},
				metrics.DiskStoreBytes:            {value: 259522560},
				metrics.CachedFromDisk:            {value: 11264},
				metrics.CachedFromDevice:          {value: 256},
				metrics.CachedFromHost:            {absent: true}, // not served: never 0
				metrics.CachedFromP2P:             {absent: true},
				metrics.CachedExternalUnspecified: {absent: true},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if len(s.Unattributed) != 0 {
					t.Errorf("unattributed %+v: every source and tier is known", s.Unattributed)
				}
			},
		},
		{
			name: "vllm tiering spec, multiprocess, before the first promotion", def: VLLM, files: []string{"vllm-tiered-multiproc.prom"},
			dialects: []string{"vllm-offload-tiering"},
			counters: map[metrics.Counter]want{
				metrics.DiskStoreBytes:  {value: 259522560},
				metrics.DiskStagedBytes: {value: 0, inSrc: `(lazy, no series yet; live: vllm:kv_offload_tiering_primary_read_usage_perc{tier=~"[0-9]+:fs"})`},
			},
		},
		{
			// Issue 30 item 5: LMCache names no tier.
			name: "lmcache under the by-source family", def: LMCache, files: []string{"lmcache-by-source.prom"},
			dialects: []string{"vllm-cached-by-source"},
			counters: map[metrics.Counter]want{
				metrics.CachedExternalUnspecified: {value: 11264},
				metrics.CachedFromHost:            {absent: true},
				metrics.CachedFromDisk:            {absent: true},
				metrics.ExternalPrefixHits:        {value: 11264},
			},
		},
		{
			// Issue 30 item 7: a source the model does not know is reported, and a direction
			// it does not know makes no direction it knows read 0.
			name: "vllm with a source and a transfer_type kvbench does not know", def: VLLM, files: []string{"vllm-new-source.prom"},
			dialects: []string{"vllm-offload-labelled", "vllm-cached-by-source"},
			counters: map[metrics.Counter]want{
				metrics.CachedFromDevice: {value: 256},
				metrics.CachedFromHost:   {absent: true},
				metrics.LoadBytes:        {absent: true},
				metrics.StoreBytes:       {absent: true},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				want := []metrics.Unattributed{
					{Family: "vllm:kv_offload_total_bytes_total", Label: "transfer_type", Value: "CPU_to_CXL", Amount: 4096, Unit: "bytes", Model: "vllm"},
					{Family: "vllm:prompt_tokens_cached_by_source_total", Label: "source", Value: "cxl", Amount: 11264, Unit: "tokens", Model: "vllm"},
				}
				if !slices.Equal(s.Unattributed, want) {
					t.Errorf("unattributed %+v, want %+v", s.Unattributed, want)
				}
			},
		},
		{
			name: "vllm labelled offload family, before the first load", def: VLLM, files: []string{"vllm-d1-labelled.prom"},
			dialects: []string{"vllm-offload-labelled"},
			counters: map[metrics.Counter]want{
				metrics.StoreBytes: {value: 12288000, inSrc: "GPU_to_CPU"},
				metrics.LoadBytes:  {value: 0, inSrc: `transfer_type="CPU_to_GPU"} (lazy, no series yet)`},
			},
		},
		{
			// Defect 8: flat families bound lazily; the reading keeps to the flat family.
			name: "vllm flat families bound lazily, multiprocess", def: VLLM, files: []string{"vllm-d3-multiproc.prom"},
			dialects: []string{"vllm-offload-flat"},
			counters: map[metrics.Counter]want{
				metrics.StoreBytes:         {value: 12288000, inSrc: "vllm:kv_offload_store_bytes_total"},
				metrics.LoadBytes:          {value: 0, inSrc: "vllm:kv_offload_load_bytes_total (lazy, no series yet; live: vllm:kv_offload_store_"},
				metrics.LoadSeconds:        {value: 0, inSrc: "vllm:kv_offload_load_time_total (lazy"},
				metrics.AllocationFailures: {absent: true}, // a newer family: no sibling of its own generation
			},
		},
		{
			name: "vllm simple CPU offload connector", def: VLLM, files: []string{"vllm-simple-offload.prom"},
			dialects: []string{"vllm-offload-unobservable"},
			counters: map[metrics.Counter]want{
				metrics.StoreBytes:         {absent: true},
				metrics.LoadBytes:          {absent: true},
				metrics.ExternalPrefixHits: {value: 5728},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if s.Cache.GPUKVTokens != 4096 || s.Cache.Engines[0].KVOffloadingSizeGiB != 16 {
					t.Errorf("cache %+v", s.Cache)
				}
			},
		},
		{
			name: "vllm recomputed prompt tokens", def: VLLM, files: []string{"vllm-recomputed.prom"},
			dialects: []string{"vllm-prompt-tokens-recomputed"},
			counters: map[metrics.Counter]want{metrics.PromptTokensRecomputed: {value: 1}, metrics.PromptTokensCached: {value: 5984}},
		},
		{
			name: "vllm prefix cache in blocks", def: VLLM, files: []string{"vllm-gpu-blocks.prom"},
			dialects: []string{"vllm-gpu-prefix-blocks"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:    {value: 16 * 16, inSrc: "x 16 tokens/block"},
				metrics.GPUPrefixQueries: {value: 400 * 16},
			},
		},
		{
			// Defect 4: the multi-process connector.
			name: "vllm lmcache multi-process connector", def: LMCache, files: []string{"lmcache-mp.prom"},
			dialects: []string{"vllm-lmcache-multiprocess"},
			counters: map[metrics.Counter]want{
				metrics.ExternalPrefixHits: {value: 5728, inSrc: "vllm:external_prefix_cache_hits_total"},
				metrics.ConnectorHitTokens: {absent: true},
				metrics.StoreTokens:        {absent: true},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if LMCache.AbsentFamilies(s) {
					t.Error("the multi-process connector explains the missing lmcache families; the PROMETHEUS_MULTIPROC_DIR hint would mislead")
				}
				if ds := LMCache.DialectsOf(s); len(ds) != 1 || !ds[0].HostTierUnreported {
					t.Errorf("dialects %+v", ds)
				}
			},
		},
		{
			// Defect 4: external hits are vLLM's; LMCache's own count is the second source, a
			// rank's roles summed before the max over ranks.
			name: "vllm lmcache v1 with both roles", def: LMCache, files: []string{"lmcache-roles-tp2.prom"},
			dialects: []string{"lmcache-both-roles"},
			counters: map[metrics.Counter]want{
				metrics.ExternalPrefixHits:    {value: 12000, inSrc: "vllm:external_prefix_cache_hits_total"},
				metrics.ExternalPrefixQueries: {value: 30000, inSrc: "vllm:"},
				metrics.ConnectorHitTokens:    {value: 12000, inSrc: "lmcache:num_hit_tokens_total"},
				metrics.StoreTokens:           {value: 28000},
				metrics.HostEvictions:         {value: 6},
			},
			gauges: map[metrics.Gauge]want{metrics.HostTierUsageBytes: {value: 3e9}},
		},
		{
			// Defect 5: disk hits through the host tier.
			name: "kvbm v2", def: KVBM, files: []string{"../kvbm-vllm.prom", "kvbm-v2.prom"},
			dialects: []string{"kvbm-v2"},
			counters: map[metrics.Counter]want{
				metrics.ReloadTokens:          {value: 624 * 16},
				metrics.DiskStagedTokens:      {value: 400 * 16, inSrc: "kvbm_onboard_blocks_d2h"},
				metrics.DiskStoreTokens:       {value: 2500 * 16},
				metrics.DeviceDiskStoreTokens: {value: 40 * 16},
				metrics.ObjectReloadTokens:    {value: 0},
				metrics.ObjectStoreTokens:     {value: 0},
			},
		},
		{
			// Defect 6: the upstream collector, before the per-tier counter.
			name: "trtllm without the tier split", def: TRTLLM, files: []string{"trtllm-tr1.prom"},
			dialects: []string{"trtllm-no-tier-split"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {absent: true},
				metrics.ExternalPrefixHits: {absent: true},
				metrics.PromptTokensCached: {value: 12032},
				metrics.LoadBytes:          {value: 1.1e9},
				metrics.StoreBytes:         {value: 4.2e9},
			},
			gauges: map[metrics.Gauge]want{metrics.RequestsRunning: {value: 0}, metrics.GPUPoolTokens: {value: 128000, inSrc: "x 32 tokens/block"}},
			check: func(t *testing.T, s metrics.Snapshot) {
				if c := s.Cache; c.GPUKVTokens != 128000 || c.BlockSize != 32 {
					t.Errorf("sizes %+v", c)
				}
			},
		},
		{
			name: "trtllm with the tier split", def: TRTLLM, files: []string{"trtllm-tr2.prom"},
			dialects: []string{"trtllm-tier-split"},
			counters: map[metrics.Counter]want{
				metrics.GPUPrefixHits:      {value: 4000, inSrc: `cache_tier="gpu"`},
				metrics.ExternalPrefixHits: {value: 8000},
				metrics.CachedFromHost:     {value: 8000},
				metrics.CachedFromDisk:     {value: 0},
			},
		},
		{
			// Defect 7: the counter a build does not export is absent, and so is the KV gauge.
			name: "llama.cpp before the cached counter", def: LlamaCpp, files: []string{"llamacpp-lc2.prom"},
			dialects: []string{"llamacpp-no-cached-counter"},
			counters: map[metrics.Counter]want{
				metrics.PromptTokensCached:       {absent: true},
				metrics.PromptTokensLocalCompute: {value: 6016},
			},
			gauges: map[metrics.Gauge]want{metrics.KVUsage: {absent: true}},
		},
		{
			name: "llama.cpp printed at 6 digits", def: LlamaCpp, files: []string{"llamacpp-lc3-large.prom"},
			dialects: []string{"llamacpp-cached-counter", "llamacpp-six-digits"},
			counters: map[metrics.Counter]want{
				metrics.PromptTokensLocalCompute: {value: 1234570},
				metrics.PromptTokensCached:       {value: 23456800},
				metrics.GenerationTokens:         {value: 98765},
			},
			check: func(t *testing.T, s metrics.Snapshot) {
				if r := s.Counters[metrics.PromptTokensCached]; r.Resolution != 100 {
					t.Errorf("cached counter step %v, want 100", r.Resolution)
				}
				if r := s.Counters[metrics.GenerationTokens]; r.Resolution != 0 {
					t.Errorf("an exact value got a step: %+v", r)
				}
			},
		},
	}
	for _, c := range cases {
		t.Run(c.name, func(t *testing.T) {
			var files []string
			for _, f := range c.files {
				files = append(files, filepath.Join("dialects", f))
			}
			s := snapshotOf(t, c.def, files...)
			checkReadings(t, s, c.counters)
			for g, w := range c.gauges {
				r := s.Gauges[g]
				switch {
				case w.absent && r.Present:
					t.Errorf("%s: want absent, got %+v", g, r)
				case !w.absent && (!r.Present || r.Value != w.value):
					t.Errorf("%s: got %+v, want %g", g, r, w.value)
				case w.inSrc != "" && !strings.Contains(r.Source, w.inSrc):
					t.Errorf("%s: source %q lacks %q", g, r.Source, w.inSrc)
				}
			}
			got := slices.Clone(s.Shapes)
			slices.Sort(got)
			want := slices.Clone(c.dialects)
			slices.Sort(want)
			if !slices.Equal(got, want) {
				t.Errorf("dialects %v, want %v", got, want)
			}
			if c.check != nil {
				c.check(t, s)
			}
		})
	}
}

// TestDialectsNamed: every dialect has a name, its upstream source and a matcher, and no two
// share a name.
func TestDialectsNamed(t *testing.T) {
	for _, d := range All() {
		seen := map[string]bool{}
		for _, m := range d.Dialects {
			if m.Name == "" || m.Upstream == "" || m.Match == nil || seen[m.Name] {
				t.Errorf("%s: dialect %+v", d.Name, m)
			}
			seen[m.Name] = true
		}
	}
}

// TestSGLangUnlabelledRanksKnownTP: with the TP size known, the older unlabelled radix
// family's sum over ranks is divided by it, and the reading says so.
func TestSGLangUnlabelledRanksKnownTP(t *testing.T) {
	e, err := metrics.ParseFile(filepath.Join("testdata", "dialects", "sglang-sg3-tp2.prom"))
	if err != nil {
		t.Fatal(err)
	}
	p := SGLang.Profile()
	p.Parallelism.TensorParallel = 2
	s := p.Snapshot(e)
	checkReadings(t, s, map[metrics.Counter]want{
		metrics.ReloadTokens:    {value: 11264, note: "divided by 2"},
		metrics.StoreTokens:     {value: 52000, note: "divided by 2"},
		metrics.DeviceEvictions: {value: 36000, note: "divided by 2"},
		metrics.LoadBytes:       {value: 1.7e9, note: "-"},
	})
	p.Parallelism.TensorParallel = 1
	checkReadings(t, p.Snapshot(e), map[metrics.Counter]want{metrics.ReloadTokens: {value: 22528, note: "-"}})
}

// TestSGLangHiCacheOffFromWhatIsShown: "HiCache off" is said only where cached tokens come as
// cache_source="total" and nothing the server serves shows a host tier; the tree's class name
// decides nothing (UnifiedRadixCache runs HiCache when init_hicache runs).
func TestSGLangHiCacheOffFromWhatIsShown(t *testing.T) {
	const head = "# TYPE sglang:cached_tokens_total counter\n# TYPE sglang:evicted_tokens_total counter\n"
	cases := []struct {
		name, body string
		off        bool
	}{
		{"total only, unified tree", `sglang:cached_tokens_total{cache_source="total"} 4096
sglang:evicted_tokens_total{cache_type="UnifiedRadixCache",dp_rank="0",pp_rank="0",tp_rank="0"} 100
`, true},
		{"host hits move on the unified tree", `sglang:cached_tokens_total{cache_source="total"} 0
sglang:cached_tokens_total{cache_source="host"} 11264
sglang:evicted_tokens_total{cache_type="UnifiedRadixCache",dp_rank="0",pp_rank="0",tp_rank="0"} 100
`, false},
		{"a plain radix tree's evictions, no cached series yet", `sglang:evicted_tokens_total{cache_type="RadixCache"} 100
`, false},
		{"a load-back on a tree of another name", `sglang:cached_tokens_total{cache_source="total"} 4096
# TYPE sglang:load_back_tokens_total counter
sglang:load_back_tokens_total{cache_type="MyRadixCache",pool="kv"} 512
`, false},
	}
	for _, c := range cases {
		e, err := metrics.Parse(strings.NewReader(head+c.body), c.name)
		if err != nil {
			t.Fatal(err)
		}
		s := SGLang.Profile().Snapshot(e)
		if got := slices.Contains(s.Shapes, "sglang-hicache-off"); got != c.off {
			t.Errorf("%s: HiCache off %v, want %v (shapes %v)", c.name, got, c.off, s.Shapes)
		}
	}
}

package engine

import (
	"math"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

func snapshotOf(t *testing.T, d *Definition, files ...string) metrics.Snapshot {
	t.Helper()
	var exps []metrics.Exposition
	for _, f := range files {
		e, err := metrics.ParseFile(filepath.Join("testdata", f))
		if err != nil {
			t.Fatal(err)
		}
		exps = append(exps, e)
	}
	return d.Profile().Snapshot(exps...)
}

// want is a hand-computed normalized value; absent means the engine does not serve it.
type want struct {
	value   float64
	absent  bool
	inSrc   string // part of the reading's source
	unreads bool
}

func checkReadings(t *testing.T, s metrics.Snapshot, wants map[metrics.Counter]want) {
	t.Helper()
	for c, w := range wants {
		r := s.Counters[c]
		switch {
		case w.absent && (r.Present || r.Unreadable != ""):
			t.Errorf("%s: want absent, got %+v", c, r)
		case w.unreads && r.Unreadable == "":
			t.Errorf("%s: want unreadable, got %+v", c, r)
		case !w.absent && !w.unreads && (!r.Present || math.Abs(r.Value-w.value) > 1e-9):
			t.Errorf("%s: got %+v, want %g", c, r, w.value)
		case w.inSrc != "" && !strings.Contains(r.Source, w.inSrc):
			t.Errorf("%s: source %q lacks %q", c, r.Source, w.inSrc)
		}
	}
}

// TestFixtureSGLang: tokens as served; device and host split by cache_source; the reload is
// load_back_tokens, the store evicted_tokens.
func TestFixtureSGLang(t *testing.T) {
	s := snapshotOf(t, SGLang, "sglang.prom")
	checkReadings(t, s, map[metrics.Counter]want{
		metrics.GPUPrefixHits:      {value: 4096},
		metrics.ExternalPrefixHits: {value: 11904},
		metrics.CachedFromHost:     {value: 11904},
		metrics.PromptTokensCached: {value: 4096 + 11904},
		metrics.PromptTokens:       {value: 52000},
		metrics.StoreTokens:        {value: 36000, inSrc: "evicted_tokens"},
		metrics.ReloadTokens:       {value: 11904, inSrc: "load_back_tokens"},
		metrics.LoadSeconds:        {value: 0.042},
		metrics.DiskStoreTokens:    {value: 0},
		metrics.CachedFromDisk:     {value: 0, inSrc: "lazy"}, // no storage series yet
		metrics.LoadBytes:          {absent: true},
		metrics.MatchedTokens:      {absent: true},
	})
	if g := s.Gauges[metrics.KVUsage]; !g.Present || g.Value != 0.12 {
		t.Errorf("kv usage %+v", g)
	}
	if SGLang.AbsentFamilies(s) {
		t.Error("sglang families reported absent")
	}
}

// TestFixtureKVBM: two URLs (vLLM's and KVBM's); block counters times vLLM's block size 16,
// host->disk kept apart from the reload.
func TestFixtureKVBM(t *testing.T) {
	s := snapshotOf(t, KVBM, "kvbm-vllm.prom", "kvbm.prom")
	checkReadings(t, s, map[metrics.Counter]want{
		metrics.GPUPrefixHits:      {value: 2048},
		metrics.ExternalPrefixHits: {value: 9984},
		metrics.StoreTokens:        {value: 3000 * 16, inSrc: "x 16 tokens/block (server cache config)"},
		metrics.ReloadTokens:       {value: 624 * 16},
		metrics.DiskReloadTokens:   {value: 7 * 16},
		metrics.DiskStoreTokens:    {value: 120 * 16, inSrc: "kvbm_offload_blocks_h2d"},
		metrics.MatchedTokens:      {value: 10096}, // already tokens
		metrics.LoadBytes:          {absent: true},
	})
	if KVBM.AbsentFamilies(s) || KVBM.ReloadNeverMoved(s) {
		t.Error("kvbm families reported absent or stuck")
	}

	// Without vLLM's URL the block size comes from the profile; with none at all a block
	// count is unreadable, never taken for tokens.
	p := KVBM.Profile()
	e, err := metrics.ParseFile(filepath.Join("testdata", "kvbm.prom"))
	if err != nil {
		t.Fatal(err)
	}
	p.BlockSize = 32
	checkReadings(t, p.Snapshot(e), map[metrics.Counter]want{metrics.ReloadTokens: {value: 624 * 32, inSrc: "x 32"}})
	p.BlockSize = 0
	checkReadings(t, p.Snapshot(e), map[metrics.Counter]want{metrics.ReloadTokens: {unreads: true}, metrics.MatchedTokens: {value: 10096}})

	// Only vLLM's URL: every kvbm family absent, and preflight says what to do.
	only := snapshotOf(t, KVBM, "kvbm-vllm.prom")
	if !KVBM.AbsentFamilies(only) || !strings.Contains(KVBM.FamiliesHint, "6880") {
		t.Error("missing KVBM URL not diagnosed")
	}
}

// TestFixtureKVBMStuckOnboard: matched tokens moved, onboard counters never did.
func TestFixtureKVBMStuckOnboard(t *testing.T) {
	p := KVBM.Profile()
	p.BlockSize = 16
	e, err := metrics.Parse(strings.NewReader("# TYPE kvbm_onboard_blocks_h2d counter\nkvbm_onboard_blocks_h2d 0\n# TYPE kvbm_onboard_blocks_d2d counter\nkvbm_onboard_blocks_d2d 0\n# TYPE kvbm_matched_tokens counter\nkvbm_matched_tokens 4096\n"), "stuck")
	if err != nil {
		t.Fatal(err)
	}
	if !KVBM.ReloadNeverMoved(p.Snapshot(e)) {
		t.Error("stuck onboard counters not seen")
	}
}

// TestFixtureTRTLLM: cached prompt tokens, and no hit counter of either tier.
func TestFixtureTRTLLM(t *testing.T) {
	s := snapshotOf(t, TRTLLM, "trtllm.prom")
	checkReadings(t, s, map[metrics.Counter]want{
		metrics.PromptTokens:       {value: 40000},
		metrics.PromptTokensCached: {value: 12032},
		metrics.GPUPrefixHits:      {absent: true},
		metrics.ExternalPrefixHits: {absent: true},
		metrics.ReloadTokens:       {absent: true},
	})
	if g := s.Gauges[metrics.KVUsage]; !g.Present || g.Value != 0.45 {
		t.Errorf("kv usage %+v", g)
	}
	if TRTLLM.TierUnknown == "" {
		t.Error("TensorRT-LLM must say why its tier is unknown")
	}
}

// TestFixtureLMCacheTP2: two ranks count the same tokens; kvbench takes the max over
// worker_id (12000, not 24000), and ranks that disagree give the larger.
func TestFixtureLMCacheTP2(t *testing.T) {
	s := snapshotOf(t, LMCache, "lmcache-tp2.prom")
	checkReadings(t, s, map[metrics.Counter]want{
		metrics.ExternalPrefixQueries: {value: 30000},
		metrics.ExternalPrefixHits:    {value: 12000, inSrc: "lmcache:num_hit_tokens_total"},
		metrics.StoreTokens:           {value: 28000},
		metrics.HostEvictions:         {value: 6},
		metrics.GPUPrefixHits:         {value: 1024, inSrc: "vllm:prefix_cache_hits_total"},
	})
	// Bytes are per rank (each holds its own shard): they add up.
	if g := s.Gauges[metrics.HostTierUsageBytes]; !g.Present || g.Value != 3e9 {
		t.Errorf("host tier usage %+v", g)
	}
	if LMCache.AbsentFamilies(s) {
		t.Error("lmcache families reported absent")
	}
	none := snapshotOf(t, LMCache, "vllm-no-lmcache.prom")
	if !LMCache.AbsentFamilies(none) || !strings.Contains(LMCache.FamiliesHint, "PROMETHEUS_MULTIPROC_DIR must be set") {
		t.Error("absent lmcache families not diagnosed")
	}
	checkReadings(t, none, map[metrics.Counter]want{metrics.StoreTokens: {absent: true}, metrics.HostEvictions: {absent: true}})
}

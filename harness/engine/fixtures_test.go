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
	note    string // part of the reading's note; "-" for none
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
		case w.note == "-" && r.Note != "":
			t.Errorf("%s: want no note, got %q", c, r.Note)
		case w.note != "" && w.note != "-" && !strings.Contains(r.Note, w.note):
			t.Errorf("%s: note %q lacks %q", c, r.Note, w.note)
		}
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

// TestFixtureLMCacheAbsent: vLLM launched without PROMETHEUS_MULTIPROC_DIR serves no lmcache
// family: preflight says so, and LMCache's counters are absent.
func TestFixtureLMCacheAbsent(t *testing.T) {
	none := snapshotOf(t, LMCache, "vllm-no-lmcache.prom")
	if !LMCache.AbsentFamilies(none) || !strings.Contains(LMCache.FamiliesHint, "PROMETHEUS_MULTIPROC_DIR must be set") {
		t.Error("absent lmcache families not diagnosed")
	}
	checkReadings(t, none, map[metrics.Counter]want{metrics.StoreTokens: {absent: true}, metrics.HostEvictions: {absent: true}, metrics.ConnectorHitTokens: {absent: true}})
}

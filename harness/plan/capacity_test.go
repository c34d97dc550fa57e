package plan

import (
	"path/filepath"
	"reflect"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/scenarios"
)

func capacityScenario() *scenarios.Scenario {
	return &scenarios.Scenario{Server: scenarios.Server{
		GPUKVTokens:        scenarios.AutoInt{Value: 4096},
		BlockSize:          scenarios.AutoInt{Value: 16},
		CPUOffloadGiB:      2,
		StoreBytesPerToken: 131072,
	}}
}

// TestCapacityOfScenarioOnly: without a server the scenario's figures stand, each named
// "scenario", and no server source is listed.
func TestCapacityOfScenarioOnly(t *testing.T) {
	c := CapacityOf(capacityScenario(), engine.VLLM, Server{})
	want := []capacity.Figures{{Source: "scenario", GPUKVTokens: 4096, CPUOffloadGiB: 2, StoreBytesPerToken: 131072}}
	if !reflect.DeepEqual(c.Sources, want) {
		t.Errorf("sources %+v, want %+v", c.Sources, want)
	}
	s := c.Setup
	if s.Topology != capacity.SharedPool || s.GPUKVTokens != 4096 || s.GPUKVTokensSource != "scenario" || s.CPUOffloadGiB != 2 || s.StoreBytesPerToken != 131072 {
		t.Errorf("setup %+v", s)
	}
	if c.BlockSize != 16 || c.BlockSizeSource != "scenario" || c.MaxModelLen != 0 {
		t.Errorf("block %d (%s), max_model_len %d", c.BlockSize, c.BlockSizeSource, c.MaxModelLen)
	}
}

// TestCapacityOfServerOverScenario: the server's cache config outranks the scenario for the
// pool, the configured tier and the block size, its host tier gauge is a source of its own,
// and the scenario's bytes per token stand where the server says none.
func TestCapacityOfServerOverScenario(t *testing.T) {
	srv := Server{Scraped: true, MaxModelLen: 32768, Cache: metrics.CacheConfig{
		Present: true, Source: "vllm:cache_config_info", BlockSize: 32, GPUKVTokens: 60000,
		HostTierTokens: 500000, HostTierSource: "sglang:hicache_host_total_tokens",
		Engines: []metrics.EngineCache{{KVOffloadingSizeGiB: 3}, {KVOffloadingSizeGiB: 5}},
	}}
	c := CapacityOf(capacityScenario(), engine.VLLM, srv)
	want := []capacity.Figures{
		{Source: "scenario", GPUKVTokens: 4096, CPUOffloadGiB: 2, StoreBytesPerToken: 131072},
		{Source: "server (vllm:cache_config_info)", GPUKVTokens: 60000, CPUOffloadGiB: 8},
		{Source: "server (sglang:hicache_host_total_tokens)", HostTierTokens: 500000},
	}
	if !reflect.DeepEqual(c.Sources, want) {
		t.Errorf("sources\n %+v\nwant\n %+v", c.Sources, want)
	}
	s := c.Setup
	if s.GPUKVTokens != 60000 || s.GPUKVTokensSource != "server (vllm:cache_config_info)" ||
		s.CPUOffloadGiB != 8 || s.CPUOffloadGiBSource != "server (vllm:cache_config_info)" ||
		s.StoreBytesPerToken != 131072 || s.StoreBytesSource != "scenario" ||
		s.HostTierTokens != 500000 || s.HostTierTokensSource != "server (sglang:hicache_host_total_tokens)" {
		t.Errorf("setup %+v", s)
	}
	if c.BlockSize != 32 || c.BlockSizeSource != "server (vllm:cache_config_info)" {
		t.Errorf("block %d (%s), want 32 from the server", c.BlockSize, c.BlockSizeSource)
	}
	want2 := CurveBounds{MaxModelLen: 32768, MaxModelLenSource: "server (/v1/models)", GPUKVTokens: 60000, GPUKVTokensSource: "server (vllm:cache_config_info)", BlockSize: 32}
	if b := c.CurveBounds(); b != want2 {
		t.Errorf("curve bounds %+v, want %+v", b, want2)
	}

	// A scenario that states max_model_len bounds its curves by it; one that leaves the
	// block size to a server that reports none still gets a block of 1 for the curves.
	sc := capacityScenario()
	sc.Server.MaxModelLen = scenarios.AutoInt{Value: 8192}
	sc.Server.BlockSize = scenarios.AutoInt{FromServer: true}
	c = CapacityOf(sc, engine.VLLM, Server{Scraped: true, MaxModelLen: 32768})
	if b := c.CurveBounds(); b.MaxModelLen != 8192 || b.MaxModelLenSource != "scenario" || b.BlockSize != 1 {
		t.Errorf("curve bounds %+v, want the scenario's 8192 and block 1", b)
	}
}

// TestCapacityOfUnreportedHostTier: where the dialect says the cache config does not size
// the host tier, the server's configured GiB is dropped and the scenario's stands.
func TestCapacityOfUnreportedHostTier(t *testing.T) {
	srv := Server{Scraped: true, HostTierUnreported: true, Cache: metrics.CacheConfig{
		Present: true, Source: "vllm:cache_config_info", GPUKVTokens: 60000,
		Engines: []metrics.EngineCache{{KVOffloadingSizeGiB: 40}},
	}}
	s := CapacityOf(capacityScenario(), engine.LMCache, srv).Setup
	if s.CPUOffloadGiB != 2 || s.CPUOffloadGiBSource != "scenario" || s.GPUKVTokens != 60000 {
		t.Errorf("setup %+v, want the scenario's 2 GiB and the server's pool", s)
	}
}

// TestCapacityOfSlots: a slot engine's own report is the last source: one slot's context
// as the pool, and the slot count.
func TestCapacityOfSlots(t *testing.T) {
	srv := Server{Scraped: true, Sizes: engine.Sizes{Slots: 1, SlotContext: 16384, Source: "/props"}}
	c := CapacityOf(capacityScenario(), engine.LlamaCpp, srv)
	last := c.Sources[len(c.Sources)-1]
	if want := (capacity.Figures{Source: "server (/props)", GPUKVTokens: 16384, Slots: 1}); last != want {
		t.Errorf("last source %+v, want %+v", last, want)
	}
	if s := c.Setup; s.Topology != capacity.SingleSlot || s.Slots != 1 || s.GPUKVTokens != 16384 || s.GPUKVTokensSource != "server (/props)" {
		t.Errorf("setup %+v", s)
	}
	// A scraped server without a cache config is listed (it said nothing), and a slot
	// engine that reports nothing adds no source.
	c = CapacityOf(capacityScenario(), engine.LlamaCpp, Server{Scraped: true, Sizes: engine.Sizes{Source: "/props"}})
	if len(c.Sources) != 2 || c.Sources[1] != (capacity.Figures{Source: "server ()"}) {
		t.Errorf("sources %+v", c.Sources)
	}
}

// TestMeasured: a measured bytes per token is added on top, outranking the scenario's,
// without changing the sources it was given; nil adds nothing.
func TestMeasured(t *testing.T) {
	base := []capacity.Figures{{Source: "scenario", StoreBytesPerToken: 131072}}
	store := 65536.0
	got := Measured(base, &store)
	if len(base) != 1 || len(got) != 2 || got[1] != (capacity.Figures{Source: "measured", StoreBytesPerToken: 65536}) {
		t.Fatalf("Measured = %+v (base now %+v)", got, base)
	}
	if s := engine.VLLM.Resolve(got...); s.StoreBytesPerToken != 65536 || s.StoreBytesSource != "measured" {
		t.Errorf("setup %+v", s)
	}
	if got := Measured(base, nil); !reflect.DeepEqual(got, base) {
		t.Errorf("Measured(nil) = %+v", got)
	}
}

// TestServerOf: a scrape of vLLM's LMCache multi-process connector, whose cache config
// names a kv_offloading_size it does not pass on, is read as a host tier the server does
// not report, so the scenario's tier stands; a plain vLLM scrape is not.
func TestServerOf(t *testing.T) {
	snap := func(def *engine.Definition, file string) metrics.Snapshot {
		e, err := metrics.ParseFile(filepath.Join("..", "engine", "testdata", "dialects", file))
		if err != nil {
			t.Fatal(err)
		}
		return def.Profile().Snapshot(e)
	}
	mp := ServerOf(engine.LMCache, snap(engine.LMCache, "lmcache-mp.prom"))
	if !mp.Scraped || !mp.HostTierUnreported || !mp.Cache.Present {
		t.Errorf("lmcache mp: %+v, want a scraped cache config whose host tier is unreported", mp)
	}
	if s := CapacityOf(capacityScenario(), engine.LMCache, mp).Setup; s.CPUOffloadGiB != 2 || s.CPUOffloadGiBSource != "scenario" {
		t.Errorf("lmcache mp setup: CPU tier %g (%s), want the scenario's 2", s.CPUOffloadGiB, s.CPUOffloadGiBSource)
	}
	if v := ServerOf(engine.LMCache, snap(engine.LMCache, "lmcache-roles-tp2.prom")); v.HostTierUnreported {
		t.Error("LMCache v1 read as a host tier the server does not report")
	}
}

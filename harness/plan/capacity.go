package plan

import (
	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Server is what a server says of its own KV capacity and limits, each figure carrying where
// it was read. The zero value says nothing (a plan made without a server).
type Server struct {
	// Scraped: its /metrics were read, so Cache says what they hold (Present false when
	// they hold no cache config).
	Scraped bool
	Cache   metrics.CacheConfig
	// HostTierUnreported: the engine's recognised dialect sizes its host tier elsewhere, so
	// the cache config's configured GiB is not the tier's size (engine.Dialect).
	HostTierUnreported bool
	// Sizes is what a slot engine reports of itself: its slot count and one slot's context.
	Sizes engine.Sizes
	// MaxModelLen is the model's context length its /v1/models lists; 0 when unknown.
	MaxModelLen int
}

// Says reports whether s holds anything read from a server.
func (s Server) Says() bool {
	return s.Scraped || s.MaxModelLen > 0 || s.Sizes.Slots > 0 || s.Sizes.SlotContext > 0
}

// ServerOf is what a scrape says of the server's capacity, read as def's dialects read it.
func ServerOf(def *engine.Definition, snap metrics.Snapshot) Server {
	s := Server{Scraped: true, Cache: snap.Cache}
	for _, d := range def.DialectsOf(snap) {
		s.HostTierUnreported = s.HostTierUnreported || d.HostTierUnreported
	}
	return s
}

// Capacity is everything known of a server's KV capacity before a run: what the scenario
// states and what the server says, each figure with its source, and what they resolve to.
// It is the one place capacity sources are listed; a run adds what it measured (Measured).
type Capacity struct {
	// Sources are what each source says, lowest precedence first: the scenario, the
	// server's cache config, its host tier gauge, its slots (capacity.Resolve).
	Sources []capacity.Figures
	// Setup is what Sources resolve to in the engine's topology.
	Setup capacity.Setup
	// BlockSize is the server's KV block size where it reports one, else the scenario's.
	BlockSize       int
	BlockSizeSource string
	// MaxModelLen bounds a reload curve: the scenario's where it states one, else the
	// server's (0 when neither says).
	MaxModelLen       int
	MaxModelLenSource string
}

// CapacityOf builds the capacity sources of sc against srv in def's topology.
func CapacityOf(sc *scenarios.Scenario, def *engine.Definition, srv Server) Capacity {
	c := Capacity{Sources: []capacity.Figures{ScenarioFigures(sc)},
		MaxModelLen: srv.MaxModelLen, MaxModelLenSource: "server (/v1/models)"}
	c.BlockSize, c.BlockSizeSource = BlockSizeOf(sc, srv.Cache)
	if sc.Server.MaxModelLen.Known() {
		c.MaxModelLen, c.MaxModelLenSource = sc.Server.MaxModelLen.Value, "scenario"
	}
	if cc := srv.Cache; srv.Scraped {
		f := capacity.Figures{Source: "server (" + cc.Source + ")", CPUOffloadGiB: offloadGiB(cc)}
		if cc.Present {
			f.GPUKVTokens = cc.GPUKVTokens
		}
		if srv.HostTierUnreported {
			f.CPUOffloadGiB = 0 // configured, but not what sizes this dialect's tier
		}
		c.Sources = append(c.Sources, f)
		if cc.HostTierTokens > 0 {
			c.Sources = append(c.Sources, capacity.Figures{Source: "server (" + cc.HostTierSource + ")", HostTierTokens: cc.HostTierTokens})
		}
	}
	if z := srv.Sizes; z.SlotContext > 0 || z.Slots > 0 {
		c.Sources = append(c.Sources, capacity.Figures{Source: "server (" + z.Source + ")", GPUKVTokens: z.SlotContext, Slots: z.Slots})
	}
	c.Setup = def.Resolve(c.Sources...)
	return c
}

// BlockSizeOf is the KV block size: the server's cache config's where it reports one, else
// the scenario's; and where it came from.
func BlockSizeOf(sc *scenarios.Scenario, cc metrics.CacheConfig) (int, string) {
	if cc.Present && cc.BlockSize > 0 {
		return cc.BlockSize, "server (" + cc.Source + ")"
	}
	return sc.Server.BlockSize.Value, "scenario"
}

// CurveBounds are the sizes a reload curve expands to: the resolved GPU KV pool, the
// max_model_len and the block size (at least 1).
func (c Capacity) CurveBounds() CurveBounds {
	return CurveBounds{MaxModelLen: c.MaxModelLen, MaxModelLenSource: c.MaxModelLenSource,
		GPUKVTokens: c.Setup.GPUKVTokens, GPUKVTokensSource: c.Setup.GPUKVTokensSource, BlockSize: max(c.BlockSize, 1)}
}

// ScenarioFigures is what the scenario's [server] table says of the server's capacity (zero
// where it says "server" or nothing): the lowest layer of capacity.Resolve.
func ScenarioFigures(sc *scenarios.Scenario) capacity.Figures {
	f := capacity.Figures{Source: "scenario", CPUOffloadGiB: sc.Server.CPUOffloadGiB, StoreBytesPerToken: sc.Server.StoreBytesPerToken}
	if sc.Server.GPUKVTokens.Known() {
		f.GPUKVTokens = sc.Server.GPUKVTokens.Value
	}
	return f
}

// Measured is the figure a run measured on top of the sources preflight found: the bytes
// per stored token its store counters gave (nil when they gave none).
func Measured(sources []capacity.Figures, storeBytesPerToken *float64) []capacity.Figures {
	if storeBytesPerToken == nil {
		return sources
	}
	out := append([]capacity.Figures(nil), sources...)
	return append(out, capacity.Figures{Source: "measured", StoreBytesPerToken: *storeBytesPerToken})
}

// offloadGiB is the CPU tier the cache config reports (vLLM's kv_offloading_size), summed
// over engines; 0 when unset.
func offloadGiB(cc metrics.CacheConfig) float64 {
	total := 0.0
	for _, e := range cc.Engines {
		total += e.KVOffloadingSizeGiB
	}
	return total
}

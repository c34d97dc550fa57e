package derive

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/scenarios"
)

// offloadGain compares the replay with its twin; twin is nil when none was sent.
func offloadGain(replay, twin *record.Request) *record.OffloadGain {
	g := &record.OffloadGain{ReplayTTFTMS: replay.Result.TimeToFirstOutputMS, ReplayDecode: replay.Result.DecodeTokensPerSecond}
	if twin == nil {
		g.Skipped = replay.ColdTwinSkipped
		if g.Skipped == "" {
			g.Skipped = "no cold twin was sent (the run ended first, or the record predates cold twins)"
		}
		return g
	}
	g.ColdTwin = twin.ColdTwin.Mechanism
	res := twin.Result
	if res.Failed() {
		g.TwinError = res.Error
		g.TwinMissed, g.TwinMissReason = capacity.Unknown, "the cold twin failed"
		return g
	}
	g.TwinTTFTMS, g.TwinDecode = res.TimeToFirstOutputMS, res.DecodeTokensPerSecond
	g.TwinMissed, g.TwinMissReason = twinMissed(twin)
	if r, t := g.ReplayTTFTMS, g.TwinTTFTMS; r != nil && t != nil && *r > 0 {
		ratio, saved := *t / *r, (*t-*r)/1000
		g.TTFTRatio, g.PrefillSecondsSaved = &ratio, &saved
	}
	if r, t := g.ReplayDecode, g.TwinDecode; r != nil && t != nil && *t > 0 {
		ratio := *r / *t
		g.DecodeRatio = &ratio
	}
	g.TwinStoreBytes = twin.Counters.Delta(metrics.StoreBytes)
	return g
}

// hitCounters are the counters any of which moving means a request was served from a cache.
var hitCounters = []metrics.Counter{
	metrics.GPUPrefixHits, metrics.ExternalPrefixHits, metrics.PromptTokensCached,
	metrics.PromptTokensLocalCacheHit, metrics.PromptTokensExternal, metrics.ReloadTokens,
	metrics.MatchedTokens, metrics.CachedFromDevice, metrics.CachedFromHost, metrics.CachedFromDisk,
	metrics.CachedFromP2P, metrics.CachedExternalUnspecified,
}

// twinMissed says whether the twin's usage and its own counters show a full miss.
func twinMissed(q *record.Request) (capacity.Answer, string) {
	var served, clean []string
	res := q.Result
	if c := res.CachedPromptTokens; c != nil {
		if *c > 0 {
			served = append(served, fmt.Sprintf("usage reports %d cached tokens", *c))
		} else {
			clean = append(clean, "usage 0 cached")
		}
	}
	if t := res.CachedTokensDetails; t != nil {
		if n := t.Device + t.Host + t.Storage; n > 0 {
			served = append(served, fmt.Sprintf("the tier details report %d (device %d, host %d, storage %d)", n, t.Device, t.Host, t.Storage))
		} else {
			clean = append(clean, "tier details 0")
		}
	}
	if c := q.Counters; c != nil && !c.Contaminated {
		for _, k := range hitCounters {
			v, ok := c.Value(k)
			switch {
			case !ok:
			case v > 0:
				served = append(served, fmt.Sprintf("%s moved by %s", k, units.Whole(v)))
			default:
				clean = append(clean, string(k)+" 0")
			}
		}
	}
	switch {
	case len(served) > 0:
		return capacity.No, "the cold twin was served from a cache (" + strings.Join(served, ", ") + "): it recomputed less than the prompt, so the gain is understated"
	case len(clean) > 0:
		return capacity.Yes, "nothing was cached: " + strings.Join(clean, ", ")
	default:
		return capacity.Unknown, "neither usage nor the counters show whether the cold twin hit a cache"
	}
}

// reloadBandwidth is the replay's copy rate, nil when its load bytes or seconds are absent or
// nothing moved.
func reloadBandwidth(sc *scenarios.Scenario, c *record.Counters) *record.ReloadBandwidth {
	bytes, ok1 := c.Value(metrics.LoadBytes)
	secs, ok2 := c.Value(metrics.LoadSeconds)
	if !ok1 || !ok2 || bytes <= 0 || secs <= 0 {
		return nil
	}
	b := &record.ReloadBandwidth{LoadBytes: bytes, LoadSeconds: secs, BytesPerSecond: bytes / secs}
	var w strings.Builder
	fmt.Fprintf(&w, "%s bytes in %s s of copy time: %s", units.Grouped(int(bytes)), units.Fixed(units.Seconds).Digits(3, secs).Format(secs), units.GBps(b.BytesPerSecond))
	if sc != nil {
		b.TensorParallelSize = TensorParallel(sc.Topology)
	}
	if n := b.TensorParallelSize; n > 1 {
		fmt.Fprintf(&w, "; the load counters sum bytes and copy seconds over the %d tensor-parallel workers, so this is one worker's link (copying at once, the %d moved them at up to %s)",
			n, n, units.GBps(b.BytesPerSecond*float64(n)))
	}
	if sc == nil || sc.Server.HostLinkGBps <= 0 {
		w.WriteString("; no host link bandwidth is stated ([server] host_link_gbps), so its share of the link is unknown")
		b.Finding = w.String()
		return b
	}
	link := sc.Server.HostLinkGBps * 1e9
	stated := units.Exact(sc.Server.HostLinkGBps) + " GB/s" // as the scenario states it
	frac := b.BytesPerSecond / link
	b.StatedLinkBytesPerSecond, b.LinkFraction = &link, &frac
	if frac > 1 {
		fmt.Fprintf(&w, "; faster than the stated %s host link (%s): the figure is wrong, or the load seconds do not time the copy (a simulator running at a time scale reports scaled seconds)", stated, units.WholePercent.Format(frac))
	} else {
		fmt.Fprintf(&w, ", %s of the stated %s host link", units.Share(frac), stated)
	}
	b.Finding = w.String()
	return b
}

// TensorParallel reads topology.tensor_parallel_size, a free-form key scenarios use; 0 when
// it is not a whole number.
func TensorParallel(topology map[string]any) int {
	switch v := topology["tensor_parallel_size"].(type) {
	case int64:
		return int(v)
	case int:
		return v
	case float64:
		if v == float64(int(v)) {
			return int(v)
		}
	}
	return 0
}

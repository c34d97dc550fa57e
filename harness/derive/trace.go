package derive

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// TraceOf computes a trace step's section from its artifact.
func TraceOf(st Step, artifact string) record.TraceSection {
	s := record.TraceSection{Artifact: artifact, Requests: len(st.Requests), Interrupted: st.Interrupted, CountersValid: true, Series: []record.SeriesPoint{}}
	if tr := st.Trace; tr != nil {
		s.File, s.SHA256, s.Mode, s.TimeScale, s.Concurrency, s.PromptForm = tr.File, tr.SHA256, tr.Mode, tr.TimeScale, tr.Concurrency, tr.PromptForm
		s.PlannedRequests, s.DroppedRequests, s.PeakInFlight = tr.PlannedRequests, tr.DroppedRequests, tr.PeakInFlight
		s.Format, s.Shard = tr.Format, tr.Shard
		s.Ideal, s.IdealUnavailable, s.ScrapeIntervalMS = tr.Ideal, tr.IdealUnavailable, tr.ScrapeIntervalMS
		s.SlotSplitUnavailable = tr.SlotSplitUnavailable
		if tr.TimeScale != nil && tr.SpanSeconds > 0 {
			rate := float64(tr.PlannedRequests) / (tr.SpanSeconds * *tr.TimeScale)
			s.OfferedRequestsPerSecond = &rate
		}
		if tr.Series != nil {
			s.Series = tr.Series
		}
	}
	var ttfts, decode, lags []float64
	for _, r := range st.Requests {
		if r.Trace != nil {
			lags = append(lags, r.Trace.DispatchLagMS)
		}
		res := r.Result
		if res.Failed() {
			s.FailedRequests++
			continue
		}
		s.PromptTokens = addInt(s.PromptTokens, res.PromptTokens)
		s.CachedPromptTokens = addInt(s.CachedPromptTokens, res.CachedPromptTokens)
		if d := res.CachedTokensDetails; d != nil {
			if s.RequestTiers == nil {
				s.RequestTiers = &record.TierTokens{StorageBackend: d.StorageBackend}
			}
			s.RequestTiers.Device += d.Device
			s.RequestTiers.Host += d.Host
			s.RequestTiers.Storage += d.Storage
		}
		if res.TimeToFirstOutputMS != nil {
			ttfts = append(ttfts, *res.TimeToFirstOutputMS)
		}
		if res.DecodeTokensPerSecond != nil {
			decode = append(decode, *res.DecodeTokensPerSecond)
		}
	}
	s.TTFTMS, s.DecodeTokensPerSecond, s.DispatchLagMS = PercentilesOf(ttfts), PercentilesOf(decode), PercentilesOf(lags)
	if s.Mode == record.TraceOpenLoop {
		s.DispatchBehind = DispatchBehindOf(s.DispatchLagMS, s.OfferedRequestsPerSecond)
	}
	s.Tiers, s.StepLoad, s.CountersValid, s.InvalidReasons = stepLoad(st)
	if s.Tiers.Host == nil { // no counter split the tiers: a slot engine's inferred split
		if t, ok := SlotTiers(st.Requests); ok {
			s.Tiers = t
		}
	}
	s.Finding = TraceFinding(s.Tiers, s.CountersValid, s.Ideal, s.IdealUnavailable)
	return s
}

// SlotTiers sums the requests' slot splits into the step's tiers: the live slot's tokens
// as the GPU's, the host prompt cache's as the host's; false unless every request has one.
func SlotTiers(reqs []record.Request) (record.TierShares, bool) {
	var prompt, live, host float64
	for _, r := range reqs {
		if r.Trace == nil || r.Trace.Slot == nil || r.Result.PromptTokens == nil {
			return record.TierShares{}, false
		}
		prompt += float64(*r.Result.PromptTokens)
		live += float64(r.Trace.Slot.LiveTokens)
		host += float64(r.Trace.Slot.HostTokens)
	}
	if len(reqs) == 0 {
		return record.TierShares{}, false
	}
	rest := prompt - live - host
	return record.TierSplit{Source: record.TierBySlotHistory, PromptTokens: &prompt, GPUHitTokens: &live, HostHitTokens: &host, RecomputeTokens: &rest}.Shares(), true
}

// DispatchBehindP99MS is the dispatch-lag p99 past which an open-loop replay fell behind its
// trace (docs/traces.md, "Falling behind"): a few milliseconds is within one scheduling step
// of an engine, so the server saw the trace's arrivals; past it requests bunch up.
const DispatchBehindP99MS = 5.0

// DispatchBehindOf is the finding of an open loop whose dispatch lag p99 exceeded
// DispatchBehindP99MS; nil when it did not or no request was sent.
func DispatchBehindOf(lag record.Percentiles, offered *float64) *record.DispatchBehind {
	if lag.P99 == nil || *lag.P99 <= DispatchBehindP99MS {
		return nil
	}
	d := &record.DispatchBehind{ThresholdP99MS: DispatchBehindP99MS, LagP50MS: *lag.P50, LagP99MS: *lag.P99, LagMaxMS: *lag.Max, OfferedRequestsPerSecond: offered}
	rate := "its trace's rate"
	if offered != nil {
		rate = units.Rate(offered) + " requests/s"
	}
	d.Finding = fmt.Sprintf("the replay fell behind its trace: dispatch lag p99 %s ms (p50 %s, max %s) over the %s ms threshold at %s offered, so the load the server saw was not the trace's",
		units.MS(lag.P99), units.MS(lag.P50), units.MS(lag.Max), units.Exact(DispatchBehindP99MS), rate)
	return d
}

func addInt(sum *float64, v *int) *float64 {
	if v == nil {
		return sum
	}
	x := float64(*v)
	if sum != nil {
		x += *sum
	}
	return &x
}

// TraceFinding sets the measured host share beside the ideal's, the gap a user acts on: "the
// host tier served 21.0% of prompt tokens; an LRU host tier of its size would have served
// 27.0%". Absent counters are said to be absent, never taken for 0.
func TraceFinding(measured record.TierShares, valid bool, ideal *record.IdealTiers, unavailable string) string {
	var have string
	switch {
	case !valid:
		have = "the step's counters are not valid, so what each tier served was not measured"
	case measured.Host == nil && measured.GPU == nil:
		have = "the server exposes no counter that splits prompt tokens by tier"
	case measured.Host == nil:
		have = fmt.Sprintf("the GPU prefix cache served %s of prompt tokens; the server exposes no host-tier hit counter", units.Share(*measured.GPU))
	default:
		have = fmt.Sprintf("the host tier served %s of prompt tokens", units.Share(*measured.Host))
		if measured.GPU != nil {
			have += fmt.Sprintf(" (the GPU prefix cache %s)", units.Share(*measured.GPU))
		}
	}
	if ideal == nil && strings.HasPrefix(unavailable, record.NoPrefixInformation) {
		return have + "; " + unavailable
	}
	if ideal == nil {
		if unavailable == "" {
			unavailable = "no ideal was computed"
		}
		return have + "; the ideal at the server's pool sizes is unknown: " + unavailable
	}
	return fmt.Sprintf("%s; an LRU host tier of its size (%d tokens) would have served %s (and an LRU GPU pool of %d tokens %s; the most any cache could serve: %s)",
		have, ideal.HostTokens, units.Share(ideal.HostShare), ideal.GPUTokens, units.Share(ideal.GPUShare), units.Share(ideal.MaxHitRate))
}

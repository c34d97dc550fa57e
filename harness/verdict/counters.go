package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// hitEvidence is what the counter rules weigh: the GPU and host hits (from the counters, or
// the request's own tier split), the load bytes, and the cross-checks.
type hitEvidence struct {
	gpu, ext, load, reload *float64
}

// decideByCounters applies the counter rules to e, whose Counters are set.
func decideByCounters(e Evidence) Decision {
	c := e.Counters
	d := Decision{DecidedBy: ByCounters}
	h := hitEvidence{gpu: c.Delta(metrics.GPUPrefixHits), ext: c.Delta(metrics.ExternalPrefixHits), load: c.Delta(metrics.LoadBytes), reload: c.Delta(metrics.ReloadTokens)}
	if t := e.RequestTier; t != nil {
		d.DecidedBy = ByRequestTier
		d.crossCheckRequest(e, *t, &h)
	} else if host := c.Delta(metrics.CachedFromHost); host != nil {
		switch {
		case h.ext == nil:
			h.ext = host
			d.note("external hits read from cached tokens by source (host): the server serves no external prefix-cache hit counter")
		case abs(*host-*h.ext) > float64(max(e.BlockSize, 1)):
			d.note("cached tokens by source (host) moved by %.0f but external hits by %.0f", *host, *h.ext)
		}
	}
	var unreadable []string
	for _, k := range []metrics.Counter{metrics.GPUPrefixHits, metrics.ExternalPrefixHits, metrics.LoadBytes} {
		if why := c.Unreadable[k]; why != "" {
			unreadable = append(unreadable, why)
		}
	}
	switch {
	case !c.Valid:
		d.Verdict, d.Reason = Invalid, invalidPrefix(c.Invalidity)+c.InvalidReason
		return d
	case len(unreadable) > 0:
		d.Verdict, d.Reason = Invalid, invalidPrefix(metrics.InvalidMissing)+strings.Join(unreadable, "; ")
		return d
	case h.gpu == nil && h.ext != nil:
		// Reading the missing GPU hits as 0 would call a GPU hit a recompute.
		d.Verdict, d.Reason = Invalid, invalidPrefix(metrics.InvalidMissing)+"the server exposes external prefix-cache hits but no gpu_prefix_hits counter, so the GPU tier's hits are unknown"
		return d
	case e.PromptTokens == nil || *e.PromptTokens <= 0:
		d.Verdict, d.Reason = TierUnknown, "the server reported no prompt token count"
		return d
	}
	d.weigh(e, h)
	d.crossCheckReload(e, c, h)
	return d
}

// weigh applies the rules to the hits.
func (d *Decision) weigh(e Evidence, h hitEvidence) {
	prompt := float64(*e.PromptTokens)
	gpu, ext := value(h.gpu), value(h.ext)
	if h.ext != nil && ext > 0 {
		if h.load != nil {
			per := *h.load / ext
			d.MeasuredLoadBytesPerToken = &per
		}
		if e.LoadBytesPerToken > 0 {
			exp := ext * e.LoadBytesPerToken
			d.ExpectedLoadBytes = &exp
		}
	}
	if h.gpu != nil || h.ext != nil {
		cov := (gpu + ext) / prompt
		d.HitCoverage = &cov
	}
	if e.CachedPromptTokens != nil && (h.gpu != nil || h.ext != nil) {
		// A hit counter never counts the last prompt token; allow one block of rounding.
		agree := abs(float64(*e.CachedPromptTokens)-(gpu+ext)) <= float64(max(e.BlockSize, 1))
		d.UsageAgrees = &agree
		if !agree {
			d.note("usage reports %d cached tokens but the counters moved by %s", *e.CachedPromptTokens, hits(h.gpu, h.ext, " + "))
		}
	}
	if h.gpu == nil && h.ext == nil {
		if e.CachedPromptTokens != nil && *e.CachedPromptTokens > 0 {
			d.Verdict, d.Reason = TierUnknown, fmt.Sprintf("usage reports %d cached tokens, but the server exposes no prefix-cache hit counters to say from which tier", *e.CachedPromptTokens)
		} else {
			d.Verdict, d.Reason = TierUnknown, "the server exposes no prefix-cache hit counters"
		}
		return
	}

	prefixAllowance := float64(e.SharedPrefixTokens + max(e.BlockSize, 1))
	gpuBeyondPrefix := gpu > prefixAllowance
	full := gpu+ext >= FullCoverage*prompt
	switch {
	case ext > 0 && h.load != nil && *h.load <= 0:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%.0f external hits but no CPU->GPU bytes moved: the counters disagree", ext)
	case ext > 0 && gpuBeyondPrefix:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%.0f tokens came from GPU memory beyond the %d-token shared prefix and %.0f from the CPU tier", gpu, e.SharedPrefixTokens, ext)
	case ext > 0 && !full:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%.0f external + %.0f GPU hits cover %.1f%% of the %d-token prompt, well below all of it", ext, gpu, 100*(gpu+ext)/prompt, *e.PromptTokens)
	case ext > 0:
		d.Verdict = CPUReload
		d.Reason = fmt.Sprintf("%.0f tokens (%.1f%% of the prompt) were reloaded from the CPU tier", ext, 100*ext/prompt)
		switch {
		case h.load != nil:
			d.Reason += fmt.Sprintf(", moving %.0f bytes CPU->GPU", *h.load)
		case h.reload != nil && *h.reload > 0:
			d.Reason += fmt.Sprintf(", with %.0f tokens moved host->GPU", *h.reload)
		case h.reload == nil:
			d.note("the server exposes no CPU->GPU byte counter: the reload rests on external hits alone")
		}
		if gpu > 0 {
			d.Reason += fmt.Sprintf("; %.0f GPU hits stayed within the shared prefix", gpu)
		}
	case gpuBeyondPrefix && full:
		d.Verdict, d.Reason = GPUHit, fmt.Sprintf("%.0f tokens (%.1f%% of the prompt) were hit in GPU memory", gpu, 100*gpu/prompt)
		if h.ext != nil {
			d.Reason += "; nothing was loaded from the CPU tier"
		} else {
			d.Reason += "; external hits not exposed"
		}
	case gpuBeyondPrefix:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%.0f GPU hits cover %.1f%% of the %d-token prompt, well below all of it", gpu, 100*gpu/prompt, *e.PromptTokens)
	default:
		d.Verdict, d.Reason = Recompute, fmt.Sprintf("nothing beyond the %d-token shared prefix was reused (%s)", e.SharedPrefixTokens, hits(h.gpu, h.ext, ", "))
	}
	if h.ext == nil && d.Verdict != GPUHit {
		d.note("the server exposes no external prefix-cache hit counter: a CPU-tier reload could not be seen")
	}
}

// crossCheckRequest takes the request's own tier split as the hits, and notes every counter
// that disagrees with it by more than a block: the disagreement is reported, never averaged.
func (d *Decision) crossCheckRequest(e Evidence, t TierTokens, h *hitEvidence) {
	dev, host := float64(t.Device), float64(t.Host+t.Storage)
	tol := float64(max(e.BlockSize, 1))
	d.note("tiers from the response's cached_tokens_details (device %d, host %d, storage %d); the counters cross-check them", t.Device, t.Host, t.Storage)
	check := func(p *float64, what string, want float64, whatWant string) {
		if p != nil && abs(*p-want) > tol {
			d.note("counters disagree with the request: %s moved by %.0f but the response reports %.0f %s tokens", what, *p, want, whatWant)
		}
	}
	check(h.gpu, "the device cached-token counter", dev, "device")
	check(h.ext, "the host cached-token counter", float64(t.Host), "host")
	check(h.reload, "the load-back (host->GPU) counter", float64(t.Host), "host")
	if t.Storage > 0 {
		d.note("%d tokens came from the storage tier (%s), counted with the host tier's", t.Storage, t.StorageBackend)
	}
	h.gpu, h.ext = &dev, &host
}

// crossCheckReload notes where the engine's reload token counters disagree with the hits a
// counter-decided reload rests on (the request-decided case was checked already).
func (d *Decision) crossCheckReload(e Evidence, c *Counters, h hitEvidence) {
	if disk := c.Delta(metrics.DiskReloadTokens); disk != nil && *disk > 0 {
		d.note("%.0f tokens were onboarded from the disk tier, not the host tier", *disk)
	}
	rt := h.reload
	if rt == nil || e.RequestTier != nil || h.ext == nil || *h.ext <= 0 {
		return
	}
	ext := *h.ext
	switch {
	case *rt <= 0:
		d.note("the reload counter did not move while %.0f external hits were counted: the counters disagree", ext)
	case abs(*rt-ext) > float64(max(e.BlockSize, 1)):
		d.note("the reload counter moved by %.0f tokens but external hits by %.0f", *rt, ext)
	}
}

// hits says both hit counters' deltas in words; an absent one is "not exposed", never 0.
func hits(gpu, ext *float64, sep string) string {
	say := func(p *float64, what string) string {
		if p == nil {
			return what + " hits not exposed"
		}
		return fmt.Sprintf("%.0f %s hits", *p, what)
	}
	return say(gpu, "GPU") + sep + say(ext, "external")
}

// value is a delta for arithmetic only; sentences use hits, so absent never reads as 0.
func value(p *float64) float64 {
	if p == nil {
		return 0
	}
	return *p
}

package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// hitEvidence is what the counter rules weigh: the GPU and host hits (from the counters, or
// the request's own tier split), the load bytes, and the cross-checks. derived marks hits
// split from usage's own total, which usage then cannot cross-check.
type hitEvidence struct {
	gpu, ext, load, reload *float64
	derived                bool
}

// decideByCounters applies the counter rules to e, whose Counters are set.
func decideByCounters(e Evidence) Decision {
	c := e.Counters
	d := Decision{record.Decision{DecidedBy: ByCounters}}
	h := hitEvidence{gpu: c.Delta(metrics.GPUPrefixHits), ext: c.Delta(metrics.ExternalPrefixHits), load: c.Delta(metrics.LoadBytes), reload: c.Delta(metrics.ReloadTokens)}
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
	}
	if t := e.RequestTier; t != nil {
		d.DecidedBy = ByRequestTier
		d.crossCheckRequest(e, *t, &h)
	} else if ext, read := externalBySource(c); read != "" {
		switch {
		case h.ext == nil:
			h.ext = &ext
			d.note("external hits read from cached tokens by source (%s): the server serves no external prefix-cache hit counter", read)
		case abs(ext-*h.ext) > tolerance(e):
			d.note("cached tokens by source (%s) moved by %s but external hits by %s", read, units.Whole(ext), units.Whole(*h.ext))
		}
	}
	unknown := d.crossCheckConnector(e, &h)
	if unknown == "" {
		unknown = d.splitFromReload(e, &h)
	}
	if unknown == "" {
		unknown = d.countersCaughtUp(e)
	}
	switch {
	case unknown != "":
		d.Verdict, d.Reason = TierUnknown, unknown
		return d
	case h.gpu == nil && h.ext != nil:
		// Reading the missing GPU hits as 0 would call a GPU hit a recompute.
		d.Verdict, d.Reason = Invalid, invalidPrefix(metrics.InvalidMissing)+"the server exposes external prefix-cache hits but no gpu_prefix_hits counter, so the GPU tier's hits are unknown"
		return d
	case e.PromptTokens == nil || *e.PromptTokens <= 0:
		d.Verdict, d.Reason = TierUnknown, "the server reported no prompt token count"
		return d
	}
	d.weigh(e, &h)
	d.crossCheckReload(e, c, h)
	parts := counterParts(c, h.gpu, h.ext)
	if t := e.RequestTier; t != nil {
		parts = requestParts(*t)
	}
	d.conserve(e, parts, h.load)
	return d
}

// externalSources are the cached-token sources outside the device: together they are the
// external hits.
var externalSources = []struct {
	c    metrics.Counter
	name string
}{{metrics.CachedFromHost, "host"}, {metrics.CachedFromDisk, "disk"}, {metrics.CachedFromP2P, "p2p"}, {metrics.CachedExternalUnspecified, "external_unspecified"}}

// externalBySource sums the external sources the server serves and names each one read
// with its delta; read is "" when none is served. A source the server does not serve adds
// nothing and is not named: absent, never a 0 that would contradict the external hits.
func externalBySource(c *Counters) (sum float64, read string) {
	var parts []string
	for _, s := range externalSources {
		if v := c.Delta(s.c); v != nil {
			sum += *v
			parts = append(parts, s.name+" "+units.Whole(*v))
		}
	}
	return sum, strings.Join(parts, ", ")
}

// countersCaughtUp checks, for an engine whose counters may lag the request, that the
// prompt-token counter moved by the request's prompt tokens: if not, the window closed
// before the server counted the request, and its hit counters say nothing of it.
func (d *Decision) countersCaughtUp(e Evidence) (unknown string) {
	pt := e.Counters.Delta(metrics.PromptTokens)
	if e.Engine.CountersLag == "" || pt == nil || e.PromptTokens == nil {
		return ""
	}
	tol := tolerance(e)
	ok := *pt >= float64(*e.PromptTokens)-tol
	d.check(CheckPromptCounter, tol, ok, "neither: the window closed before the server counted the request",
		fmt.Sprintf("the prompt-token counter's %s", units.Whole(*pt)), fmt.Sprintf("usage's %d prompt tokens", *e.PromptTokens))
	if ok {
		return ""
	}
	d.Notes = append(d.Notes, e.Engine.CountersLag)
	return fmt.Sprintf("the prompt-token counter moved by %s but usage reports %d prompt tokens: the counters had not caught up with the request, so they cannot say which tier served it", units.Whole(*pt), *e.PromptTokens)
}

// weigh applies the rules to the hits.
func (d *Decision) weigh(e Evidence, h *hitEvidence) {
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
	if e.CachedPromptTokens != nil && (h.gpu != nil || h.ext != nil) && !h.derived {
		// A hit counter never counts the last prompt token; allow one block of rounding.
		agree := abs(float64(*e.CachedPromptTokens)-(gpu+ext)) <= tolerance(e)
		d.UsageAgrees = &agree
		switch {
		case !agree && h.gpu != nil && h.ext != nil:
			// Both tiers are read: a contradiction, which a third source settles or not.
			if why := d.resolveUsage(e, h); why != "" {
				d.Verdict, d.Reason = TierUnknown, why
				return
			}
			gpu, ext = value(h.gpu), value(h.ext)
			if d.HitCoverage != nil {
				cov := (gpu + ext) / prompt
				d.HitCoverage = &cov
			}
		case !agree:
			d.note("usage reports %d cached tokens but the counters moved by %s", *e.CachedPromptTokens, hits(h.gpu, h.ext, " + "))
		default:
			d.check(CheckUsage, tolerance(e), true, "", fmt.Sprintf("usage's %d cached tokens", *e.CachedPromptTokens), "the hit counters' "+hits(h.gpu, h.ext, " + "))
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
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%s external hits but no CPU->GPU bytes moved: the counters disagree", units.Whole(ext))
	case ext > 0 && gpuBeyondPrefix:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%s tokens came from GPU memory beyond the %d-token shared prefix and %s from the CPU tier", units.Whole(gpu), e.SharedPrefixTokens, units.Whole(ext))
	case ext > 0 && !full:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%s external + %s GPU hits cover %s of the %d-token prompt, well below all of it", units.Whole(ext), units.Whole(gpu), units.Share((gpu+ext)/prompt), *e.PromptTokens)
	case ext > 0:
		d.Verdict = CPUReload
		d.Reason = fmt.Sprintf("%s tokens (%s of the prompt) were reloaded from the CPU tier", units.Whole(ext), units.Share(ext/prompt))
		switch {
		case h.load != nil:
			d.Reason += fmt.Sprintf(", moving %s bytes CPU->GPU", units.Whole(*h.load))
			if e.Engine.LoadBytesCaveat != "" {
				d.Notes = append(d.Notes, e.Engine.LoadBytesCaveat)
				if p := e.Counters.Delta(metrics.Preemptions); p != nil && *p > 0 {
					d.note("%s preemptions during the replay: the load bytes may be a resumed request's, not this reload's", units.Whole(*p))
				}
			}
		case h.reload != nil && *h.reload > 0:
			d.Reason += fmt.Sprintf(", with %s tokens moved host->GPU", units.Whole(*h.reload))
		case h.reload == nil:
			d.note("the server exposes no CPU->GPU byte counter: the reload rests on external hits alone")
		}
		if gpu > 0 {
			d.Reason += fmt.Sprintf("; %s GPU hits stayed within the shared prefix", units.Whole(gpu))
		}
	case gpuBeyondPrefix && full:
		d.Verdict, d.Reason = GPUHit, fmt.Sprintf("%s tokens (%s of the prompt) were hit in GPU memory", units.Whole(gpu), units.Share(gpu/prompt))
		if h.ext != nil {
			d.Reason += "; nothing was loaded from the CPU tier"
		} else {
			d.Reason += "; external hits not exposed"
		}
	case gpuBeyondPrefix:
		d.Verdict, d.Reason = Partial, fmt.Sprintf("%s GPU hits cover %s of the %d-token prompt, well below all of it", units.Whole(gpu), units.Share(gpu/prompt), *e.PromptTokens)
	default:
		d.Verdict, d.Reason = Recompute, fmt.Sprintf("nothing beyond the %d-token shared prefix was reused (%s)", e.SharedPrefixTokens, hits(h.gpu, h.ext, ", "))
	}
	if h.ext == nil && d.Verdict != GPUHit {
		d.note("the server exposes no external prefix-cache hit counter: a CPU-tier reload could not be seen")
	}
}

// crossCheckRequest takes the request's own tier split as the hits, and notes every counter
// that disagrees with it by more than a block: the disagreement is reported, never averaged.
// Storage hits reach the GPU through the host tier (prefetched, then loaded back), so the
// host-side counters are compared with host + storage.
func (d *Decision) crossCheckRequest(e Evidence, t TierTokens, h *hitEvidence) {
	dev, host := float64(t.Device), float64(t.Host+t.Storage)
	tol := tolerance(e)
	d.note("tiers from the response's cached_tokens_details (device %d, host %d, storage %d); the counters cross-check them", t.Device, t.Host, t.Storage)
	check := func(p *float64, what string, want float64, whatWant string) {
		if p == nil {
			return
		}
		agree := abs(*p-want) <= tol
		d.CrossChecks = append(d.CrossChecks, CrossCheck{Name: CheckRequestTier, Tolerance: tol, Agrees: agree,
			Sources: []string{fmt.Sprintf("%s %s", what, units.Whole(*p)), fmt.Sprintf("the response's %s %s tokens", units.Whole(want), whatWant)}})
		if !agree {
			d.CrossChecks[len(d.CrossChecks)-1].Used = "the response's own tier split"
			d.note("counters disagree with the request: %s moved by %s but the response reports %s %s tokens", what, units.Whole(*p), units.Whole(want), whatWant)
		}
	}
	hostWords := "host"
	if t.Storage > 0 {
		hostWords = "host + storage"
	}
	check(h.gpu, "the device cached-token counter", dev, "device")
	check(h.ext, "the host cached-token counter", host, hostWords)
	check(h.reload, "the load-back (host->GPU) counter", host, hostWords)
	if u := e.CachedPromptTokens; u != nil {
		check(ptr(float64(*u)), "usage's cached tokens", dev+host, "cached")
		agree := abs(float64(*u)-(dev+host)) <= tol
		d.UsageAgrees = &agree
	}
	if t.Storage > 0 {
		d.note("%d tokens came from the storage tier (%s), prefetched into the host tier and counted with its tokens", t.Storage, t.StorageBackend)
	}
	h.gpu, h.ext, h.derived = &dev, &host, true // usage was checked against them above
}

// crossCheckReload notes where the engine's reload token counters disagree with the hits a
// counter-decided reload rests on (the request-decided case was checked already), and which
// of the reloaded tokens came from the disk or object tiers.
func (d *Decision) crossCheckReload(e Evidence, c *Counters, h hitEvidence) {
	staged := c.Delta(metrics.DiskStagedTokens)
	if disk := c.Delta(metrics.DiskReloadTokens); disk != nil && *disk > 0 {
		d.note("%s tokens were onboarded from the disk tier, not the host tier", units.Whole(*disk))
	}
	if staged != nil && *staged > 0 {
		d.note("%s tokens came from the disk tier, staged through the host tier on their way to the GPU: they are counted in the host->GPU reload too, so only the rest came from host memory", units.Whole(*staged))
	}
	if b := c.Delta(metrics.DiskStagedBytes); b != nil && *b > 0 {
		d.note("%s", diskStagedBytes(*b, h))
	}
	if u := c.Delta(metrics.CachedExternalUnspecified); u != nil && *u > 0 {
		d.note("%s external tokens came from a connector that does not say which of its tiers served them (cached by source external_unspecified)", units.Whole(*u))
	}
	if obj := c.Delta(metrics.ObjectReloadTokens); obj != nil && *obj > 0 {
		d.note("%s tokens were onboarded from object storage, not the host tier", units.Whole(*obj))
	}
	rt := h.reload
	if rt == nil || e.RequestTier != nil || h.derived || h.ext == nil || *h.ext <= 0 {
		return
	}
	ext := *h.ext
	onboarded := *rt + value(c.Delta(metrics.DiskReloadTokens)) + value(c.Delta(metrics.ObjectReloadTokens))
	tol := tolerance(e)
	agree := abs(onboarded-ext) <= tol
	cc := CrossCheck{Name: CheckOnboarded, Tolerance: tol, Agrees: agree,
		Sources: []string{fmt.Sprintf("%s tokens onboarded to the GPU", units.Whole(onboarded)), fmt.Sprintf("%s external hits", units.Whole(ext))}}
	if !agree {
		cc.Used = "the external hits"
		if u := e.CachedPromptTokens; u != nil && h.gpu != nil && abs(float64(*u)-(*h.gpu+ext)) <= tol {
			cc.Used += fmt.Sprintf(", which agree with usage's %d cached tokens", *u)
		}
	}
	d.CrossChecks = append(d.CrossChecks, cc)
	switch {
	case *rt <= 0 && !agree:
		d.note("the reload counter did not move while %s external hits were counted: the counters disagree", units.Whole(ext))
	case !agree:
		d.note("the reload counter moved by %s tokens but external hits by %s", units.Whole(onboarded), units.Whole(ext))
	}
}

// diskStagedBytes says how much of a reload the disk tier served through the host tier,
// from bytes promoted disk->host (vLLM's tiering spec): in tokens at the reload's own bytes
// per token where the load bytes and external hits moved, else in bytes only.
func diskStagedBytes(staged float64, h hitEvidence) string {
	words := fmt.Sprintf("%s bytes came from the disk tier, staged through the host tier on their way to the GPU: the host->GPU load bytes include them, so only the rest came from host memory", units.Whole(staged))
	if h.load == nil || *h.load <= 0 || h.ext == nil || *h.ext <= 0 {
		return words
	}
	tokens := min(staged / *h.load * *h.ext, *h.ext)
	return fmt.Sprintf("%s (about %s of the %s external tokens, at the reload's %s bytes per token)", words, units.Whole(tokens), units.Whole(*h.ext), units.Whole(*h.load / *h.ext))
}

func ptr(v float64) *float64 { return &v }

// hits says both hit counters' deltas in words; an absent one is "not exposed", never 0.
func hits(gpu, ext *float64, sep string) string {
	say := func(p *float64, what string) string {
		if p == nil {
			return what + " hits not exposed"
		}
		return fmt.Sprintf("%s %s hits", units.Whole(*p), what)
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

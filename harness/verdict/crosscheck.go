package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Names of the cross-checks: each compares one quantity that two independent sources give.
const (
	// CheckUsage: usage's cached tokens vs the GPU + external hit counters.
	CheckUsage = "usage_vs_hit_counters"
	// CheckConnectorHits: the engine's external hits vs the connector's own hit tokens
	// (vLLM's external_prefix_cache_hits vs LMCache's num_hit_tokens).
	CheckConnectorHits = "external_hits_vs_connector_hits"
	// CheckRequestTier: the response's own tier split vs the tier and load-back counters.
	CheckRequestTier = "request_tiers_vs_counters"
	// CheckLoadBack: tokens loaded back host->GPU vs all cached tokens, where no counter
	// splits the cached tokens by tier (SGLang before cache_source).
	CheckLoadBack = "load_back_vs_cached_total"
	// CheckOnboarded: the offload manager's onboarded tokens (KVBM's blocks x block size)
	// vs the engine's external hits.
	CheckOnboarded = "onboarded_vs_external_hits"
	// CheckStoreBytes: store bytes vs stored tokens x bytes per stored token.
	CheckStoreBytes = "store_bytes_vs_stored_tokens"
	// CheckPromptCounter: the prompt-token counter vs usage's prompt tokens, for engines
	// whose counters may lag the request.
	CheckPromptCounter = "prompt_counter_vs_usage"
	// CheckCachedCounter: the cached-token counter vs usage's cached tokens (llama.cpp).
	CheckCachedCounter = "cached_counter_vs_usage"
)

// CrossCheck is one quantity read from two independent sources: the record's type.
type CrossCheck = record.CrossCheck

// check records a cross-check; a disagreement is also a note naming the check, both
// sources and what the verdict used.
func (d *Decision) check(name string, tol float64, agrees bool, used string, sources ...string) {
	if agrees {
		used = ""
	}
	d.CrossChecks = append(d.CrossChecks, CrossCheck{Name: name, Sources: sources, Agrees: agrees, Tolerance: tol, Used: used})
	if !agrees {
		d.note("cross-check %s: %s disagree beyond %s of rounding; the verdict uses %s", name, strings.Join(sources, " and "), units.Whole(tol), used)
	}
}

// crossCheckConnector compares the engine's external hits with the connector's own count
// of the tokens it served. Where they disagree, usage's cached tokens (GPU + external)
// decide which one is right; with no agreeing third source the host tier's hits are unknown
// and the returned reason says so.
func (d *Decision) crossCheckConnector(e Evidence, h *hitEvidence) (unknown string) {
	conn := e.Counters.Delta(metrics.ConnectorHitTokens)
	if conn == nil || h.ext == nil {
		return ""
	}
	tol := tolerance(e)
	sources := []string{fmt.Sprintf("external hits %s", units.Whole(*h.ext)), fmt.Sprintf("the connector's own hit tokens %s", units.Whole(*conn))}
	if abs(*conn-*h.ext) <= tol {
		d.check(CheckConnectorHits, tol, true, "", sources...)
		return ""
	}
	var used string
	usage := e.CachedPromptTokens
	bySource := e.Counters.Delta(metrics.PromptTokensExternal)
	switch {
	case usage != nil && h.gpu != nil && abs(float64(*usage)-(*h.gpu+*h.ext)) <= tol:
		used = fmt.Sprintf("the external hits, which agree with usage's %d cached tokens", *usage)
	case usage != nil && h.gpu != nil && abs(float64(*usage)-(*h.gpu+*conn)) <= tol:
		used = fmt.Sprintf("the connector's hit tokens, which agree with usage's %d cached tokens", *usage)
		h.ext = conn
	case bySource != nil && abs(*bySource-*h.ext) <= tol:
		used = fmt.Sprintf("the external hits, which agree with the prompt tokens by source (%s external)", units.Whole(*bySource))
	case bySource != nil && abs(*bySource-*conn) <= tol:
		used = fmt.Sprintf("the connector's hit tokens, which agree with the prompt tokens by source (%s external)", units.Whole(*bySource))
		h.ext = conn
	default:
		used = "neither: no third source (usage's cached tokens, the prompt tokens by source) agrees with one of them, so the host tier's hits are unknown"
		unknown = fmt.Sprintf("the external hit counter (%s) and the connector's own hit tokens (%s) disagree, and no third source says which is right", units.Whole(*h.ext), units.Whole(*conn))
	}
	d.check(CheckConnectorHits, tol, false, used, sources...)
	if e.Engine.ConnectorHits != "" {
		d.Notes = append(d.Notes, e.Engine.ConnectorHits)
	}
	return unknown
}

// splitFromReload gives the tiers from the load-back counter where no counter splits the
// cached tokens by tier (SGLang before cache_source) and the response carried none: the
// tokens moved host->GPU for the replay are its host hits, the rest of all cached tokens its
// device hits, when the two agree (load-back within the cached total).
func (d *Decision) splitFromReload(e Evidence, h *hitEvidence) (unknown string) {
	if h.gpu != nil || h.ext != nil || h.reload == nil || e.RequestTier != nil {
		return ""
	}
	var total *float64
	from := "usage's cached tokens"
	if u := e.CachedPromptTokens; u != nil {
		v := float64(*u)
		total = &v
	} else if total = e.Counters.Delta(metrics.PromptTokensCached); total != nil {
		from = "the cached-token counter"
	}
	if total == nil {
		return ""
	}
	tol := tolerance(e)
	sources := []string{fmt.Sprintf("%s tokens loaded back host->GPU", units.Whole(*h.reload)), fmt.Sprintf("%s %s", from, units.Whole(*total))}
	if *h.reload > *total+tol {
		d.check(CheckLoadBack, tol, false, "neither: more tokens were loaded back than were cached, so the tier split is unknown", sources...)
		return fmt.Sprintf("no counter splits the cached tokens by tier, and the load-back counter (%s) exceeds %s (%s)", units.Whole(*h.reload), from, units.Whole(*total))
	}
	d.check(CheckLoadBack, tol, true, "", sources...)
	gpu := max(*total-*h.reload, 0)
	h.gpu, h.ext, h.derived = &gpu, h.reload, true
	d.note("no counter splits the cached tokens by tier (the server's cached-token counter has no cache_source label, and the response carried no cached_tokens_details): the host tier's %s tokens are the load-back counter's, the device's %s the rest of %s", units.Whole(*h.reload), units.Whole(gpu), from)
	return ""
}

// resolveUsage decides, when usage's cached tokens and the hit counters disagree, which to
// believe: a third source (vLLM's prompt tokens by source, or its cached-token counter)
// that agrees with one of them. With none the tier split is unknown, said in the returned
// reason. It applies only where both hit counters are read: with one missing, the
// difference may be the tier kvbench cannot see.
func (d *Decision) resolveUsage(e Evidence, h *hitEvidence) (unknown string) {
	usage := float64(*e.CachedPromptTokens)
	counted := *h.gpu + *h.ext
	tol := tolerance(e)
	sources := []string{fmt.Sprintf("usage's %s cached tokens", units.Whole(usage)), fmt.Sprintf("the hit counters' %s (%s GPU + %s external)", units.Whole(counted), units.Whole(*h.gpu), units.Whole(*h.ext))}
	c := e.Counters
	local, ext := c.Delta(metrics.PromptTokensLocalCacheHit), c.Delta(metrics.PromptTokensExternal)
	cached := c.Delta(metrics.PromptTokensCached)
	var used string
	switch {
	case local != nil && ext != nil && abs(*local+*ext-usage) <= tol:
		used = fmt.Sprintf("the prompt tokens by source (%s local cache hits, %s external), which agree with usage", units.Whole(*local), units.Whole(*ext))
		h.gpu, h.ext = local, ext
	case local != nil && ext != nil && abs(*local+*ext-counted) <= tol:
		used = fmt.Sprintf("the hit counters, which agree with the prompt tokens by source (%s local, %s external)", units.Whole(*local), units.Whole(*ext))
	case (local == nil || ext == nil) && cached != nil && abs(*cached-counted) <= tol:
		used = fmt.Sprintf("the hit counters, which agree with the cached-token counter (%s)", units.Whole(*cached))
	default:
		used = "neither: no third source agrees with one of them, so the tier split is unknown"
		unknown = fmt.Sprintf("usage's %s cached tokens and the hit counters' %s disagree, and no third source says which is right", units.Whole(usage), units.Whole(counted))
	}
	d.check(CheckUsage, tol, false, used, sources...)
	return unknown
}

// crossCheckStore compares the run's store bytes with its stored tokens times the bytes per
// stored token the capacity math uses, where the engine counts both (SGLang's backup bytes
// and tokens).
func (d *Decision) crossCheckStore(e Evidence) {
	o, a := e.Offload, e.Setup
	if o.StoreBytes == nil || o.StoreTokens == nil || *o.StoreTokens <= 0 || a == nil || a.Setup.StoreBytesPerToken <= 0 {
		return
	}
	per := a.Setup.StoreBytesPerToken
	want := *o.StoreTokens * per
	tol := 0.01 * want // bytes per token are exact; 1% absorbs partial blocks
	d.check(CheckStoreBytes, tol, abs(*o.StoreBytes-want) <= tol,
		"the stated bytes per token for the capacity math; the store bytes say the tier holds a different number of tokens than it assumes",
		fmt.Sprintf("%s bytes stored", units.Whole(*o.StoreBytes)), fmt.Sprintf("%s tokens stored x %s bytes per token (%s) = %s", units.Whole(*o.StoreTokens), units.Whole(per), a.Setup.StoreBytesSource, units.Whole(want)))
}

// tolerance is the rounding two token counts may differ by: a block (a hit counter never
// counts the last prompt token).
func tolerance(e Evidence) float64 { return float64(max(e.BlockSize, 1)) }

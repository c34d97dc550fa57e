// Package verdict decides, from counter deltas and usage, where a replayed request's cached
// tokens came from: reloaded from the CPU tier, hit in GPU memory, a mix, or recomputed
// (docs/domain.md, "The claim and its evidence"). It is pure computation over numbers, so
// its rules test with literals.
package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// Replay verdicts.
const (
	CPUReload = "cpu_reload" // external prefix-cache hits and CPU->GPU bytes cover the prompt
	GPUHit    = "gpu_hit"    // GPU prefix hits beyond the shared prefix cover the prompt
	Partial   = "partial"    // both tiers, or hits well below the prompt
	Recompute = "recompute"  // nothing beyond the shared prefix was reused
	// TierUnknown: tokens were reused but the counters cannot say from which tier.
	TierUnknown = "cache_hit_tier_unknown"
	// Invalid: the request failed, or the counters cannot be trusted (a restart reset them, a
	// scrape failed, a needed counter was not read, other requests moved them).
	Invalid = "invalid"
)

// FullCoverage is the fraction of the prompt the hits must cover for a whole-prompt verdict;
// below it the hits are "well below the prompt" and the verdict is partial.
const FullCoverage = 0.9

// Evidence is what a replay's verdict rests on. A nil pointer is a counter the server did not
// expose: absent, never 0.
type Evidence struct {
	PromptTokens       *int     `json:"prompt_tokens"`
	CachedPromptTokens *int     `json:"cached_prompt_tokens"`
	GPUHitsDelta       *float64 `json:"gpu_prefix_hits_delta"`
	ExternalHitsDelta  *float64 `json:"external_prefix_hits_delta"`
	LoadBytesDelta     *float64 `json:"cpu_to_gpu_bytes_delta"`
	// HostCachedDelta is the proposed vllm:prompt_tokens_cached_by_source_total{source="host"}:
	// it names the tier per token, so it stands in for external hits where those are absent
	// and cross-checks them where both are served.
	HostCachedDelta *float64 `json:"host_cached_tokens_delta,omitempty"`
	// RequestTier is the replay's own cached tokens per tier, as the server reported them in
	// its response (SGLang's cached_tokens_details): where present it is the primary evidence
	// and the counters only cross-check it.
	RequestTier *TierTokens `json:"request_tier,omitempty"`
	// ReloadTokensDelta is the engine's host->GPU token counter (SGLang's load_back_tokens,
	// KVBM's onboarded host blocks in tokens); DiskReloadTokensDelta disk->GPU. Both
	// cross-check a reload and are never summed into the hits.
	ReloadTokensDelta     *float64 `json:"reload_tokens_delta,omitempty"`
	DiskReloadTokensDelta *float64 `json:"disk_reload_tokens_delta,omitempty"`
	// SharedPrefixTokens and BlockSize bound the GPU hits a reload may still show: the
	// shared prefix stays hot in GPU memory while the request's own blocks are evicted.
	SharedPrefixTokens int `json:"shared_prefix_tokens"`
	BlockSize          int `json:"block_size"`
	// LoadBytesPerToken is the expected CPU->GPU bytes per hit token (0: unknown).
	LoadBytesPerToken float64 `json:"load_bytes_per_token"`
	// UnreadableCounters lists the verdict's counters the server serves without a usable
	// number (NaN, Inf), each naming the counter: such a counter is neither absent nor 0.
	UnreadableCounters []string `json:"unreadable_counters,omitempty"`
	// CountersValid is false when the counters cannot be trusted; Invalidity says why (a
	// restart, a failed scrape, a missing counter, other requests) and InvalidReason names it.
	CountersValid  bool               `json:"counters_valid"`
	Invalidity     metrics.Invalidity `json:"invalidity,omitempty"`
	InvalidReason  string             `json:"invalid_reason,omitempty"`
	RequestFailed  bool               `json:"request_failed"`
	RequestFailure string             `json:"request_failure,omitempty"`
}

// Replay is the verdict on one replayed request with the numbers behind it.
type Replay struct {
	Verdict string `json:"verdict"`
	Reason  string `json:"reason"`
	// ExpectedLoadBytes = external hits x expected load bytes per token.
	ExpectedLoadBytes *float64 `json:"expected_load_bytes,omitempty"`
	// MeasuredLoadBytesPerToken = load bytes delta / external hits.
	MeasuredLoadBytesPerToken *float64 `json:"measured_load_bytes_per_token,omitempty"`
	// HitCoverage = (GPU + external hits) / prompt tokens.
	HitCoverage *float64 `json:"hit_coverage,omitempty"`
	// UsageAgrees cross-checks the counters against usage's cached_tokens (hit counters have
	// been double-counted on scheduler retries in some vLLM versions); nil when unknown.
	UsageAgrees *bool    `json:"usage_agrees_with_counters,omitempty"`
	Notes       []string `json:"notes,omitempty"`
	Evidence    Evidence `json:"evidence"`
	// Slot holds the attribution by a single slot's common prefix, for engines without tier
	// counters (llama.cpp); nil when the counters decided.
	Slot *SlotReplay `json:"slot_attribution,omitempty"`
	// Diagnosis says why a recompute or partial replay was not reloaded, from the run's
	// offload evidence (Offload); empty when nothing in it explains the verdict.
	Diagnosis []Diagnosis      `json:"diagnosis,omitempty"`
	Offload   *OffloadEvidence `json:"offload_evidence,omitempty"`
}

// TierTokens is a request's cached prompt tokens by the tier that served them.
type TierTokens struct {
	Device         int    `json:"device"`
	Host           int    `json:"host"`
	Storage        int    `json:"storage"`
	StorageBackend string `json:"storage_backend,omitempty"`
}

// Decide applies the rules to e.
func Decide(e Evidence) Replay {
	orig := e
	var notes []string
	if t := e.RequestTier; t != nil {
		notes = crossCheckRequest(&e, *t)
	} else if h := e.HostCachedDelta; h != nil {
		switch {
		case e.ExternalHitsDelta == nil:
			e.ExternalHitsDelta = h
			notes = append(notes, "external hits read from cached tokens by source (host): the server serves no external prefix-cache hit counter")
		case abs(*h-*e.ExternalHitsDelta) > float64(max(e.BlockSize, 1)):
			notes = append(notes, fmt.Sprintf("cached tokens by source (host) moved by %.0f but external hits by %.0f", *h, *e.ExternalHitsDelta))
		}
	}
	r := decide(e)
	r.Notes = append(notes, r.Notes...)
	if orig.RequestTier != nil {
		r.Evidence = orig // the counters as read; the request's split is in RequestTier
	}
	r.crossCheckReload(e)
	return r
}

// crossCheckRequest takes the request's own tier split as the hits, and notes every counter
// that disagrees with it by more than a block: the disagreement is reported, never averaged.
func crossCheckRequest(e *Evidence, t TierTokens) []string {
	dev, host := float64(t.Device), float64(t.Host+t.Storage)
	tol := float64(max(e.BlockSize, 1))
	notes := []string{fmt.Sprintf("tiers from the response's cached_tokens_details (device %d, host %d, storage %d); the counters cross-check them", t.Device, t.Host, t.Storage)}
	check := func(p *float64, what string, want float64, whatWant string) {
		if p != nil && abs(*p-want) > tol {
			notes = append(notes, fmt.Sprintf("counters disagree with the request: %s moved by %.0f but the response reports %.0f %s tokens", what, *p, want, whatWant))
		}
	}
	check(e.GPUHitsDelta, "the device cached-token counter", dev, "device")
	check(e.ExternalHitsDelta, "the host cached-token counter", float64(t.Host), "host")
	check(e.ReloadTokensDelta, "the load-back (host->GPU) counter", float64(t.Host), "host")
	if t.Storage > 0 {
		notes = append(notes, fmt.Sprintf("%d tokens came from the storage tier (%s), counted with the host tier's", t.Storage, t.StorageBackend))
	}
	e.GPUHitsDelta, e.ExternalHitsDelta = &dev, &host
	return notes
}

// crossCheckReload notes where the engine's reload token counter disagrees with the hits a
// counter-decided reload rests on (the request-decided case was checked already).
func (r *Replay) crossCheckReload(e Evidence) {
	if d := e.DiskReloadTokensDelta; d != nil && *d > 0 {
		r.note("%.0f tokens were onboarded from the disk tier, not the host tier", *d)
	}
	rt := e.ReloadTokensDelta
	if rt == nil || e.RequestTier != nil || e.ExternalHitsDelta == nil || *e.ExternalHitsDelta <= 0 {
		return
	}
	ext := *e.ExternalHitsDelta
	switch {
	case *rt <= 0:
		r.note("the reload counter did not move while %.0f external hits were counted: the counters disagree", ext)
	case abs(*rt-ext) > float64(max(e.BlockSize, 1)):
		r.note("the reload counter moved by %.0f tokens but external hits by %.0f", *rt, ext)
	}
}

func decide(e Evidence) Replay {
	r := Replay{Evidence: e}
	switch {
	case e.RequestFailed:
		r.Verdict, r.Reason = Invalid, "the request failed: "+e.RequestFailure
		return r
	case !e.CountersValid:
		r.Verdict, r.Reason = Invalid, invalidPrefix(e.Invalidity)+e.InvalidReason
		return r
	case len(e.UnreadableCounters) > 0:
		r.Verdict, r.Reason = Invalid, invalidPrefix(metrics.InvalidMissing)+strings.Join(e.UnreadableCounters, "; ")
		return r
	case e.GPUHitsDelta == nil && e.ExternalHitsDelta != nil:
		// Reading the missing GPU hits as 0 would call a GPU hit a recompute.
		r.Verdict, r.Reason = Invalid, invalidPrefix(metrics.InvalidMissing)+"the server exposes external prefix-cache hits but no gpu_prefix_hits counter, so the GPU tier's hits are unknown"
		return r
	case e.PromptTokens == nil || *e.PromptTokens <= 0:
		r.Verdict, r.Reason = TierUnknown, "the server reported no prompt token count"
		return r
	}
	prompt := float64(*e.PromptTokens)
	gpu, ext := value(e.GPUHitsDelta), value(e.ExternalHitsDelta)
	if e.ExternalHitsDelta != nil && ext > 0 {
		if e.LoadBytesDelta != nil {
			per := *e.LoadBytesDelta / ext
			r.MeasuredLoadBytesPerToken = &per
		}
		if e.LoadBytesPerToken > 0 {
			exp := ext * e.LoadBytesPerToken
			r.ExpectedLoadBytes = &exp
		}
	}
	if e.GPUHitsDelta != nil || e.ExternalHitsDelta != nil {
		cov := (gpu + ext) / prompt
		r.HitCoverage = &cov
	}
	if e.CachedPromptTokens != nil && (e.GPUHitsDelta != nil || e.ExternalHitsDelta != nil) {
		// A hit counter never counts the last prompt token; allow one block of rounding.
		agree := abs(float64(*e.CachedPromptTokens)-(gpu+ext)) <= float64(max(e.BlockSize, 1))
		r.UsageAgrees = &agree
		if !agree {
			r.note("usage reports %d cached tokens but the counters moved by %s", *e.CachedPromptTokens, hits(e.GPUHitsDelta, e.ExternalHitsDelta, " + "))
		}
	}

	if e.GPUHitsDelta == nil && e.ExternalHitsDelta == nil {
		if e.CachedPromptTokens != nil && *e.CachedPromptTokens > 0 {
			r.Verdict, r.Reason = TierUnknown, fmt.Sprintf("usage reports %d cached tokens, but the server exposes no prefix-cache hit counters to say from which tier", *e.CachedPromptTokens)
		} else {
			r.Verdict, r.Reason = TierUnknown, "the server exposes no prefix-cache hit counters"
		}
		return r
	}

	prefixAllowance := float64(e.SharedPrefixTokens + max(e.BlockSize, 1))
	gpuBeyondPrefix := gpu > prefixAllowance
	full := gpu+ext >= FullCoverage*prompt
	switch {
	case ext > 0 && e.LoadBytesDelta != nil && *e.LoadBytesDelta <= 0:
		r.Verdict, r.Reason = Partial, fmt.Sprintf("%.0f external hits but no CPU->GPU bytes moved: the counters disagree", ext)
	case ext > 0 && gpuBeyondPrefix:
		r.Verdict, r.Reason = Partial, fmt.Sprintf("%.0f tokens came from GPU memory beyond the %d-token shared prefix and %.0f from the CPU tier", gpu, e.SharedPrefixTokens, ext)
	case ext > 0 && !full:
		r.Verdict, r.Reason = Partial, fmt.Sprintf("%.0f external + %.0f GPU hits cover %.1f%% of the %d-token prompt, well below all of it", ext, gpu, 100*(gpu+ext)/prompt, *e.PromptTokens)
	case ext > 0:
		r.Verdict = CPUReload
		r.Reason = fmt.Sprintf("%.0f tokens (%.1f%% of the prompt) were reloaded from the CPU tier", ext, 100*ext/prompt)
		if e.LoadBytesDelta != nil {
			r.Reason += fmt.Sprintf(", moving %.0f bytes CPU->GPU", *e.LoadBytesDelta)
		} else if e.ReloadTokensDelta != nil && *e.ReloadTokensDelta > 0 {
			r.Reason += fmt.Sprintf(", with %.0f tokens moved host->GPU", *e.ReloadTokensDelta)
		} else if e.ReloadTokensDelta == nil {
			r.note("the server exposes no CPU->GPU byte counter: the reload rests on external hits alone")
		}
		if gpu > 0 {
			r.Reason += fmt.Sprintf("; %.0f GPU hits stayed within the shared prefix", gpu)
		}
	case gpuBeyondPrefix && full:
		r.Verdict, r.Reason = GPUHit, fmt.Sprintf("%.0f tokens (%.1f%% of the prompt) were hit in GPU memory", gpu, 100*gpu/prompt)
		if e.ExternalHitsDelta != nil {
			r.Reason += "; nothing was loaded from the CPU tier"
		} else {
			r.Reason += "; external hits not exposed"
		}
	case gpuBeyondPrefix:
		r.Verdict, r.Reason = Partial, fmt.Sprintf("%.0f GPU hits cover %.1f%% of the %d-token prompt, well below all of it", gpu, 100*gpu/prompt, *e.PromptTokens)
	default:
		r.Verdict, r.Reason = Recompute, fmt.Sprintf("nothing beyond the %d-token shared prefix was reused (%s)", e.SharedPrefixTokens, hits(e.GPUHitsDelta, e.ExternalHitsDelta, ", "))
	}
	if e.ExternalHitsDelta == nil && r.Verdict != GPUHit {
		r.note("the server exposes no external prefix-cache hit counter: a CPU-tier reload could not be seen")
	}
	return r
}

// invalidPrefix says what kind of invalidity a reason is: each has its own cause and cure.
func invalidPrefix(k metrics.Invalidity) string {
	switch k {
	case metrics.InvalidReset:
		return "counters went down between the scrapes (server restart): "
	case metrics.InvalidScrapeFailed:
		return "no counters were read around the replay (a scrape failed): "
	case metrics.InvalidMissing:
		return "a counter the verdict needs was not read: "
	case metrics.InvalidContaminated:
		return "other requests ran on the server during the replay: "
	}
	return "the counters cannot be trusted: "
}

func (r *Replay) note(format string, args ...any) {
	r.Notes = append(r.Notes, fmt.Sprintf(format, args...))
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

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

// CachedFraction is usage's cached tokens over prompt tokens; nil when either is unknown.
func CachedFraction(promptTokens, cachedTokens *int) *float64 {
	if promptTokens == nil || cachedTokens == nil || *promptTokens <= 0 {
		return nil
	}
	f := float64(*cachedTokens) / float64(*promptTokens)
	return &f
}

// Sentence says in words what the verdict means for the replayed prompt.
func (r *Replay) Sentence() string {
	if r.Slot != nil {
		switch r.Verdict {
		case CPUReload:
			return "The replay was restored from the host-RAM prompt cache."
		case GPUHit:
			return "The replay remained in the live slot."
		}
	}
	switch r.Verdict {
	case CPUReload:
		return "The replay was reloaded from the CPU tier."
	case GPUHit:
		return "The replay remained in GPU cache."
	case Recompute:
		return "The replay was recomputed beyond the shared prefix."
	case Partial:
		return "The replay was served only partly from cache."
	case Invalid:
		return "The replay's measurement is invalid: " + r.Reason + "."
	default:
		return "The tier that served the replay could not be determined."
	}
}

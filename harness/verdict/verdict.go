// Package verdict decides, from all the evidence of one replayed request, where its cached
// tokens came from (reloaded from the host tier, hit in GPU memory, a mix, recomputed),
// whether the setup could prove a reload, and why (docs/domain.md, "The claim and its
// evidence"). Decide is its one entry point: the runner gathers evidence, Decide judges it.
// It is pure computation over numbers, so its rules test with literals.
package verdict

import (
	"fmt"
	"maps"
	"slices"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// Verdict is the judgement on one replayed request. Every package spells verdicts with
// these constants.
type Verdict = record.Verdict

// Replay verdicts.
const (
	CPUReload Verdict = "cpu_reload" // host-tier hits (and load bytes) cover the prompt
	GPUHit    Verdict = "gpu_hit"    // GPU prefix hits beyond the shared prefix cover the prompt
	Partial   Verdict = "partial"    // both tiers, or hits well below the prompt
	Recompute Verdict = "recompute"  // nothing beyond the shared prefix was reused
	// TierUnknown: tokens were reused but the evidence cannot say from which tier.
	TierUnknown Verdict = "cache_hit_tier_unknown"
	// Invalid: the request failed, or the counters cannot be trusted (a restart reset them, a
	// scrape failed, a needed counter was not read, other requests moved them), or the
	// replay was never measured.
	Invalid Verdict = "invalid"
)

// Expectable lists the verdicts a gate may expect, in a stable order.
var Expectable = []Verdict{CPUReload, GPUHit, Partial, Recompute, TierUnknown}

// All lists every verdict: the expectable ones, then invalid.
var All = append(append([]Verdict{}, Expectable...), Invalid)

// Parse reads a verdict word; ok is false for a word that is none.
func Parse(s string) (v Verdict, ok bool) {
	for _, v := range All {
		if string(v) == s {
			return v, true
		}
	}
	return "", false
}

// FullCoverage is the fraction of the prompt the hits must cover for a whole-prompt verdict;
// below it the hits are "well below the prompt" and the verdict is partial.
const FullCoverage = 0.9

// Attribution names the rule set a verdict was decided by.
const (
	ByCounters    = "counters"     // prefix-cache hit counters around the isolated replay
	ByRequestTier = "request_tier" // the response's own cached tokens per tier (SGLang)
	BySlot        = "slot"         // the single slot's common prefix (llama.cpp)
)

// Evidence is everything known about one replayed request. A nil pointer is something the
// server did not report: absent, never 0.
type Evidence struct {
	// Failed is set when the request itself failed; Failure says how.
	Failed  bool
	Failure string
	// NotSent says why the replay was never measured (the run stopped first); "" when it was.
	NotSent            string
	PromptTokens       *int
	CachedPromptTokens *int
	// SharedPrefixTokens and BlockSize bound the GPU hits a reload may still show: the
	// shared prefix stays hot in GPU memory while the request's own blocks are evicted.
	SharedPrefixTokens int
	BlockSize          int
	// LoadBytesPerToken is the expected CPU->GPU bytes per hit token (0: unknown).
	LoadBytesPerToken float64
	// Counters are the counter deltas around the replay; nil when none were read, and
	// NoCounters says why.
	Counters   *Counters
	NoCounters string
	// RequestTier is the replay's own cached tokens per tier, as the server reported them in
	// its response (SGLang's cached_tokens_details): where present it is the primary evidence
	// and the counters only cross-check it.
	RequestTier *TierTokens
	// Slot is the evidence of slot attribution, for engines whose Engine.BySlot is set.
	Slot *SlotEvidence
	// Routing says which replica served the original request and which the replay.
	Routing Routing
	// Offload is the run's offload evidence up to the replay, for the diagnosis.
	Offload OffloadEvidence
	// Setup is the capacity math with the tokens the server counted; nil when unknown.
	Setup *capacity.Assessment
	// WarmCaches are the findings of the repetition's cold steps before the replay that came
	// back cached beyond what the run could have cached (ColdCaches): the server's caches
	// held the prompts before the run, so nothing the run did can have put the replay where
	// it was found.
	WarmCaches []WarmCaches
	// Engine is what the engine's definition says about its evidence.
	Engine Engine
}

// Counters are the counter deltas of one measured window.
type Counters struct {
	// Deltas holds each usable delta; a counter missing from it is absent or unusable.
	Deltas map[metrics.Counter]float64
	// Unreadable names counters the server serves without a usable number (NaN, Inf), each
	// with its reason: neither absent nor 0.
	Unreadable map[metrics.Counter]string
	// Valid is false when the window cannot be trusted; Invalidity says why and
	// InvalidReason names it.
	Valid         bool
	Invalidity    metrics.Invalidity
	InvalidReason string
	Contaminated  bool
	// Isolation is the check that the window saw only the replay ("clean: ...",
	// "unchecked: ...", "contaminated: ...").
	Isolation string
	// Resolution is, per counter, the step its printed values move by where the server
	// prints fewer digits than the value has (llama.cpp above 10^6); absent when exact.
	Resolution map[metrics.Counter]float64
	// Notes are, per counter, what a reader must know of its readings (ranks of one
	// replica that disagree, a sum over ranks of unknown count: metrics.Parallelism).
	Notes map[metrics.Counter]string
}

// Delta returns c's usable delta, nil when absent.
func (c *Counters) Delta(k metrics.Counter) *float64 {
	if c == nil {
		return nil
	}
	v, ok := c.Deltas[k]
	if !ok {
		return nil
	}
	return &v
}

// TierTokens is a request's cached prompt tokens by the tier that served them: the record's
// type, as the client read it.
type TierTokens = record.TierTokens

// Engine is what an engine's definition says about its evidence; the runner resolves it once
// per run.
type Engine struct {
	// BySlot: the engine has no tier counters, and a replay is attributed by the common
	// prefix with the prompt its single slot held (llama.cpp's server).
	BySlot bool
	// RequestTier: the engine names each request's cached tokens per tier when asked.
	RequestTier bool
	// TierUnknown says why the engine cannot tell a host hit from a GPU hit ("" when it can).
	TierUnknown string
	// ReloadCounterHint is noted when matched tokens moved but the reload counter did not
	// (KVBM's known bug); "" for engines without the trap.
	ReloadCounterHint string
	// ConnectorHits names the KV connector's own hit counter and its known traps (LMCache's
	// 10 s log tick, a report of it stuck at 0), said when it disagrees with the engine's
	// external hits; "" for engines without a second hit source.
	ConnectorHits string
	// LoadBytesCaveat says what else moves the load-byte counter (TensorRT-LLM's onboard
	// bytes also move on resume after preemption and on prefetch); "" when nothing does.
	LoadBytesCaveat string
	// CountersLag says why the engine's counters may not include a request yet when it
	// ends (TensorRT-LLM's collector runs behind the requests); "" when they do.
	CountersLag string
}

// Routing names the replicas that served the original request and the replay; empty when
// either is unknown.
type Routing struct {
	OriginalReplica string
	ReplayReplica   string
}

// Elsewhere reports whether the replay is known to have reached another replica.
func (r Routing) Elsewhere() *bool {
	if r.OriginalReplica == "" || r.ReplayReplica == "" {
		return nil
	}
	b := r.OriginalReplica != r.ReplayReplica
	return &b
}

// Decision is the verdict on one replayed request, with the numbers and words behind it: the
// record's Decision, built by the rules here.
type Decision struct {
	record.Decision
}

// Undecided is the decision on a replay that was never measured, or whose verdict was never
// decided, with why.
func Undecided(why string) *record.Decision {
	d := Decide(Evidence{NotSent: why})
	return &d.Decision
}

// Decide judges a replayed request from all its evidence.
func Decide(e Evidence) Decision {
	var d Decision
	switch {
	case e.NotSent != "":
		d = Decision{record.Decision{Verdict: Invalid, Reason: e.NotSent}}
	case e.Failed:
		d = Decision{record.Decision{Verdict: Invalid, Reason: "the request failed: " + e.Failure}}
	case e.Engine.BySlot && (e.Counters == nil || !e.Counters.Contaminated):
		d = decideBySlot(e)
	case e.Counters == nil:
		why := e.NoCounters
		if why == "" {
			why = "none were scraped"
		}
		d = Decision{record.Decision{Verdict: Invalid, Reason: invalidPrefix(metrics.InvalidScrapeFailed) + why, DecidedBy: ByCounters}}
	default:
		d = decideByCounters(e)
		d.engineNotes(e)
	}
	if c := e.Counters; c != nil && strings.HasPrefix(c.Isolation, "unchecked: ") {
		d.note("isolation %s", c.Isolation)
	}
	if d.Slot == nil && e.Counters != nil && e.Counters.Valid {
		o := e.Offload
		o.RoutedElsewhere, o.OriginalReplica, o.ReplayReplica = e.Routing.Elsewhere(), e.Routing.OriginalReplica, e.Routing.ReplayReplica
		if a := e.Setup; a != nil {
			o.TierHoldsSequence, o.TierTokens, o.UniqueTokens = string(a.TierHoldsSequence), a.CPUTierTokens, a.UniqueTokens
		}
		if d.Verdict == Recompute || d.Verdict == Partial {
			d.Offload = &o
			d.Diagnosis = append(Diagnose(d.Verdict, o), d.Diagnosis...) // counters_disagree stays
		}
	}
	d.crossCheckStore(e)
	d.decideSetup(e)
	d.Interpretation = d.Interpret(e.Setup)
	return d
}

// engineNotes adds what the engine's definition says about a counter-decided verdict: why its
// tier is unknown, and its known counter traps.
func (d *Decision) engineNotes(e Evidence) {
	if e.Engine.RequestTier && e.RequestTier == nil {
		d.note("the response carried no cached_tokens_details: the verdict rests on the counters alone")
	}
	c := e.Counters
	// A reading the parallelism rule could not settle is said, never used silently.
	for _, k := range slices.Sorted(maps.Keys(c.Notes)) {
		d.note("%s: %s", k, c.Notes[k])
	}
	if e.Engine.TierUnknown != "" && d.Verdict == TierUnknown {
		d.Notes = append(d.Notes, e.Engine.TierUnknown)
		if v := c.Delta(metrics.PromptTokensCached); v != nil {
			d.note("the cached prompt token counter moved by %s around the replay", units.Whole(*v))
		}
		if b := c.Delta(metrics.LoadBytes); b != nil && *b > 0 {
			d.note("%s bytes were onboarded host->GPU during the replay, a sign of a host-tier reload, but no counter says how many of its tokens came from which tier", units.Whole(*b))
			if e.Engine.LoadBytesCaveat != "" {
				d.Notes = append(d.Notes, e.Engine.LoadBytesCaveat)
			}
		}
	}
	if e.Engine.ReloadCounterHint != "" {
		m, rl := c.Delta(metrics.MatchedTokens), c.Delta(metrics.ReloadTokens)
		if m != nil && rl != nil && *m > 0 && *rl == 0 {
			d.Notes = append(d.Notes, e.Engine.ReloadCounterHint)
		}
	}
}

func (d *Decision) note(format string, args ...any) {
	d.Notes = append(d.Notes, fmt.Sprintf(format, args...))
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

// CachedFraction is usage's cached tokens over prompt tokens; nil when either is unknown.
func CachedFraction(promptTokens, cachedTokens *int) *float64 {
	if promptTokens == nil || cachedTokens == nil || *promptTokens <= 0 {
		return nil
	}
	f := float64(*cachedTokens) / float64(*promptTokens)
	return &f
}

func abs(x float64) float64 {
	if x < 0 {
		return -x
	}
	return x
}

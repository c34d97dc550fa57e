package verdict

import (
	"fmt"
	"strings"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// WarmShare is the part of a cold request's fresh tokens (those no earlier request of the
// run sent) that must come back cached, beyond its reusable prefix and a block of rounding,
// for the request to count as served from warm caches. Below it the excess can be a hit
// counter's rounding or a scheduler retry counted twice (some vLLM versions); above it only
// caches filled before the run explain it.
const WarmShare = 0.5

// ColdRequest is one request of a cold step: a sequence step, whose prompts no earlier
// request of the run sent beyond their reusable prefix.
type ColdRequest struct {
	Index int
	// PromptTokens is the prompt's size: as the server counted it, else as planned.
	PromptTokens int
	// Reusable is how many of its leading tokens the run itself may have cached before it:
	// the shared prefix, or with nested prompts the largest other prompt it extends.
	Reusable int
	// Cached is how many of its prompt tokens came back cached (usage's cached tokens, else
	// the prefix-cache hits around it); nil when the server said nothing of it.
	Cached *float64
}

// ColdStep is everything known about how cold one cold step's requests were.
type ColdStep struct {
	Step      string
	BlockSize int
	Requests  []ColdRequest
	// By names where the requests' Cached figures come from.
	By string
	// StepHits are the prefix-cache hits over the whole step, the evidence of a step whose
	// requests overlapped on a server that reports no cached tokens per request; nil when
	// unknown, and unused when any request has its own Cached figure.
	StepHits *float64
}

// WarmCaches is the finding that a cold step came back cached beyond anything the run itself
// could have cached: the record's type, which ColdCaches fills.
type WarmCaches = record.WarmCaches

// warmReason says the finding in words, with what to do about it.
func warmReason(w *WarmCaches) string {
	share := 0.0
	if w.PromptTokens > 0 {
		share = w.CachedTokens / w.PromptTokens
	}
	who := fmt.Sprintf("%d of its %d requests came back", w.Requests, w.Of)
	if w.By == ByStepHits {
		who = fmt.Sprintf("its %d requests came back", w.Of)
	}
	return fmt.Sprintf("warm caches: step %s is a cold sequence, yet %s %s cached (%s of %s prompt tokens, %s beyond what the run itself could have cached; %s): %s",
		w.Step, who, units.Fixed(units.Percentage).Places(2).Format(share), units.Whole(w.CachedTokens), units.Whole(w.PromptTokens), units.Whole(w.CachedBeyondReusable), w.By, warmAdvice)
}

// warmAdvice is what warm caches mean and what to do about them.
const warmAdvice = "the server's caches held these prompts before the run, so the step measured cache hits, not stores and evictions. Start from cold caches: restart the server, or give each run fresh bytes (kvbench run --salt random)"

// TraceStep is what a trace step says of how cold it was: the prompt tokens of its measured
// requests and how many came back cached, beside the most any cache could serve of its
// trace.
type TraceStep struct {
	Step      string
	Requests  int
	BlockSize int
	// PromptTokens and CachedTokens are the step's, By names where they come from.
	PromptTokens, CachedTokens float64
	By                         string
	// MaxHitRate is an unbounded cache's hit rate over the trace's window (the ideal's).
	MaxHitRate float64
}

// TraceCaches judges a trace step as ColdCaches judges a sequence: the finding when its
// cached tokens exceed what an unbounded cache could serve of the trace, beyond a block of
// rounding per request, by WarmShare of the tokens no cache could serve; nil otherwise.
func TraceCaches(s TraceStep) *WarmCaches {
	if s.Requests == 0 || s.PromptTokens <= 0 {
		return nil
	}
	allowance := s.MaxHitRate*s.PromptTokens + float64(s.Requests*max(s.BlockSize, 1))
	beyond := s.CachedTokens - allowance
	if beyond <= 0 || beyond < WarmShare*(1-s.MaxHitRate)*s.PromptTokens {
		return nil
	}
	w := WarmCaches{Step: s.Step, Requests: s.Requests, Of: s.Requests, CachedTokens: s.CachedTokens, PromptTokens: s.PromptTokens, CachedBeyondReusable: beyond, By: s.By}
	pct := units.Fixed(units.Percentage).Places(2)
	w.Reason = fmt.Sprintf("warm caches: step %s replays a trace of which any cache could serve at most %s, yet its %d requests came back %s cached (%s of %s prompt tokens, %s beyond the most the trace itself could give; %s): %s",
		s.Step, pct.Format(s.MaxHitRate), s.Requests, pct.Format(s.CachedTokens/s.PromptTokens), units.Whole(s.CachedTokens), units.Whole(s.PromptTokens), units.Whole(beyond), s.By, warmAdvice)
	return &w
}

// Where ColdStep's Cached figures come from.
const (
	ByUsage    = "usage's cached tokens"
	ByHits     = "prefix-cache hits around each request"
	ByStepHits = "prefix-cache hits over the step"
)

// ColdCaches judges a cold step: the finding when its requests came back cached beyond their
// reusable prefixes (each request's excess over its prefix and a block must reach WarmShare
// of its fresh tokens), nil when they did not or nothing says.
func ColdCaches(s ColdStep) *WarmCaches {
	block := float64(max(s.BlockSize, 1))
	w := WarmCaches{Step: s.Step, Of: len(s.Requests), By: s.By}
	var perRequest bool
	var allowance, fresh, prompt float64
	for _, q := range s.Requests {
		allow := float64(q.Reusable) + block
		allowance += allow
		fresh += float64(max(q.PromptTokens-q.Reusable, 0))
		prompt += float64(q.PromptTokens)
		if q.Cached == nil {
			continue
		}
		perRequest = true
		beyond := *q.Cached - allow
		if beyond > 0 && beyond >= WarmShare*float64(q.PromptTokens-q.Reusable) {
			w.Requests++
			w.CachedTokens += *q.Cached
			w.PromptTokens += float64(q.PromptTokens)
			w.CachedBeyondReusable += beyond
		}
	}
	switch {
	case perRequest && w.Requests > 0:
		w.Reason = warmReason(&w)
		return &w
	case perRequest || s.StepHits == nil || len(s.Requests) == 0:
		return nil
	}
	beyond := *s.StepHits - allowance
	if beyond <= 0 || beyond < WarmShare*fresh {
		return nil
	}
	w.Requests, w.CachedTokens, w.PromptTokens, w.CachedBeyondReusable, w.By = w.Of, *s.StepHits, prompt, beyond, ByStepHits
	w.Reason = warmReason(&w)
	return &w
}

// warmSetupReason says why warm caches make a replay's setup unable to prove a reload.
func warmSetupReason(ws []WarmCaches) string {
	var parts []string
	for i := range ws {
		parts = append(parts, ws[i].Reason)
	}
	return strings.Join(parts, "; ")
}

package record

import (
	"encoding/json"
	"time"
)

// Counter is the normalized name of a monotonic counter kvbench reads (the names are
// package metrics' constants).
type Counter string

// Invalidity is the kind of reason a measured change of the counters cannot be trusted;
// each gets its own wording where a verdict names it.
type Invalidity string

// Kinds of invalidity.
const (
	InvalidReset        Invalidity = "reset"         // a counter went down: the server restarted
	InvalidMissing      Invalidity = "missing"       // a counter the change needs was not read
	InvalidScrapeFailed Invalidity = "scrape_failed" // a scrape the change needs failed
	InvalidContaminated Invalidity = "contaminated"  // other clients' requests moved the counters
)

// Counters is the change of every normalized counter across one measured span: the scrapes
// before and after an isolated request, around a step whose requests overlapped, or several
// consecutive spans joined (Join). An absent side is never 0; a counter that went down, or
// read NaN, is unusable and says why.
type Counters struct {
	BeforeAt time.Time                 `json:"before_at,omitzero"`
	AfterAt  time.Time                 `json:"after_at,omitzero"`
	Values   map[Counter]CounterChange `json:"counters"`
	// Valid is false when any reason below holds (a counter went down on a restart, a scrape
	// failed...): no change of this span can then be trusted.
	Valid          bool     `json:"valid"`
	InvalidReasons []string `json:"invalid_reasons,omitempty"`
	// InvalidKinds[i] is the kind of InvalidReasons[i].
	InvalidKinds []Invalidity `json:"invalid_kinds,omitempty"`
	// Contaminated: the counters moved by more than the measured request(s) account for, so
	// other clients' requests ran inside the span.
	Contaminated bool `json:"contaminated,omitempty"`
	// Isolation is the check that the span saw only the measured request: "clean: ...",
	// "contaminated: ..." or "unchecked: ..." with what was compared; "" when not checked.
	Isolation string `json:"isolation,omitempty"`
	// Unattributed are the changes under label values the engine's model does not know.
	Unattributed []Unattributed `json:"unattributed,omitempty"`
}

// CounterChange is one counter's readings on both sides of a span. Written as
//
//	{"before": 0, "after": 98304, "delta": 98304, "present": true, "decreased": false,
//	 "source": "vllm:external_prefix_cache_hits_total"}
//
// with before, after and delta null where a side is absent.
type CounterChange struct {
	Before, After *float64
	// Source is the metric the after side was read from (the before side's when the after
	// side is absent); SourceBefore the before side's when it differs.
	Source       string
	SourceBefore string
	// Decreased: the change is unusable (it went down on a restart, or a scrape in between
	// is missing); Unreadable: a side read NaN or Inf. Reason says which.
	Decreased  bool
	Unreadable bool
	Reason     string
	// Resolution is the step the server's printed values move by where it prints fewer
	// digits than they have (llama.cpp above 10^6): the delta is only good to a step.
	Resolution float64
	// Note is what a reader must know of the readings (ranks of one replica that disagree,
	// a family summed over ranks of unknown count: metrics.Parallelism); "" when nothing.
	Note string
}

// BeforeSource is the metric the before side was read from.
func (cc CounterChange) BeforeSource() string {
	if cc.SourceBefore != "" {
		return cc.SourceBefore
	}
	return cc.Source
}

// Present reports whether both sides were read.
func (cc CounterChange) Present() bool { return cc.Before != nil && cc.After != nil }

// Delta is after - before, nil unless both sides were read.
func (cc CounterChange) Delta() *float64 {
	if !cc.Present() {
		return nil
	}
	d := *cc.After - *cc.Before
	return &d
}

type counterChangeJSON struct {
	Before       *float64 `json:"before"`
	After        *float64 `json:"after"`
	Delta        *float64 `json:"delta"`
	Present      bool     `json:"present"`
	Decreased    bool     `json:"decreased"`
	Unreadable   bool     `json:"unreadable,omitempty"`
	Reason       string   `json:"reason,omitempty"`
	Source       string   `json:"source,omitempty"`
	SourceBefore string   `json:"source_before,omitempty"`
	Resolution   float64  `json:"resolution,omitempty"`
	Note         string   `json:"note,omitempty"`
}

// MarshalJSON writes the shape documented on CounterChange.
func (cc CounterChange) MarshalJSON() ([]byte, error) {
	return json.Marshal(counterChangeJSON{Before: cc.Before, After: cc.After, Delta: cc.Delta(), Present: cc.Present(),
		Decreased: cc.Decreased, Unreadable: cc.Unreadable, Reason: cc.Reason, Source: cc.Source, SourceBefore: cc.SourceBefore, Resolution: cc.Resolution, Note: cc.Note})
}

// UnmarshalJSON reads what MarshalJSON writes; the delta is recomputed, not trusted.
func (cc *CounterChange) UnmarshalJSON(data []byte) error {
	var j counterChangeJSON
	if err := json.Unmarshal(data, &j); err != nil {
		return err
	}
	*cc = CounterChange{Before: j.Before, After: j.After, Source: j.Source, SourceBefore: j.SourceBefore,
		Decreased: j.Decreased, Unreadable: j.Unreadable, Reason: j.Reason, Resolution: j.Resolution, Note: j.Note}
	return nil
}

// Value returns k's change and whether it can be used: read on both sides and usable.
func (c *Counters) Value(k Counter) (float64, bool) {
	if c == nil {
		return 0, false
	}
	cc, ok := c.Values[k]
	if !ok || !cc.Present() || cc.Decreased {
		return 0, false
	}
	return *cc.After - *cc.Before, true
}

// Delta is k's usable change, nil when absent or unusable.
func (c *Counters) Delta(k Counter) *float64 {
	v, ok := c.Value(k)
	if !ok {
		return nil
	}
	return &v
}

// Before and After are k's readings on each side, nil when absent.
func (c *Counters) Before(k Counter) *float64 {
	if c == nil {
		return nil
	}
	return c.Values[k].Before
}

// After is k's reading after the span, nil when absent.
func (c *Counters) After(k Counter) *float64 {
	if c == nil {
		return nil
	}
	return c.Values[k].After
}

// Unreadable is why k cannot be used although the server serves it (a side read NaN or
// Inf); "" otherwise.
func (c *Counters) Unreadable(k Counter) string {
	if c == nil || !c.Values[k].Unreadable {
		return ""
	}
	return c.Values[k].Reason
}

// PerToken divides one counter's change by another's, e.g. load bytes per external hit;
// nil when either is unusable or no token moved.
func (c *Counters) PerToken(bytes, tokens Counter) *float64 {
	b, ok1 := c.Value(bytes)
	t, ok2 := c.Value(tokens)
	if !ok1 || !ok2 || t <= 0 {
		return nil
	}
	v := b / t
	return &v
}

// Invalidate marks c invalid for reason.
func (c *Counters) Invalidate(kind Invalidity, reason string) {
	c.Valid = false
	c.InvalidReasons = append(c.InvalidReasons, reason)
	c.InvalidKinds = append(c.InvalidKinds, kind)
}

// InvalidateAll marks c invalid for reason and every change unusable: the scrapes it spans
// miss part of what it claims to cover, so no change in it can be trusted.
func (c *Counters) InvalidateAll(kind Invalidity, reason string) {
	c.Invalidate(kind, reason)
	for k, cc := range c.Values {
		if cc.Present() && !cc.Decreased {
			cc.Decreased, cc.Reason = true, reason
			c.Values[k] = cc
		}
	}
}

// Contaminate marks c as moved by other clients' requests.
func (c *Counters) Contaminate(reason string) {
	c.Contaminated = true
	c.Isolation = "contaminated: " + reason
	c.Invalidate(InvalidContaminated, reason)
}

// FirstInvalid is the first reason c is invalid and its kind; "" when c is valid.
func (c *Counters) FirstInvalid() (Invalidity, string) {
	if c.Valid || len(c.InvalidReasons) == 0 {
		return "", ""
	}
	kind := InvalidReset // records written before kinds existed knew only restarts
	if len(c.InvalidKinds) > 0 {
		kind = c.InvalidKinds[0]
	}
	return kind, c.InvalidReasons[0]
}

package runner

import (
	"fmt"
	"io"
	"maps"
	"slices"
	"strings"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/internal/termsafe"
)

// Console is the sink that reports a run to a person as it goes: on a terminal one live line
// per request (state, tokens, elapsed), rewritten in place; elsewhere plain lines a log can
// keep. A nil Console, or one with a nil writer, is quiet. It never stops a run: a console
// that cannot write stays quiet, and the records are the result.
type Console struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	live bool // a live line is on screen
	// prefilling is the request whose prefill is being ticked (the client reports nothing
	// between sending and the first output, which on a 150k prompt can be a minute).
	prefilling *events.RequestProgress
	// traceTenths is, per trace step, the tenths of its requests reported in plain lines,
	// and traceFinal whether its closing line is out (each once per step, repeats included).
	traceTenths map[string]int
	traceFinal  map[string]bool
	// started is when the run began; steps and requests are how many of its steps and
	// requests are done: the run's progress at each step's start.
	started         time.Time
	steps, requests int
}

var _ events.Sink = (*Console)(nil)

// tickInterval is how often a prefilling request's elapsed time is redrawn.
const tickInterval = 250 * time.Millisecond

// NewConsole writes to w; tty selects live lines.
func NewConsole(w io.Writer, tty bool) *Console { return &Console{w: w, tty: tty} }

// Handle shows e.
func (c *Console) Handle(e events.Event) error {
	if c == nil || c.w == nil {
		return nil
	}
	switch e := e.(type) {
	case events.Note:
		c.Printf("%s", e.Text)
	case events.RunStarted:
		c.mu.Lock()
		c.started = e.Started
		c.mu.Unlock()
	case events.StepStarted:
		c.stepStarted(e)
	case events.RequestProgress:
		c.progress(e)
	case events.TraceProgress:
		c.traceProgress(e)
	case events.RequestDone:
		c.requestDone(e.Request)
	case events.StepDone:
		c.mu.Lock()
		c.steps++
		c.mu.Unlock()
		c.stepDone(e.Step)
		c.warmCaches(e)
		c.reloadEvidence(e)
	}
	return nil
}

// Printf writes a plain line. Its arguments may be a server's text (model ids, error bodies,
// stream errors): they are printed inert, escapes and line breaks written as \x1b and \n.
func (c *Console) Printf(format string, args ...any) {
	if c == nil || c.w == nil {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	c.clearLive()
	fmt.Fprintf(c.w, format+"\n", termsafe.Args(args)...)
}

func (c *Console) clearLive() {
	if c.live {
		fmt.Fprint(c.w, "\r\033[K")
		c.live = false
	}
}

func (c *Console) liveLine(text string) {
	if !c.tty {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprint(c.w, "\r\033[K"+text)
	c.live = true
}

// progress updates a request's live line.
func (c *Console) progress(p events.RequestProgress) {
	if !c.tty {
		return
	}
	c.mu.Lock()
	switch {
	case p.State == events.Prefilling && c.prefilling == nil:
		c.prefilling = &p
		go c.tickPrefill(&p, time.Now().Add(-p.Elapsed))
	case p.State != events.Prefilling:
		c.prefilling = nil
	}
	c.mu.Unlock()
	c.liveLine(progressText(p, p.Elapsed))
}

func (c *Console) tickPrefill(p *events.RequestProgress, start time.Time) {
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for range t.C {
		c.mu.Lock()
		if c.prefilling != p {
			c.mu.Unlock()
			return
		}
		// Drawn under the same lock as the check, so no tick lands after the closing line.
		fmt.Fprint(c.w, "\r\033[K"+progressText(*p, time.Since(start)))
		c.live = true
		c.mu.Unlock()
	}
}

func progressText(p events.RequestProgress, elapsed time.Duration) string {
	switch p.State {
	case events.Waiting:
		return fmt.Sprintf("  [%d] %d/%d tokens  waiting for idle", p.IndexInStep, p.PlannedTokens, p.PromptTokens)
	case events.Sent:
		return fmt.Sprintf("  [%d] %d/%d tokens  sent", p.IndexInStep, p.PlannedTokens, p.PromptTokens)
	}
	return fmt.Sprintf("  [%d] %d/%d tokens  %6ss  %-7s  %d tokens out", p.IndexInStep, p.PlannedTokens, p.PromptTokens, units.Sec(elapsed.Seconds()), p.State, p.Tokens)
}

// stepStarted names the step and, in a run of several steps (a curve's points, repeats),
// how far the run has got: steps done of all, their share, the requests' rate, the ETA.
func (c *Console) stepStarted(e events.StepStarted) {
	c.mu.Lock()
	if c.started.IsZero() {
		c.started = time.Now()
	}
	delete(c.traceTenths, e.Step) // a repetition runs the step again: its progress anew
	delete(c.traceFinal, e.Step)
	total := e.Steps * max(e.Repetitions, 1)
	progress := ""
	if total > 1 {
		progress = " [" + ProgressText(c.steps, total, "steps done", c.requests, time.Since(c.started)) + "]"
	}
	c.mu.Unlock()
	c.Printf("step %s: %s%s", e.Step, e.Describes, progress) // "step ID: " leads, as it always did
}

// traceProgress shows a trace step's progress: on a terminal a live line redrawn at each
// report; elsewhere a plain line at each tenth of the requests short of the end, and the
// closing line once.
func (c *Console) traceProgress(p events.TraceProgress) {
	text := traceProgressText(p)
	if c.tty && !p.Final {
		c.liveLine(text)
		return
	}
	c.mu.Lock()
	if c.traceTenths == nil {
		c.traceTenths, c.traceFinal = map[string]int{}, map[string]bool{}
	}
	tenth := 10
	if p.Total > 0 {
		tenth = 10 * p.Done / p.Total
	}
	due := tenth > c.traceTenths[p.Step] && tenth < 10 // all done: the closing line says it
	if p.Final {
		due = !c.traceFinal[p.Step]
		c.traceFinal[p.Step] = true
	}
	if due {
		c.traceTenths[p.Step] = tenth
	}
	c.mu.Unlock()
	if due {
		c.Printf("%s", text)
	}
}

func traceProgressText(p events.TraceProgress) string {
	failed := ""
	if p.Failed > 0 {
		failed = fmt.Sprintf(" (%d failed)", p.Failed)
	}
	tiers := "tiers: no reading yet"
	if t := p.Tiers; t.Source != "" {
		sh := units.Fixed(units.Percentage) // absent where the server exposes no counter
		tiers = fmt.Sprintf("GPU %s, host %s, recompute %s of prompt tokens", sh.Value(t.GPU), sh.Value(t.Host), sh.Value(t.Recompute))
		if t.Source == record.TierBySlotHistory {
			tiers = fmt.Sprintf("live slot %s, host cache %s, recompute %s of prompt tokens (inferred from usage and the slot's history)", sh.Value(t.GPU), sh.Value(t.Host), sh.Value(t.Recompute))
		}
	}
	lag := units.Scale(units.Milliseconds, p.LagP50MS, p.LagP99MS)
	return fmt.Sprintf("  trace %s: %s%s, %d in flight, %ss, dispatch lag p50 %s ms p99 %s ms, %s",
		p.Step, ProgressText(p.Done, p.Total, "requests", p.Done, p.Elapsed), failed, p.InFlight, units.Whole(p.Elapsed.Seconds()), lag.Format(p.LagP50MS), lag.Format(p.LagP99MS), tiers)
}

// shareText words a tier share; absent when the server does not expose its counter.
func shareText(v *float64) string {
	if v == nil {
		return units.Absent
	}
	return units.Share(*v)
}

// requestDone prints a request's closing line; a trace step's requests, which come by the
// thousand, only when they fail or another model answered (the step's progress line counts
// the others).
func (c *Console) requestDone(r record.Request) {
	c.mu.Lock()
	c.prefilling = nil
	c.requests++
	c.mu.Unlock()
	res := r.Result
	if r.Trace != nil && !res.Failed() && !res.ModelMismatch() {
		return
	}
	line := fmt.Sprintf("  [%d] planned %d, prompt %s, cached %s, ttft %s, e2e %s, out %d",
		r.IndexInStep, r.PlannedTokens, units.Int(res.PromptTokens), units.Int(res.CachedPromptTokens),
		units.MS(res.TimeToFirstOutputMS), units.MS(res.EndToEndMS), res.OutputTokens)
	if res.InterTokenMS != nil {
		line += fmt.Sprintf(", itl p50 %s ms", units.Scale(units.Milliseconds, res.InterTokenMS.Median).Format(res.InterTokenMS.Median))
	}
	if res.BatchedChunks > 0 {
		// Chunks that shared a read have no measurable gap: say so rather than time it as 0.
		line += fmt.Sprintf(" (%d of %d chunks batched, their gaps not measurable)", res.BatchedChunks, res.GeneratedChunks)
	}
	if r.ColdTwin != nil {
		line += ", cold twin (" + r.ColdTwin.Mechanism + ")"
	}
	if res.Failed() {
		line += fmt.Sprintf("  FAILED (%s): %s", res.ErrorKind, res.Error)
	} else if res.ReasoningOnly {
		line += "  reasoning only"
	}
	if res.ModelMismatch() {
		line += "  " + res.ModelMismatchNote()
	}
	if r.CountersError != "" {
		line += "  counters: " + r.CountersError
	}
	c.Printf("%s", line)
}

// stepDone prints a replay's verdict, a trace step's finding, and why the step's counters
// are missing or invalid.
func (c *Console) stepDone(s derive.Step) {
	if s.Kind == record.KindTrace {
		ts := derive.TraceOf(s, "")
		c.Printf("  trace %s: %d of %d requests sent, %d failed, %d dropped over max_input_tokens; TTFT p90 %s ms, dispatch lag p99 %s ms",
			s.Step, ts.Requests, ts.PlannedRequests, ts.FailedRequests, ts.DroppedRequests, units.MS(ts.TTFTMS.P90), units.MS(ts.DispatchLagMS.P99))
		c.Printf("  %s", ts.Finding)
		if b := ts.DispatchBehind; b != nil {
			c.Printf("  %s", b.Finding)
		}
	}
	for _, r := range s.Requests {
		if v := r.Verdict; v != nil {
			c.Printf("  verdict %s: %s", v.Verdict, v.Reason)
			for _, d := range v.Diagnosis {
				c.Printf("  diagnosis %s: %s", d.Cause, d.Detail)
			}
			if t := v.TierSplit; t != nil {
				c.tierSplit(*t)
			}
			// A reading the parallelism rule could not settle is said where its verdict is.
			if cs := r.Counters; cs != nil {
				for _, k := range slices.Sorted(maps.Keys(cs.Values)) {
					if n := cs.Values[k].Note; n != "" {
						c.Printf("  counter %s: %s", k, n)
					}
				}
			}
		}
		if r.Counters != nil {
			for _, u := range r.Counters.Unattributed {
				if u.Delta != nil && *u.Delta != 0 {
					c.Printf("  unattributed: %s", u.Sentence())
				}
			}
		}
	}
	if s.SpanError != "" {
		c.Printf("  step counters not read: %s", s.SpanError)
	} else if s.Span != nil && !s.Span.Valid {
		c.Printf("  step counters invalid: %s", strings.Join(s.Span.InvalidReasons, "; "))
	}
	if s.Interrupted {
		c.Printf("  interrupted: %d requests measured", len(s.Requests))
	}
	if cc := s.Client; cc != nil {
		per := ""
		if cc.CPUMSPer1kOutputTokens != nil {
			per = fmt.Sprintf(", %s ms per 1k output tokens", units.MS(cc.CPUMSPer1kOutputTokens))
		}
		c.Printf("  client (kvbench) CPU: %s ms, %s cores%s", units.Whole(cc.CPUMS), units.Number(cc.Cores), per)
	}
}

// warmCaches says loudly when a cold step came back cached: the run is measuring an
// earlier run's caches.
func (c *Console) warmCaches(e events.StepDone) {
	if e.Record == nil {
		return
	}
	for _, rep := range e.Record.Repetitions {
		if rep.Index == e.Repetition && e.Index < len(rep.Sections) {
			if s := rep.Sections[e.Index].Sequence; s != nil && s.WarmCaches != nil {
				c.Printf("  WARM CACHES: %s", s.WarmCaches.Reason)
			}
			if s := rep.Sections[e.Index].Trace; s != nil && s.WarmCaches != nil {
				c.Printf("  WARM CACHES: %s", s.WarmCaches.Reason)
			}
		}
	}
}

// tierSplit prints a replay's prompt tokens by tier as a table: the parts, their sum and the
// prompt they must add up to.
func (c *Console) tierSplit(t record.RequestTiers) {
	cell := func(p *float64) string {
		if p == nil {
			return units.Absent
		}
		return units.Whole(*p)
	}
	adds := "cannot be summed"
	switch {
	case t.AddsUp != nil && *t.AddsUp:
		adds = "adds up"
	case t.AddsUp != nil:
		adds = "DOES NOT ADD UP"
	}
	c.Printf("  %-12s %10s %10s %10s %10s %10s %10s %10s", "tier split", "gpu", "host", "disk", "remote", "recomputed", "sum", "prompt")
	c.Printf("  %-12s %10s %10s %10s %10s %10s %10s %10s  %s (recomputed from %s)", "tokens", cell(t.GPU), cell(t.Host), cell(t.Disk), cell(t.Remote),
		cell(t.Recomputed), cell(t.Sum), units.Int(t.PromptTokens), adds, units.Text(t.RecomputedFrom))
}

package runner

import (
	"fmt"
	"io"
	"strings"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/termsafe"
)

// Console reports a run as it goes: on a terminal one live line per request (phase, tokens,
// elapsed), rewritten in place; elsewhere plain lines a log can keep. A nil writer is quiet.
type Console struct {
	w    io.Writer
	tty  bool
	mu   sync.Mutex
	live bool // a live line is on screen
	// prefilling is the request whose prefill is being ticked (the client reports nothing
	// between sending and the first output, which on a 150k prompt can be a minute).
	prefilling *plan.Request
	// onDone runs first in RequestDone, the one call every path makes when a request ends:
	// the runner journals the request there.
	onDone func(record.Request)
}

// tickInterval is how often a prefilling request's elapsed time is redrawn.
const tickInterval = 250 * time.Millisecond

// NewConsole writes to w; tty selects live lines.
func NewConsole(w io.Writer, tty bool) *Console { return &Console{w: w, tty: tty} }

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
	if c == nil || c.w == nil || !c.tty {
		return
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	fmt.Fprint(c.w, "\r\033[K"+text)
	c.live = true
}

// withRequestDone returns a console writing where c does that hands every finished request
// to f before printing it.
func (c *Console) withRequestDone(f func(record.Request)) *Console {
	return &Console{w: c.w, tty: c.tty, onDone: f}
}

// StepStart announces a step.
func (c *Console) StepStart(st plan.Step) {
	kind := fmt.Sprintf("%d requests, concurrency %d", len(st.Requests), st.Step.Concurrency)
	if st.Step.Replay != nil {
		kind = fmt.Sprintf("replay of %s[%d]", st.Step.Replay.Step, st.Step.Replay.Request)
	}
	if st.Step.IsConversation() {
		kind = fmt.Sprintf("conversation, %d users x %d turns", st.Step.Users, st.Step.Turns)
	}
	c.Printf("step %s: %s", st.ID, kind)
}

// Waiting shows that a request waits for the server to be idle.
func (c *Console) Waiting(req plan.Request) {
	c.liveLine(fmt.Sprintf("  [%d] %d/%d tokens  waiting for idle", req.IndexInStep, req.PlannedTokens, req.Prompt.Tokens))
}

// Sending shows a request of a concurrent step going out (plain mode only logs completions).
func (c *Console) Sending(req plan.Request) {
	c.liveLine(fmt.Sprintf("  [%d] %d/%d tokens  sent", req.IndexInStep, req.PlannedTokens, req.Prompt.Tokens))
}

// Progress updates a request's live line.
func (c *Console) Progress(req plan.Request, p client.Progress) {
	if c == nil || !c.tty {
		return
	}
	c.mu.Lock()
	switch {
	case p.Phase == client.PhasePrefill && c.prefilling == nil:
		c.prefilling = &req
		go c.tickPrefill(&req, time.Now().Add(-p.Elapsed))
	case p.Phase != client.PhasePrefill:
		c.prefilling = nil
	}
	c.mu.Unlock()
	if p.Phase != client.PhaseDone {
		c.liveLine(progressText(req, p))
	}
}

func (c *Console) tickPrefill(req *plan.Request, start time.Time) {
	t := time.NewTicker(tickInterval)
	defer t.Stop()
	for range t.C {
		c.mu.Lock()
		if c.prefilling != req {
			c.mu.Unlock()
			return
		}
		// Drawn under the same lock as the check, so no tick lands after the closing line.
		fmt.Fprint(c.w, "\r\033[K"+progressText(*req, client.Progress{Phase: client.PhasePrefill, Elapsed: time.Since(start)}))
		c.live = true
		c.mu.Unlock()
	}
}

func progressText(req plan.Request, p client.Progress) string {
	return fmt.Sprintf("  [%d] %d/%d tokens  %6.1fs  %-7s  %d tokens out", req.IndexInStep, req.PlannedTokens, req.Prompt.Tokens, p.Elapsed.Seconds(), p.Phase, p.Tokens)
}

// RequestDone prints a request's closing line.
func (c *Console) RequestDone(r record.Request) {
	if c != nil && c.onDone != nil {
		c.onDone(r)
	}
	if c != nil {
		c.mu.Lock()
		c.prefilling = nil
		c.mu.Unlock()
	}
	res := r.Result
	line := fmt.Sprintf("  [%d] planned %d, prompt %s, cached %s, ttft %s, e2e %s, out %d",
		r.IndexInStep, r.PlannedTokens, intOr(res.PromptTokens, "?"), intOr(res.CachedPromptTokens, "absent"),
		record.FormatMS(res.TimeToFirstOutputMS), record.FormatMS(res.EndToEndMS), res.OutputTokens)
	if res.InterTokenMS != nil {
		line += fmt.Sprintf(", itl p50 %.2f ms", res.InterTokenMS.Median)
	}
	if res.BatchedChunks > 0 {
		// Chunks that shared a read have no measurable gap: say so rather than time it as 0.
		line += fmt.Sprintf(" (%d of %d chunks batched, their gaps not measurable)", res.BatchedChunks, res.GeneratedChunks)
	}
	if res.Failed() {
		line += fmt.Sprintf("  FAILED (%s): %s", res.ErrorKind, res.Error)
	} else if res.ReasoningOnly {
		line += "  reasoning only"
	}
	if r.CountersError != "" {
		line += "  counters: " + r.CountersError
	}
	c.Printf("%s", line)
}

// StepDone prints a replay's verdict, and why the step's counters are missing or invalid.
func (c *Console) StepDone(a record.StepArtifact) {
	for _, r := range a.Requests {
		if r.Verdict != nil {
			c.Printf("  verdict %s: %s", r.Verdict.Verdict, r.Verdict.Reason)
			for _, d := range r.Verdict.Diagnosis {
				c.Printf("  diagnosis %s: %s", d.Cause, d.Detail)
			}
		}
	}
	if a.CountersError != "" {
		c.Printf("  step counters not read: %s", a.CountersError)
	} else if a.Counters != nil && !a.Counters.Delta.Valid {
		c.Printf("  step counters invalid: %s", strings.Join(a.Counters.Delta.InvalidReasons, "; "))
	}
	if a.Interrupted {
		c.Printf("  interrupted: %d requests measured", len(a.Requests))
	}
	if cc := a.Client; cc != nil {
		per := ""
		if cc.CPUMSPer1kOutputTokens != nil {
			per = fmt.Sprintf(", %.1f ms per 1k output tokens", *cc.CPUMSPer1kOutputTokens)
		}
		c.Printf("  client (kvbench) CPU: %.0f ms, %.2f cores%s", cc.CPUMS, cc.Cores, per)
	}
}

func b2i(b bool) int {
	if b {
		return 1
	}
	return 0
}

func intOr(p *int, absent string) string {
	if p == nil {
		return absent
	}
	return fmt.Sprint(*p)
}

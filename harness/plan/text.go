package plan

import (
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/prompts"
)

// WriteText prints the plan for a person: the token counting, the shared prefix, a row per
// request with its prompt identity, and each replay's capacity math.
func (p *Plan) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { p.writeText(w) })
}

// writeText writes what WriteText writes.
func (p *Plan) writeText(w io.Writer) {
	sc := p.Scenario
	fmt.Fprintf(w, "scenario %s (%s)\n  %s\n", sc.Name, sc.Path, sc.Description)
	switch p.TokenCounting {
	case prompts.Estimated:
		fmt.Fprintf(w, "token counting: estimate (%d bytes per token, no server calls); real tokenizers differ\n", prompts.EstimateBytesPerToken)
	default:
		fmt.Fprintf(w, "token counting: server /tokenize at %s (model %s); prefix sized in %d calls\n", redact.URL(client.RootURL(sc.Target.Endpoint)), sc.Target.Model, p.PrefixCountCalls)
	}
	if def, err := engine.ByName(sc.Target.Backend); err == nil && def.TierUnknown != "" {
		fmt.Fprintf(w, "tier: %s\n", def.TierUnknown)
	}
	if len(p.Steps) > 0 && len(p.Steps[0].Requests) > 0 {
		pr := p.Steps[0].Requests[0].Prompt
		salt := ""
		if sc.Prompt.Salt != "" {
			salt = ", salt " + sc.Prompt.Salt
		}
		fmt.Fprintf(w, "shared prefix: %d tokens planned, %d counted, sha256 %s (mode %s, seed %d%s)\n\n",
			sc.Prompt.SharedPrefixTokens, pr.SharedPrefixTokens, pr.SharedPrefixSHA256, sc.Prompt.Mode, sc.Prompt.Seed, salt)
	}
	if p.requestCount() > 0 {
		tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', tabwriter.AlignRight)
		fmt.Fprintln(tw, "STEP\tREQ\tPROMPT\tPLANNED\tTOKENS\tCALLS\tIDENTITY (sha256)\t")
		for _, st := range p.Steps {
			for _, r := range st.Requests {
				note := ""
				if r.Replay {
					note = fmt.Sprintf("  replay of %s[%d]", st.Step.Replay.Step, st.Step.Replay.Request)
				} else if r.Prompt.TokenCounting == prompts.CountedByServer && !r.Prompt.WithinTolerance {
					note = fmt.Sprintf("  off plan by more than %d tokens", r.Prompt.ToleranceTokens)
				}
				fmt.Fprintf(tw, "%s\t%d\t%d\t%d\t%d\t%d\t%s\t%s\n", st.ID, r.IndexInStep, r.Ordinal, r.PlannedTokens, r.Prompt.Tokens, r.Prompt.CountCalls, r.Prompt.Identity, note)
			}
		}
		tw.Flush()
	}
	for _, st := range p.Steps {
		if t := st.Trace; t != nil {
			t.WriteText(w, st)
		}
		if c := st.Step; c.IsConversation() {
			fmt.Fprintf(w, "\nconversation %s: %d users x %d turns, %d-token shared system prompt, %d new tokens a turn, up to %d max_tokens an answer carried into the next turn; the last turn resends about %d tokens (built as the answers arrive, estimated)\n",
				st.ID, c.Users, c.Turns, c.SystemPromptTokens, c.TurnTokens, sc.MaxTokensFor(c), sc.ConversationTokens(c))
		}
	}
	for _, c := range sc.Curves {
		var sizes []string
		for _, pt := range c.Points {
			sizes = append(sizes, units.Grouped(pt.Tokens))
		}
		fmt.Fprintf(w, "\nreload curve %s: prompts of %s tokens (to max_model_len %s, %s); each is stored, evicted by %d prompts of %s unique tokens in all (the %s-token GPU pool, %s, and a margin), replayed and recomputed by its cold twin\n",
			c.ID, strings.Join(sizes, ", "), units.Grouped(c.MaxModelLen), c.MaxModelLenSource, c.EvictionRequests, units.Grouped(c.EvictionTokens), units.Grouped(c.GPUKVTokens), c.GPUKVTokensSource)
	}
	for _, rp := range p.Replays {
		rp.writeText(w)
	}
	for _, warning := range p.Warnings {
		fmt.Fprintf(w, "\nwarning: %s\n", warning)
	}
}

// requestCount is how many requests the plan built up front (trace and conversation steps
// build theirs as they run).
func (p *Plan) requestCount() int {
	n := 0
	for _, st := range p.Steps {
		n += len(st.Requests)
	}
	return n
}

// WriteText prints what a trace step will send.
func (t *TracePlan) WriteText(w io.Writer, st Step) {
	c := st.Step
	fmt.Fprintf(w, "\ntrace %s: %d requests from %s (named by the %s, sha256 %s), %s; %d dropped over max_input_tokens\n",
		st.ID, t.Requests, t.File, t.NamedBy, t.SHA256, t.Window, t.Dropped)
	fmt.Fprintf(w, "  %d prompt tokens in blocks of %d, %d output tokens asked (output_length, at least 1 each), the longest request %d tokens; prompts as %s\n",
		t.PromptTokens, t.BlockTokens, t.OutputTokens, t.LongestRequestTokens, t.PromptForm)
	if f := t.Format; f != nil && (f.Format != "mooncake" || f.Gzip || !f.PrefixInformation) {
		fmt.Fprintf(w, "  format %s, fields: %s\n", f.Format, strings.Join(f.Fields, ", "))
		if !f.PrefixInformation {
			fmt.Fprintf(w, "  no prefix information (no line names its blocks): the ideal is unknown\n")
		}
	}
	if c.ClosedLoop() {
		fmt.Fprintf(w, "  closed loop: in trace order, %d in flight\n", c.Concurrency)
	} else {
		fmt.Fprintf(w, "  open loop: at the trace's timestamps x %s, %s s of trace time in %s s\n", units.Exact(c.TimeScale), units.Sec(t.SpanSeconds), units.Sec(t.SpanSeconds*c.TimeScale))
	}
}

// WriteText prints the replay's capacity math and whether the setup can prove a reload.
func (rp Replay) WriteText(w io.Writer) error {
	return textout.Write(w, func(w io.Writer) { rp.writeText(w) })
}

// writeText writes what WriteText writes.
func (rp Replay) writeText(w io.Writer) {
	a := rp.Assessment
	s := a.Setup
	fmt.Fprintf(w, "\ncapacity for step %s (replay of %s request %d):\n", rp.Step, rp.Of.Step, rp.Of.Request)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if s.Topology == capacity.SingleSlot {
		writeSingleSlot(tw, a)
		writeFindings(w, a)
		return
	}
	if s.GPUKVTokens > 0 {
		bytes := ""
		if a.GPUPoolBytes > 0 {
			bytes = fmt.Sprintf(" = %s at %s bytes/token", units.GiBs(a.GPUPoolBytes), units.Whole(s.StoreBytesPerToken))
		}
		fmt.Fprintf(tw, "  GPU KV pool\t%d tokens (%s)%s\n", s.GPUKVTokens, s.GPUKVTokensSource, bytes)
	} else {
		fmt.Fprintf(tw, "  GPU KV pool\tunknown until the server reports it\n")
	}
	tier := fmt.Sprintf("%s GiB = %s bytes", units.Exact(s.CPUOffloadGiB), units.Whole(a.CPUTierBytes))
	if s.HostTierTokens > 0 {
		tier = fmt.Sprintf("%d tokens (%s)", s.HostTierTokens, s.HostTierTokensSource)
	} else if a.CPUTierTokens > 0 {
		tier += fmt.Sprintf(" = about %s tokens", units.Whole(a.CPUTierTokens))
	}
	fmt.Fprintf(tw, "  CPU tier\t%s\n", tier)
	fmt.Fprintf(tw, "  unique tokens\t%d from the replayed request on\n", a.UniqueTokens)
	fmt.Fprintf(tw, "  eviction pressure\t%s\n", a.EvictionPressure)
	fmt.Fprintf(tw, "  tier > GPU pool\t%s\n", a.TierLargerThanGPU)
	fmt.Fprintf(tw, "  tier holds sequence\t%s\n", a.TierHoldsSequence)
	fmt.Fprintf(tw, "  can prove a reload\t%s\n", a.CanProveReload)
	tw.Flush()
	writeFindings(w, a)
}

// writeSingleSlot prints the math of an engine with one live slot per sequence: the slot's
// context, the host tier and the prompt state saved since the replayed request.
func writeSingleSlot(tw *tabwriter.Writer, a capacity.Assessment) {
	s := a.Setup
	slots := "1 (assumed until the server reports it)"
	if s.Slots > 0 {
		slots = fmt.Sprint(s.Slots)
	}
	fmt.Fprintf(tw, "  slots\t%s\n", slots)
	if s.GPUKVTokens > 0 {
		fmt.Fprintf(tw, "  slot context\t%d tokens (%s)\n", s.GPUKVTokens, s.GPUKVTokensSource)
	}
	tier := fmt.Sprintf("%s = %s bytes", strings.TrimSuffix(capacity.HostTierWords(s), " host tier"), units.Whole(a.CPUTierBytes))
	if a.CPUTierTokens > 0 {
		tier += fmt.Sprintf(" = about %s tokens", units.Whole(a.CPUTierTokens))
	}
	fmt.Fprintf(tw, "  host tier\t%s\n", tier)
	fmt.Fprintf(tw, "  saved prompt state\t%d tokens from the replayed request on\n", a.HostTokensNeeded)
	fmt.Fprintf(tw, "  replayed prompt leaves slot\t%s\n", a.EvictionPressure)
	fmt.Fprintf(tw, "  tier > slot context\t%s\n", a.TierLargerThanGPU)
	fmt.Fprintf(tw, "  tier holds saved state\t%s\n", a.TierHoldsSequence)
	fmt.Fprintf(tw, "  can prove a reload\t%s\n", a.CanProveReload)
	tw.Flush()
}

// writeFindings prints the findings and what they mean for the run.
func writeFindings(w io.Writer, a capacity.Assessment) {
	for _, f := range a.Findings {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	switch a.CanProveReload {
	case capacity.No:
		fmt.Fprintf(w, "WARNING: this setup cannot prove a reload from the %s: %s\n", tierName(a.Setup), strings.Join(a.Reasons(), "; "))
	case capacity.Unknown:
		if a.Setup.Topology == capacity.SingleSlot { // no pool size or store counters to read
			fmt.Fprintln(w, "NOTE: whether this setup can prove a reload is decided at run time, from the server's slots and the replay's cached tokens.")
			return
		}
		fmt.Fprintln(w, "NOTE: whether this setup can prove a reload is decided at run time, from the server's token counts, pool size and store counters.")
	}
}

// tierName is what the offload tier is called on the setup's engine.
func tierName(s capacity.Setup) string {
	if s.Topology == capacity.SingleSlot {
		return "host tier"
	}
	return "CPU tier"
}

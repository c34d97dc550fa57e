package traceimport

import (
	"fmt"
	"io"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/units"
)

// WriteText writes the report for a person: what the trace holds and what a prefix cache
// could gain from it.
func (r *Report) WriteText(w io.Writer) error {
	var b strings.Builder
	arrivals := fmt.Sprintf("arrivals as logged, over %s", time.Duration(r.DurationSeconds*float64(time.Second)).Round(time.Millisecond))
	if r.Arrivals == "rate" {
		arrivals = fmt.Sprintf("arrivals at %g requests/s in the log's order", r.Rate)
	}
	fmt.Fprintf(&b, "trace: %s (%s requests from %s, blocks of %d tokens, %s)\n", r.Trace, units.Grouped(r.Requests), r.Log, r.BlockTokens, arrivals)
	if r.TokenizedBy != "" {
		fmt.Fprintf(&b, "tokenized by: %s\n", r.TokenizedBy)
	}
	fmt.Fprintf(&b, "prompt tokens: %s, %s distinct whole blocks\n", units.Grouped(int(r.PromptTokens)), units.Grouped(int(r.DistinctBlocks)))
	fmt.Fprintf(&b, "requests sharing a prefix with an earlier one: %s of %s (%.1f%%)\n", units.Grouped(r.SharingRequests), units.Grouped(r.Requests), 100*float64(r.SharingRequests)/float64(max(r.Requests, 1)))
	fmt.Fprintf(&b, "unbounded prefix-cache hit rate: %.1f%% of prompt tokens (%s tokens): the most any cache serves of this traffic; 'kvbench trace analyze' gives it per capacity\n", 100*r.UnboundedHitRate, units.Grouped(int(r.UnboundedHitTokens)))
	fmt.Fprintf(&b, "output lengths: %d from the response's usage, %d from the request's token limit, %d the --output-tokens default\n", r.OutputFromUsage, r.OutputFromLimit, r.OutputFromDefault)
	if r.Approximate > 0 {
		fmt.Fprintf(&b, "note: %d requests had tools, tool calls or non-text parts the tokenizer was not given: their input lengths fall short of the server's\n", r.Approximate)
	}
	b.WriteString("the trace holds lengths, arrivals and block ids only: no text, no token ids, and ids keyed with a random key that was not kept\n")
	_, err := io.WriteString(w, b.String())
	return err
}

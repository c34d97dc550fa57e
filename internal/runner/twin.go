package runner

import (
	"context"
	"fmt"
	"maps"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
)

// A replay's cold twin: its prompt bytes sent again right after it, with the engine's field
// that forces a miss (harness/engine twin.go), so the record can hold the reload against a
// recompute of exactly those tokens (record's offload_gain). The twin is its own isolated
// request (idle server, its own scrapes, its own isolation check), journaled as the replay
// step's request 1; it is sent after the replay's verdict is decided and journaled, so it
// cannot change it. The runner only gathers; the record derives the gain and whether the
// twin really missed.

// coldTwinSkipped says why the replay q of step st gets no cold twin; "" when it gets one.
func (r *runner) coldTwinSkipped(ctx context.Context, st plan.Step, q record.Request) string {
	tw := r.cfg.Engine.ColdTwin
	switch {
	case st.Step.ColdTwin != nil && !*st.Step.ColdTwin:
		return "the scenario turned it off (cold_twin = false)"
	case !tw.Available():
		return tw.None
	case r.traits.BySlot && r.cfg.Slots != 1:
		return fmt.Sprintf("the server has %d slots: a twin may land in another slot and first restore a host-RAM cache entry, which would time a restore, not a recompute (run with -np 1)", r.cfg.Slots)
	case q.Result.Failed():
		return "the replay failed, so there is no reload to hold a recompute against"
	case ctx.Err() != nil:
		return "the run was stopped"
	}
	return ""
}

// coldTwin sends replay's cold twin when it gets one (coldTwinSkipped said nothing) and
// returns it, measured and journaled; nil when it gets none.
func (r *runner) coldTwin(ctx context.Context, k int, st plan.Step, req plan.Request, replay record.Request) *record.Request {
	if !req.Replay || replay.ColdTwinSkipped != "" || ctx.Err() != nil {
		return nil
	}
	field, value := r.cfg.Engine.ColdTwin.Body()
	twin := req
	twin.Replay, twin.IndexInStep = false, replay.IndexInStep+1
	q := r.isolatedRequest(ctx, k, st, twin, &record.ColdTwin{Mechanism: r.cfg.Engine.ColdTwin.Mechanism, Field: field, Value: value})
	return &q
}

// askForOutput makes a request whose output is compared keep it (the original of a replay,
// the replay, its cold twin), asking the server for its token ids where the engine streams
// them, and adds a twin's field to the body.
func (r *runner) askForOutput(c *client.ChatRequest, req plan.Request, twin *record.ColdTwin) {
	if st := r.cfg.Scenario.StepByID(req.Step); st == nil || st.IsConversation() {
		return
	}
	if !req.Replay && twin == nil && !r.replayedOrdinal(req.Ordinal) {
		return
	}
	c.KeepOutput = true
	add := map[string]any{}
	if f := r.cfg.Engine.TokenIDsField; f != "" {
		add[f] = true
	}
	if twin != nil {
		add[twin.Field] = twin.Value
	}
	if len(add) == 0 {
		return
	}
	body := maps.Clone(c.ExtraBody)
	if body == nil {
		body = map[string]any{}
	}
	maps.Copy(body, add) // over the scenario's own, so the twin's salt is never the replay's
	c.ExtraBody = body
}

// replayedOrdinal reports whether a replay step of the scenario resends prompt ordinal.
func (r *runner) replayedOrdinal(ordinal int) bool {
	sc := r.cfg.Scenario
	for i := range sc.Steps {
		if st := &sc.Steps[i]; st.Replay != nil {
			if src := sc.StepByID(st.Replay.Step); src != nil && src.FirstOrdinal+st.Replay.Request == ordinal {
				return true
			}
		}
	}
	return false
}

// reloadEvidence prints what the record derived of a finished replay step: whether the
// replay gave its original's output (a divergence is a FINDING), what reloading saved
// against its cold twin, and the copy's bandwidth.
func (c *Console) reloadEvidence(e events.StepDone) {
	if e.Record == nil || e.Repetition >= len(e.Record.Repetitions) {
		return
	}
	var rp *record.ReplaySection
	for _, s := range e.Record.Repetitions[e.Repetition].Sections {
		if s.Step == e.Step.Step {
			rp = s.Replay
		}
	}
	if rp == nil {
		return
	}
	if f := rp.ReloadFidelity; f != nil && f.Compared && !*f.Identical {
		c.Printf("  FINDING reload fidelity: %s", f.Finding)
	} else {
		c.Printf("  reload fidelity: %s", f.Words())
	}
	c.Printf("  offload gain: %s", rp.OffloadGain.Words())
	if b := rp.ReloadBandwidth; b != nil {
		c.Printf("  reload bandwidth: %s", b.Finding)
	}
}

package runner

import (
	"context"
	"fmt"
	"io"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/harness/textout"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// servedModel is the model sc runs on: its own, else the first one the server lists (a
// server usually serves one).
func servedModel(sc *scenarios.Scenario, models []client.Model) (string, error) {
	if sc.Target.Model != "" {
		return sc.Target.Model, nil
	}
	if len(models) == 0 {
		return "", fmt.Errorf("%s/models lists no model: %w", redact.URL(sc.Target.Endpoint), client.ErrBadResponse)
	}
	return models[0].ID, nil
}

// TokenCounter is how the scenario's prompts are counted on this server for model: nil
// when the scenario estimates, the engine's own /tokenize dialect otherwise.
func (t Target) TokenCounter(sc *scenarios.Scenario, model string) prompts.TokenCounter {
	if sc.Prompt.TokenCounting != "server" {
		return nil
	}
	return t.Engine.TokenCounter(model)
}

// PlanOnServer plans sc on what the server says of itself (plan.Make with its facts, as
// preflight does): its prompts counted on the server, the model it serves when the scenario
// names none (/tokenize needs it), its cache config, its slots and its max_model_len. A
// server without /metrics still gets its plan, on the scenario's figures; run's preflight
// reports the failed scrape.
func PlanOnServer(ctx context.Context, sc *scenarios.Scenario, apiKey string) (*plan.Plan, error) {
	t, err := Connect(sc, apiKey)
	if err != nil {
		return nil, err
	}
	facts := plan.Facts{Model: sc.Target.Model}
	if sc.Target.Model == "" || sc.HasCurves() {
		models, err := t.Client.Models(ctx)
		if err != nil {
			return nil, err
		}
		if facts.Model, err = servedModel(sc, models); err != nil {
			return nil, err
		}
		for _, m := range models {
			if m.ID == facts.Model {
				facts.Server.MaxModelLen = m.MaxModelLen
			}
		}
	}
	var warnings []string
	if snap, err := t.Metrics.Snapshot(ctx); err == nil {
		maxModelLen := facts.Server.MaxModelLen
		facts.Server = plan.ServerOf(t.Engine.Def, snap)
		facts.Server.MaxModelLen = maxModelLen
		if w := ReplicaWarning(snap); w != "" {
			warnings = append(warnings, w)
		}
	}
	if z, ok, _ := t.Engine.Sizes(ctx); ok {
		facts.Server.Sizes = z // a failed read leaves zeros; preflight warns about the slot count
	}
	facts.Counter = t.TokenCounter(sc, facts.Model)
	p, err := plan.Make(ctx, sc, facts)
	if err != nil {
		return nil, err
	}
	p.Warnings = append(p.Warnings, warnings...)
	return p, nil
}

// Settings are the run's own choices, beside what preflight found out.
type Settings struct {
	KvbenchVersion string
	NoProbes       bool
	ProbeSecrets   bool
	// Console shows the preflight before the run; list it among Sinks to show the run too.
	Console *Console
	// Sinks are the run's (see Config.Sinks).
	Sinks []events.Sink
	// EngineInProcess: see Config.EngineInProcess.
	EngineInProcess bool
	// Choices are the run's flags over the scenario (plan.Choices).
	Choices plan.Choices
}

// NewConfig is the run configuration for a preflighted server: the plan (whose scenario the
// run runs and records), the clients and everything preflight resolved about the server's
// KV capacity.
func NewConfig(t Target, rep *PreflightReport, p *plan.Plan, s Settings) Config {
	sc := p.Scenario
	cfg := Config{
		Scenario:        sc,
		Plan:            p,
		Chat:            t.Client,
		Completions:     t.Client,
		Metrics:         t.Metrics,
		KvbenchVersion:  s.KvbenchVersion,
		ServerVersion:   rep.ServerVersion,
		ModelRoot:       rep.ModelRoot,
		Engine:          t.Engine.Def,
		Cache:           RecordCache(sc, rep),
		Capacity:        rep.CapacitySources,
		BlockSize:       rep.BlockSize,
		Preflight:       rep,
		Slots:           rep.Slots,
		NoProbes:        s.NoProbes,
		ProbeSecrets:    s.ProbeSecrets,
		Sinks:           s.Sinks,
		EngineInProcess: s.EngineInProcess,
		Repeat:          sc.Repeat,
		Replan:          RepetitionPlanner(p, t),
		TokenIDs:        t.Engine.TokenIDs(),
	}
	return cfg
}

// WriteText prints the whole preflight for a person: the brief, every counter with the
// server metric it is read from, and each replay's capacity math.
func (rep *PreflightReport) WriteText(w io.Writer, scenario string) error {
	return textout.Write(w, func(w io.Writer) { rep.writeText(w, scenario) })
}

// writeText writes what WriteText writes.
func (rep *PreflightReport) writeText(w io.Writer, scenario string) {
	con := NewConsole(w, false)
	con.Printf("preflight %s against %s", scenario, redact.URL(rep.Endpoint))
	rep.WriteBrief(con)
	con.Printf("  counters (kvbench name <- server metric):")
	for _, c := range metrics.Counters() {
		con.Printf("    %-30s %s", c, rep.Counters[string(c)])
	}
	for _, rp := range rep.Capacity {
		_ = rp.WriteText(w) // w is textout's buffer, which cannot fail
	}
}

// WriteBrief prints what preflight found in a few console lines.
func (rep *PreflightReport) WriteBrief(con *Console) {
	con.Printf("  model %s (max_model_len %d), server %s", rep.Model, rep.MaxModelLen, units.Text(rep.ServerVersion))
	if rep.Setup.Topology == capacity.SingleSlot {
		con.Printf("  %d slot(s), slot context %d tokens (%s), %s; tokenize: %s; cached_tokens reported: %s",
			rep.Slots, rep.Setup.GPUKVTokens, units.Text(rep.Setup.GPUKVTokensSource), capacity.HostTierWords(rep.Setup), rep.Tokenize, rep.CachedTokensReported)
	} else {
		con.Printf("  GPU KV pool %d tokens (%s), block %d, CPU tier %s GiB; tokenize: %s; cached_tokens reported: %s",
			rep.Setup.GPUKVTokens, units.Text(rep.Setup.GPUKVTokensSource), rep.BlockSize, units.Exact(rep.Setup.CPUOffloadGiB), rep.Tokenize, rep.CachedTokensReported)
	}
	for _, rp := range rep.Capacity {
		line := fmt.Sprintf("  %s: can prove a reload: %s", rp.Step, rp.Assessment.CanProveReload)
		if why := rp.Assessment.Reasons(); len(why) > 0 {
			line += " (" + strings.Join(why, "; ") + ")"
		}
		con.Printf("%s", line)
		if rp.Assessment.CanProveReload != capacity.Yes {
			for _, f := range rp.Assessment.Findings {
				con.Printf("    - %s", f)
			}
		}
	}
	if line := UnreadLine(rep.Backend, rep.UnreadFamilies); line != "" {
		con.Printf("  %s", line)
	}
	for _, w := range rep.Warnings {
		con.Printf("  warning: %s", w)
	}
	for _, p := range rep.Problems {
		con.Printf("  PROBLEM: %s", p)
	}
}

// unreadShown bounds the unread families a console line names; the record lists them all.
const unreadShown = 6

// UnreadLine is the console's line for the cache families kvbench's model of backend does
// not read, the first unreadShown named in order and the rest counted; "" when there are none.
func UnreadLine(backend string, families []string) string {
	if len(families) == 0 {
		return ""
	}
	shown := families[:min(len(families), unreadShown)]
	noun := "families"
	if len(families) == 1 {
		noun = "family"
	}
	line := fmt.Sprintf("not read by kvbench's model of %s (%d cache %s; verdicts are reached without them): %s", backend, len(families), noun, strings.Join(shown, ", "))
	if more := len(families) - len(shown); more > 0 {
		line += fmt.Sprintf(" and %d more", more)
	}
	return line
}

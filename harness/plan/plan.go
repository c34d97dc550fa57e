// Package plan turns a scenario into the exact requests a run sends (built prompts with their
// identities, in order) and the capacity math of each replay. plan, preflight and run share it.
package plan

import (
	"context"
	"errors"
	"flag"
	"fmt"
	"slices"
	"strconv"
	"strings"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Request is one request of the run with its built prompt.
type Request struct {
	scenarios.PlannedRequest
	Prompt prompts.Prompt `json:"prompt"`
}

// Step is a scenario step with its requests.
type Step struct {
	Step     *scenarios.Step `json:"-"`
	ID       string          `json:"id"`
	Requests []Request       `json:"requests"`
	// Trace is a trace step's plan, read from its trace; its requests are built as it runs.
	Trace *TracePlan `json:"trace,omitempty"`
}

// Replay is the capacity math of one replay step.
type Replay struct {
	Step       string              `json:"step"`
	Of         scenarios.ReplayRef `json:"of"`
	Ordinal    int                 `json:"ordinal"`
	Assessment capacity.Assessment `json:"capacity"`
}

// Plan is everything a run will send, decided before it sends anything.
type Plan struct {
	// Scenario is the scenario as planned (see Make); the run runs and records it.
	Scenario *scenarios.Scenario `json:"-"`
	// Capacity is what the scenario and the server said of its KV capacity.
	Capacity         Capacity `json:"-"`
	TokenCounting    string   `json:"token_counting"`
	PrefixCountCalls int      `json:"prefix_count_calls"`
	Steps            []Step   `json:"steps"`
	Replays          []Replay `json:"replays"`
	// Warnings are what the server showed that bears on the plan (several replicas).
	Warnings []string `json:"warnings,omitempty"`
}

// Facts is what planning takes beside the scenario: what the server says of itself, each
// figure with its source (the zero value: nothing, so the scenario's [server] table alone),
// and the run's own choices that override the scenario (its flags).
type Facts struct {
	// Server is what preflight read of the server's capacity and limits.
	Server Server
	// Model is the model the server serves, used when the scenario names none.
	Model string
	// Counter counts prompts on the server; nil estimates them.
	Counter prompts.TokenCounter
	Choices
}

// Choices are the run's own flags that override the scenario.
type Choices struct {
	// Repeat, when above 0, is the run's --repeat over the scenario's repeat.
	Repeat int
	// Salt, when set, is the run's --salt over the scenario's prompt.salt.
	Salt string
}

// Register adds --repeat and --salt to fs, each checked as it is parsed.
func (c *Choices) Register(fs *flag.FlagSet) {
	fs.Func("repeat", "run the steps `N` times with fresh prompts (seed + k) to measure noise (overrides the scenario's repeat)", func(v string) error {
		n, err := strconv.Atoi(v)
		if err != nil || n < 1 || n > scenarios.MaxRepeat {
			return fmt.Errorf("want a count from 1 to %d", scenarios.MaxRepeat)
		}
		c.Repeat = n
		return nil
	})
	fs.Func("salt", "give the prompts fresh bytes of the same shapes, so a server's caches hold none of an earlier run's: letters, digits, '.', '-' and '_', or random for a new salt each run (nightly runs); overrides the scenario's prompt.salt, and compare still compares the runs", func(v string) error {
		c.Salt = v
		return scenarios.CheckSalt(v)
	})
}

// Make plans sc against what facts say: it never changes sc. The plan's Scenario is sc as
// planned, a new value: the served model filled in, the run's repeat and salt applied (a
// random salt drawn), and its reload curves expanded into steps from the server's
// max_model_len and GPU KV pool, or from the scenario's [server] table when no server was
// read. A curve whose bounds neither states is planned without requests, with a warning.
// Then every prompt is built in send order and each replay's capacity is assessed.
func Make(ctx context.Context, sc *scenarios.Scenario, facts Facts) (*Plan, error) {
	def, err := engine.ByName(sc.Target.Backend)
	if err != nil {
		return nil, err
	}
	planned := *sc
	planned.Steps, planned.Gates, planned.Curves = slices.Clone(sc.Steps), slices.Clone(sc.Gates), slices.Clone(sc.Curves)
	sc = &planned
	if sc.Target.Model == "" {
		sc.Target.Model = facts.Model
	}
	if facts.Repeat > 0 {
		sc.Repeat = facts.Repeat
	}
	if facts.Salt != "" {
		sc.Prompt.Salt = facts.Salt
	}
	if err := sc.ResolveSalt(); err != nil {
		return nil, err
	}
	capa := CapacityOf(sc, def, facts.Server)
	var warnings []string
	if sc.HasCurves() {
		if !statesCurveBounds(sc) && !facts.Server.Says() {
			warnings = append(warnings, "a reload curve's sizes and eviction come from the server's max_model_len and GPU KV pool, which the scenario leaves to the server: they are worked out at preflight (plan with --endpoint to see them)")
		} else if err := expandCurves(sc, capa.CurveBounds()); err != nil {
			return nil, err
		}
	}
	counter := facts.Counter
	mode := prompts.SharedPrefix
	if sc.Prompt.Mode == "nested" {
		mode = prompts.Nested
	}
	b := prompts.NewBuilder(prompts.Config{
		Seed:               uint64(sc.Prompt.Seed),
		Salt:               sc.Prompt.Salt,
		SharedPrefixTokens: sc.Prompt.SharedPrefixTokens,
		Mode:               mode,
		Counter:            counter,
	})
	p := &Plan{Scenario: sc, Capacity: capa, TokenCounting: prompts.Estimated, Warnings: warnings}
	if counter != nil {
		p.TokenCounting = prompts.CountedByServer
	}
	built := map[int]prompts.Prompt{} // by ordinal: a replay reuses the original's prompt
	for i := range sc.Steps {
		st := &sc.Steps[i]
		sp := Step{Step: st, ID: st.ID}
		if st.IsTrace() {
			if sp.Trace, err = ScanTrace(sc, i, def); err != nil {
				return nil, err
			}
		}
		for _, pr := range sc.StepRequests(st) {
			prompt, ok := built[pr.Ordinal]
			if !ok {
				var err error
				if prompt, err = b.Build(ctx, pr.Ordinal, pr.PlannedTokens); err != nil {
					return nil, buildError(sc, i, err)
				}
				built[pr.Ordinal] = prompt
			}
			sp.Requests = append(sp.Requests, Request{PlannedRequest: pr, Prompt: prompt})
		}
		p.Steps = append(p.Steps, sp)
	}
	p.PrefixCountCalls = b.PrefixCountCalls()
	p.Replays = AssessReplays(sc, capa.Setup, p.Tokens(), p.TokenCounting)
	return p, nil
}

// Repetition plans repetition k of p: p's planned scenario with seed = prompt.seed + k,
// counted by counter.
func (p *Plan) Repetition(ctx context.Context, k int, counter prompts.TokenCounter) (*Plan, error) {
	c := *p.Scenario
	c.Prompt.Seed = p.Scenario.RepetitionSeed(k)
	return Make(ctx, &c, Facts{Counter: counter})
}

// Tokens returns each planned prompt's token count by ordinal.
func (p *Plan) Tokens() map[int]int {
	tokens := map[int]int{}
	for _, st := range p.Steps {
		for _, r := range st.Requests {
			tokens[r.Ordinal] = r.Prompt.Tokens
		}
	}
	return tokens
}

// AssessReplays does the capacity math of every replay step. tokens holds each prompt's
// token count by ordinal; counting says where they came from (see capacity.Sequence).
func AssessReplays(sc *scenarios.Scenario, setup capacity.Setup, tokens map[int]int, counting string) []Replay {
	var out []Replay
	var sent []int // ordinals of original (non-replay) requests in send order
	for i := range sc.Steps {
		st := &sc.Steps[i]
		if st.Replay == nil {
			for _, pr := range sc.StepRequests(st) {
				sent = append(sent, pr.Ordinal)
			}
			continue
		}
		ordinal := sc.StepRequests(st)[0].Ordinal
		seq := capacity.Sequence{
			SharedPrefix: sc.Prompt.SharedPrefixTokens,
			Nested:       sc.Prompt.Mode == "nested",
			Counting:     counting,
			Target:       -1,
		}
		for _, o := range sent {
			if o == ordinal {
				seq.Target = len(seq.Tokens)
			}
			seq.Tokens = append(seq.Tokens, tokens[o])
		}
		out = append(out, Replay{Step: st.ID, Of: *st.Replay, Ordinal: ordinal, Assessment: capacity.Assess(setup, seq)})
	}
	return out
}

// Check finds what is wrong with sc that is knowable without a server: an unknown backend,
// and prompts that cannot be built (a shared prefix or a request smaller than the fixed text
// around it), by planning with the estimate. Each error names the scenario's file and line.
func Check(ctx context.Context, sc *scenarios.Scenario) error {
	if _, err := engine.ByName(sc.Target.Backend); err != nil {
		return fmt.Errorf("%s: target.backend: %w", sc.Position("target.backend"), err)
	}
	if _, err := Make(ctx, sc, Facts{}); err != nil {
		var se *ScenarioError
		if errors.As(err, &se) {
			return err // it names the scenario's line
		}
		return fmt.Errorf("%s: %w", sc.Path, err)
	}
	return nil
}

// buildError places a prompt that cannot be built in the scenario: at the shared prefix when
// the prefix is too small, else at step i's planned sizes.
func buildError(sc *scenarios.Scenario, i int, err error) error {
	key := fmt.Sprintf("step[%d].planned_context_tokens", i)
	switch {
	case errors.Is(err, prompts.ErrTooSmall) && strings.Contains(err.Error(), "shared prefix"):
		key = "prompt.shared_prefix_tokens"
	case sc.Position(key) == sc.Path: // sizes from elsewhere (a conversation, a curve)
		key = fmt.Sprintf("step[%d]", i)
	}
	return &ScenarioError{Position: sc.Position(key), Key: key, Err: fmt.Errorf("step %s: %w", sc.Steps[i].ID, err)}
}

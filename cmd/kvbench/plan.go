package main

import (
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"strings"
	"text/tabwriter"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/redact"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

func init() {
	register(command{name: "scenarios", summary: "list the built-in scenarios", run: runScenarios})
	register(command{name: "validate", summary: "check scenario files (all problems, with lines)", run: runValidate})
	register(command{name: "plan", summary: "show a scenario's requests, prompt identities and capacity math", run: runPlan})
}

func runScenarios(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("scenarios", "", "kvbench scenarios", stdout)
	if _, err := parseFlags(fs, args); err != nil {
		return err
	}
	tw := tabwriter.NewWriter(stdout, 0, 4, 2, ' ', 0)
	for _, n := range scenarios.BuiltinNames() {
		sc, err := scenarios.Builtin(n)
		if err != nil {
			return err
		}
		fmt.Fprintf(tw, "%s\t%s\n", n, sc.Description)
	}
	return tw.Flush()
}

func runValidate(_ context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("validate", "FILE|NAME...", "kvbench validate scenarios/my-study.toml", stdout)
	files, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(files) == 0 {
		return usageErrorf("validate: name at least one scenario file")
	}
	var errs []error
	for _, f := range files {
		sc, err := scenarios.Resolve(f)
		if err != nil {
			errs = append(errs, err)
			continue
		}
		fmt.Fprintf(stdout, "%s: ok (%d steps)\n", sc.Path, len(sc.Steps))
		printProbes(stdout, sc)
	}
	if len(errs) > 0 {
		return usageError(errors.Join(errs...))
	}
	return nil
}

func runPlan(ctx context.Context, args []string, stdout, _ io.Writer) error {
	fs := newFlagSet("plan", "FILE|NAME [flags]", "kvbench plan eviction-6x150k-replay\nkvbench plan smoke --endpoint http://127.0.0.1:8000/v1   # counts tokens with /tokenize", stdout)
	var tf targetFlags
	tf.register(fs)
	estimate := fs.Bool("estimate", false, "estimate tokens (4 bytes per token) even if the scenario counts on the server: no traffic")
	format := fs.String("format", "text", "output format: text or json")
	args, err := parseFlags(fs, args)
	if err != nil {
		return err
	}
	if len(args) != 1 {
		return usageErrorf("plan: want one scenario file or built-in name, got %d", len(args))
	}
	if *format != "text" && *format != "json" {
		return usageErrorf("plan: --format must be text or json")
	}
	sc, err := loadScenario(args[0])
	if err != nil {
		return err
	}
	if err := tf.apply(sc); err != nil {
		return err
	}
	var counter prompts.TokenCounter
	if sc.Prompt.TokenCounting == "server" && !*estimate {
		c, err := endpointClient(ctx, sc)
		if err != nil {
			return fmt.Errorf("%w (use --estimate to plan without a server)", err)
		}
		counter = c.Tokenizer(sc.Target.Model)
	}
	p, err := plan.Make(ctx, sc, counter)
	if err != nil {
		return preflightError(ctx, err)
	}
	if *format == "json" {
		enc := json.NewEncoder(stdout)
		enc.SetIndent("", "  ")
		return enc.Encode(struct {
			Scenario *scenarios.Scenario `json:"scenario"`
			*plan.Plan
		}{sc, p})
	}
	printPlan(stdout, p)
	if len(sc.Probes) > 0 {
		fmt.Fprintf(stdout, "\nprobe commands (kvbench run needs --allow-probes or --no-probes):\n")
		printProbes(stdout, sc)
	}
	return nil
}

func printPlan(w io.Writer, p *plan.Plan) {
	sc := p.Scenario
	fmt.Fprintf(w, "scenario %s (%s)\n  %s\n", sc.Name, sc.Path, sc.Description)
	switch p.TokenCounting {
	case prompts.Estimated:
		fmt.Fprintf(w, "token counting: estimate (%d bytes per token, no server calls); real tokenizers differ\n", prompts.EstimateBytesPerToken)
	default:
		fmt.Fprintf(w, "token counting: server /tokenize at %s (model %s); prefix sized in %d calls\n", redact.URL(rootURL(sc.Target.Endpoint)), sc.Target.Model, p.PrefixCountCalls)
	}
	if len(p.Steps) > 0 && len(p.Steps[0].Requests) > 0 {
		pr := p.Steps[0].Requests[0].Prompt
		fmt.Fprintf(w, "shared prefix: %d tokens planned, %d counted, sha256 %s (mode %s, seed %d)\n\n",
			sc.Prompt.SharedPrefixTokens, pr.SharedPrefixTokens, pr.SharedPrefixSHA256, sc.Prompt.Mode, sc.Prompt.Seed)
	}
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
	for _, rp := range p.Replays {
		printAssessment(w, rp)
	}
}

func printAssessment(w io.Writer, rp plan.Replay) {
	a := rp.Assessment
	s := a.Setup
	fmt.Fprintf(w, "\ncapacity for step %s (replay of %s request %d):\n", rp.Step, rp.Of.Step, rp.Of.Request)
	tw := tabwriter.NewWriter(w, 0, 4, 2, ' ', 0)
	if s.GPUKVTokens > 0 {
		bytes := ""
		if a.GPUPoolBytes > 0 {
			bytes = fmt.Sprintf(" = %.2f GiB at %.0f bytes/token", a.GPUPoolBytes/capacity.GiB, s.StoreBytesPerToken)
		}
		fmt.Fprintf(tw, "  GPU KV pool\t%d tokens (%s)%s\n", s.GPUKVTokens, s.GPUKVTokensSource, bytes)
	} else {
		fmt.Fprintf(tw, "  GPU KV pool\tunknown until the server reports it\n")
	}
	tier := fmt.Sprintf("%g GiB = %.0f bytes", s.CPUOffloadGiB, a.CPUTierBytes)
	if a.CPUTierTokens > 0 {
		tier += fmt.Sprintf(" = about %.0f tokens", a.CPUTierTokens)
	}
	fmt.Fprintf(tw, "  CPU tier\t%s\n", tier)
	fmt.Fprintf(tw, "  unique tokens\t%d from the replayed request on\n", a.UniqueTokens)
	fmt.Fprintf(tw, "  eviction pressure\t%s\n", a.EvictionPressure)
	fmt.Fprintf(tw, "  tier > GPU pool\t%s\n", a.TierLargerThanGPU)
	fmt.Fprintf(tw, "  tier holds sequence\t%s\n", a.TierHoldsSequence)
	fmt.Fprintf(tw, "  can prove a reload\t%s\n", a.CanProveReload)
	tw.Flush()
	for _, f := range a.Findings {
		fmt.Fprintf(w, "  - %s\n", f)
	}
	switch a.CanProveReload {
	case capacity.No:
		fmt.Fprintf(w, "WARNING: this setup cannot prove a reload from the CPU tier: %s\n", firstNegative(a))
	case capacity.Unknown:
		fmt.Fprintln(w, "NOTE: whether this setup can prove a reload is decided at run time, from the server's token counts, pool size and store counters.")
	}
}

// firstNegative names the first condition that fails, for the one-line warning.
func firstNegative(a capacity.Assessment) string {
	var why []string
	if a.TierLargerThanGPU == capacity.No {
		why = append(why, "the CPU tier is not larger than the GPU KV pool")
	}
	if a.EvictionPressure == capacity.No {
		why = append(why, "the sequence fits in the GPU pool, so nothing is evicted")
	}
	if a.TierHoldsSequence == capacity.No {
		why = append(why, "the sequence overflows the CPU tier")
	}
	return strings.Join(why, "; ")
}

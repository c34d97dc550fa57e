// Package runner runs a planned scenario against a server: it isolates each measured request
// (waiting for an idle server), scrapes the counters right before and after it, samples the
// KV usage while it runs, gathers a replay's evidence for verdict.Decide, runs probes and
// gates, and emits every request and step to the sinks its caller gives it (events): the
// run directory first, so an interrupted run keeps what it measured.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"maps"
	"path/filepath"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Config is everything a run needs; preflight fills the server-side parts.
type Config struct {
	Scenario *scenarios.Scenario
	Plan     *plan.Plan
	// Engine is the server's engine family, resolved once for the run.
	Engine *engine.Definition
	Chat   ChatStreamer
	// Completions sends a trace step's requests; nil means Chat, when it can.
	Completions CompletionStreamer
	Metrics     MetricsSource
	// KvbenchVersion, ServerVersion and ModelRoot go into the record's header.
	KvbenchVersion string
	ServerVersion  string
	ModelRoot      string
	// Cache is the record's cache section as preflight resolved it.
	Cache record.Cache
	// Capacity are the sources of the server's KV capacity preflight found, lowest
	// precedence first (the scenario's, then the server's); a replay's capacity math adds
	// what the run measured on top (capacity.Resolve).
	Capacity  []capacity.Figures
	BlockSize int
	Preflight *PreflightReport
	// TokenIDs reads a prompt's token ids, for engines that attribute a replay by its
	// single slot (engine.BySlot); Slots is the server's slot count.
	TokenIDs func(ctx context.Context, msgs []prompts.Message) ([]int, error)
	Slots    int
	NoProbes bool
	// ProbeSecrets passes probes the variables whose names look secret (see ProbeEnv).
	ProbeSecrets bool
	// Sinks receive every event, in this order: the caller chooses them (the run directory,
	// RunDirSink, first, so what was measured is on disk before anyone else hears of it;
	// the console; a push). An error from one stops the run.
	Sinks []events.Sink
	// EngineInProcess: the server runs in this process (the demo's embedded engine), whose
	// CPU time is then not the client's alone, so steps record no client cost.
	EngineInProcess bool
	// Repeat is how many times the steps run (0 or 1: once). Repetition k > 0 runs the plan
	// Replan(k) returns (see RepetitionPlanner).
	Repeat int
	Replan func(ctx context.Context, k int) (*plan.Plan, error)
	// Now is the clock for the record's wall times (tests pin it); nil means time.Now.
	Now func() time.Time
}

// Outcome is what a finished (or interrupted) run wrote.
type Outcome struct {
	Dir        string
	RecordPath string
	// Record is the final run record, derived from every repetition's steps; Steps are
	// repetition 0's.
	Record      *derive.Run
	Steps       []derive.Step
	Gates       []record.GateResult
	Interrupted bool
	// Failed says why the run did less than asked (record status failed); "" when it did not.
	Failed string
}

// GatesFailed lists the gates that did not pass.
func (o *Outcome) GatesFailed() []record.GateResult {
	var failed []record.GateResult
	for _, g := range o.Gates {
		if !g.Passed {
			failed = append(failed, g)
		}
	}
	return failed
}

type runner struct {
	cfg    Config
	traits verdict.Engine
	origin time.Time
	sinks  events.Sinks
	// info is the run record's header as the run goes; reps the repetitions finished so
	// far, cur the one running.
	info    *derive.RunInfo
	reps    []derive.Repetition
	cur     *derive.Repetition
	curPlan *plan.Plan
	// stop cancels the run; failed holds the first failure (a write, or /metrics gone) that
	// stopped it.
	stop   context.CancelCauseFunc
	mu     sync.Mutex
	failed error
}

// Run executes cfg.Plan. run.json exists from the start (status running) and is replaced at
// each step's end, every finished request is journaled the moment it ends, and a file that
// cannot be written stops the run (status failed, the cause in stop_reason) with what was
// measured kept. Run returns an error only when the run directory could not be created or
// the final run.json could not be written; a failed request is data.
func Run(ctx context.Context, cfg Config) (*Outcome, error) {
	if cfg.Now == nil {
		cfg.Now = time.Now
	}
	if cfg.Engine == nil {
		def, err := engine.ByName(cfg.Scenario.Target.Backend)
		if err != nil {
			return nil, err
		}
		cfg.Engine = def
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r := &runner{cfg: cfg, traits: cfg.Engine.Traits(), origin: time.Now(), stop: stop}
	r.cfg.Metrics = &metricsGuard{inner: cfg.Metrics, budget: ScrapeBudget, limit: DeadScrapes, dead: r.fail}
	started := cfg.Now()
	info := derive.RunInfo{
		Scenario:       cfg.Scenario,
		ObservedAt:     started,
		Status:         record.StatusRunning,
		KvbenchVersion: cfg.KvbenchVersion,
		ServerVersion:  cfg.ServerVersion,
		ServedModel:    cfg.Scenario.Target.Model,
		ModelRoot:      cfg.ModelRoot,
		Cache:          cfg.Cache,
		Repeat:         cfg.Repeat,
	}
	r.info = &info
	if cfg.Preflight != nil {
		var err error
		if info.Preflight, err = json.Marshal(cfg.Preflight); err != nil {
			return nil, fmt.Errorf("encoding the preflight report: %w", err)
		}
	}
	r.sinks = cfg.Sinks
	begin := events.RunStarted{Scenario: cfg.Scenario.Name, Started: started, Record: derive.NewRun(info)}
	if err := r.sinks.Handle(begin); err != nil {
		return nil, err // no run directory, or a sink that cannot follow this run
	}
	out := &Outcome{Dir: r.sinks.Dir(), RecordPath: filepath.Join(r.sinks.Dir(), runs.RunFile)}
	if !cfg.NoProbes {
		info.Probes = append(info.Probes, r.runProbes(ctx, "before")...)
	}
	r.runRepetitions(ctx)
	switch {
	case r.failure() != nil:
		info.Status, info.StopReason = record.StatusFailed, joinErr(info.StopReason, r.failure().Error())
	case info.Status == record.StatusFailed: // a repetition could not run; the reason is set
	case ctx.Err() != nil:
		out.Interrupted = true
		info.Status, info.StopReason = record.StatusInterrupted, "interrupted: "+context.Cause(ctx).Error()
	default:
		info.Status = record.StatusCompleted
		if !cfg.NoProbes {
			info.Probes = append(info.Probes, r.runProbes(ctx, "after")...)
		}
	}
	if info.Status == record.StatusFailed {
		out.Failed = info.StopReason
	}
	final := r.record()
	if info.Status == record.StatusCompleted {
		final.Gates = final.CheckGates()
	}
	out.Record, out.Gates = final, final.Gates
	if len(final.Repetitions) > 0 {
		out.Steps = final.Repetitions[0].Steps
	}
	if err := r.sinks.Handle(events.RunDone{Record: final, Dir: out.Dir}); err != nil {
		if r.failure() != nil {
			err = fmt.Errorf("%w (after %s)", err, info.StopReason)
		}
		return out, err
	}
	return out, nil
}

// record is the run record of everything measured so far: the header, and what Derive
// computes from the finished repetitions and the one running.
func (r *runner) record() *derive.Run {
	reps := append([]derive.Repetition(nil), r.reps...)
	if r.cur != nil {
		reps = append(reps, *r.cur)
	}
	rec := derive.NewRun(*r.info)
	rec.Derive(reps)
	return rec
}

// emit hands e to every sink in order; a sink's error stops the run.
func (r *runner) emit(e events.Event) {
	if err := r.sinks.Handle(e); err != nil {
		r.fail(err)
	}
}

// recordRequest journals a finished request and reports whether it is part of the step: a
// request the run's own stop cancelled was not measured (the server did not fail it; kvbench
// stopped waiting), and one the run directory could not journal is not in the record, so
// the step, its journal and the console's counts are the same requests.
func (r *runner) recordRequest(ctx context.Context, k int, rec record.Request) bool {
	if ctx.Err() != nil && rec.Result.ErrorKind == client.ErrorKindCanceled {
		return false
	}
	if err := r.sinks.Handle(events.RequestDone{Repetition: k, Request: rec}); err != nil {
		r.fail(err)
		return false
	}
	return true
}

// fail stops the run because something it measured could not be written, or because the
// counters it needs can no longer be read.
func (r *runner) fail(err error) {
	r.mu.Lock()
	if r.failed == nil {
		r.failed = err
	}
	r.mu.Unlock()
	r.stop(err)
}

func (r *runner) failure() error {
	r.mu.Lock()
	defer r.mu.Unlock()
	return r.failed
}

// runStep runs one step of repetition k and returns it assembled.
func (r *runner) runStep(ctx context.Context, k int, st plan.Step) derive.Step {
	art := record.StepArtifact{
		Schema:      record.StepSchema,
		Scenario:    r.cfg.Scenario.Name,
		Step:        st.ID,
		Kind:        record.KindSequence,
		Concurrency: st.Step.Concurrency,
		DeltaScope:  record.ScopeRequest,
		StartedAt:   r.cfg.Now().UTC(),
	}
	cpu0, cpuRead := processCPU()
	wall0 := time.Now()
	if st.Step.Replay != nil {
		art.Kind = record.KindReplay
	}
	if st.Step.IsTrace() {
		if sent, err := client.SentCompletionFields(r.completionRequest(st.Step, 1)); err == nil {
			art.Sent = sent
		}
	} else if sent, err := client.SentFields(r.stepRequest(st.ID)); err == nil {
		art.Sent = sent
	}
	switch {
	case st.Step.IsConversation():
		r.runConversationStep(ctx, k, st, &art)
	case st.Step.IsTrace():
		r.runTraceStep(ctx, k, st, &art)
	case st.Step.Concurrency > 1 && len(st.Requests) > 1:
		r.runConcurrentStep(ctx, k, st, &art)
	default:
		for _, req := range st.Requests {
			if ctx.Err() != nil {
				break
			}
			q := r.isolatedRequest(ctx, k, st, req, nil)
			art.Requests = append(art.Requests, q)
			if twin := r.coldTwin(ctx, k, st, req, q); twin != nil {
				art.Requests = append(art.Requests, *twin)
			}
		}
	}
	art.Interrupted = ctx.Err() != nil
	art.EndedAt = r.cfg.Now().UTC()
	if cpu1, ok := processCPU(); ok && cpuRead && !r.cfg.EngineInProcess {
		art.Client = clientCost(cpu1-cpu0, time.Since(wall0), art.Requests)
	}
	return derive.Assemble(art)
}

// clientCost is what a step of reqs cost kvbench's process: cpu over wall time.
func clientCost(cpu, wall time.Duration, reqs []record.Request) *record.ClientCost {
	c := &record.ClientCost{CPUMS: ms(cpu), Cores: cpu.Seconds() / max(wall.Seconds(), 1e-9)}
	tokens := 0
	for _, q := range reqs {
		tokens += q.Result.OutputTokens
	}
	if tokens > 0 {
		v := ms(cpu) * 1000 / float64(tokens)
		c.CPUMSPer1kOutputTokens = &v
	}
	return c
}

// isolatedRequest sends one request alone: idle server, scrape, request, idle, scrape. A
// replay's verdict is decided before the request is journaled, so its journal line holds it.
// twin is set for a replay's cold twin (twin.go), which adds its field to the body.
func (r *runner) isolatedRequest(ctx context.Context, k int, st plan.Step, req plan.Request, twin *record.ColdTwin) record.Request {
	rec := r.newRequest(st, req)
	rec.ColdTwin = twin
	var slot *verdict.SlotEvidence
	if req.Replay && r.traits.BySlot {
		slot = r.slotEvidence(req) // read before sending: the slot's prompt is known now
	}
	idle := r.cfg.Scenario.Target.IdleTimeout.Duration
	r.progress(req, events.Waiting, client.Progress{})
	before, iso, waited, timedOut, err := waitIdle(ctx, r.cfg.Metrics, idle)
	iso.WaitBeforeMS, iso.TimedOutBefore = ms(waited), timedOut
	if err != nil {
		rec.CountersError = "before the request: " + err.Error()
	}
	smp := startSampler(ctx, r.cfg.Metrics, r.cfg.Scenario.Target.SampleInterval.Duration, r.origin)
	res := r.stream(ctx, req, r.chatRequest(req, twin), smp)
	rec.Result = res
	samples := smp.finish()
	rec.Samples = &samples

	// An interrupted request still gets its after-scrape, on a short leash.
	actx := ctx
	if ctx.Err() != nil {
		var cancel context.CancelFunc
		actx, cancel = context.WithTimeout(context.WithoutCancel(ctx), 5*time.Second)
		defer cancel()
	}
	after, iso2, waited, timedOut, err2 := waitIdle(actx, r.cfg.Metrics, idle)
	iso.WaitAfterMS, iso.TimedOutAfter = ms(waited), timedOut
	if iso2.IdleCheck != iso.IdleCheck {
		iso.IdleCheck = "unavailable"
	}
	rec.Isolation = &iso
	switch {
	case err2 != nil:
		rec.CountersError = joinErr(rec.CountersError, "after the request: "+err2.Error())
	case err == nil:
		rec.Counters = derive.NewCounters(before, after)
		checkIsolation(rec.Counters, rec.Result, iso, samples)
		rec.Replica = metrics.ReplicaMoved(before, after)
	}
	if req.Replay {
		r.decide(&rec, st, slot)
		rec.ColdTwinSkipped = r.coldTwinSkipped(ctx, st, rec)
	}
	r.emit(events.RequestDone{Repetition: k, Request: rec})
	return rec
}

// runConcurrentStep overlaps the step's requests: only the step's counter delta is meaningful.
// Workers send results on a channel; this goroutine is the one consumer.
func (r *runner) runConcurrentStep(ctx context.Context, k int, st plan.Step, art *record.StepArtifact) {
	art.DeltaScope = record.ScopeStep
	idle := r.cfg.Scenario.Target.IdleTimeout.Duration
	before, _, _, _, errBefore := waitIdle(ctx, r.cfg.Metrics, idle)
	smp := startSampler(ctx, r.cfg.Metrics, r.cfg.Scenario.Target.SampleInterval.Duration, r.origin)

	type done struct {
		i   int
		res client.Result
	}
	results := make(chan done)
	var g errgroup.Group
	g.SetLimit(st.Step.Concurrency)
	go func() {
		for i, req := range st.Requests {
			if ctx.Err() != nil {
				break
			}
			g.Go(func() error {
				r.progress(req, events.Sent, client.Progress{})
				results <- done{i, r.send(ctx, req, smp)}
				return nil // a failed request is data, never a reason to stop the step
			})
		}
		g.Wait()
		close(results)
	}()
	// Each request is recorded (and journaled) as it ends, so a crash mid-step loses none
	// that finished; the artifact lists them in plan order.
	got := map[int]record.Request{}
	for d := range results {
		rec := r.newRequest(st, st.Requests[d.i])
		rec.Result = d.res
		if r.recordRequest(ctx, k, rec) {
			got[d.i] = rec
		}
	}
	samples := smp.finish()
	after, _, _, _, errAfter := waitIdle(context.WithoutCancel(ctx), r.cfg.Metrics, idle)
	for i := range st.Requests {
		if rec, ok := got[i]; ok { // not sent: interrupted
			art.Requests = append(art.Requests, rec)
		}
	}
	art.Samples = &samples
	art.Counters, art.CountersError = derive.StepCounters(before, after, errBefore, errAfter, "")
}

func (r *runner) newRequest(st plan.Step, req plan.Request) record.Request {
	rec := record.Request{
		Step:          st.ID,
		IndexInStep:   req.IndexInStep,
		Ordinal:       req.Ordinal,
		Replay:        req.Replay,
		PlannedTokens: req.PlannedTokens,
		Prompt:        req.Prompt.Prompt,
	}
	if req.Replay {
		if ref := st.Step.Replay; ref != nil {
			of := *ref
			rec.ReplayOf = &of
		}
	}
	return rec
}

func (r *runner) send(ctx context.Context, req plan.Request, smp *sampler) client.Result {
	return r.stream(ctx, req, r.chatRequest(req, nil), smp)
}

// stream sends c, the body of req, reporting its progress and sampling at its first output.
func (r *runner) stream(ctx context.Context, req plan.Request, c client.ChatRequest, smp *sampler) client.Result {
	return r.cfg.Chat.StreamChat(ctx, c, func(p client.Progress) {
		if p.Phase == client.PhaseDecode && p.Tokens <= 1 {
			smp.sampleNow()
		}
		switch p.Phase {
		case client.PhasePrefill:
			r.progress(req, events.Prefilling, p)
		case client.PhaseDecode:
			r.progress(req, events.Decoding, p)
		}
	})
}

// progress reports a request's state to the sinks that show it.
func (r *runner) progress(req plan.Request, state events.RequestState, p client.Progress) {
	r.emit(events.RequestProgress{Step: req.Step, IndexInStep: req.IndexInStep, PlannedTokens: req.PlannedTokens,
		PromptTokens: req.Prompt.Tokens, State: state, Tokens: p.Tokens, Elapsed: p.Elapsed})
}

// chatRequest is req as sent: its prompt with its step's request fields, asking for what
// comparing its output needs when it is compared (fidelity), and a cold twin's field.
func (r *runner) chatRequest(req plan.Request, twin *record.ColdTwin) client.ChatRequest {
	c := r.stepRequest(req.Step)
	c.Messages = req.Prompt.Messages
	r.askForOutput(&c, req, twin)
	return c
}

// stepRequest is the body every request of step sends, its messages left out.
func (r *runner) stepRequest(step string) client.ChatRequest {
	sc := r.cfg.Scenario
	f := sc.RequestFor(sc.StepByID(step))
	// A salted run's requests also carry the salt in the engine's cache-isolation field,
	// where it keeps every tier apart; the scenario's own extra_body wins.
	if iso := r.cfg.Engine.IsolationFields(sc.Prompt.Salt); iso != nil {
		maps.Copy(iso, f.ExtraBody)
		f.ExtraBody = iso
	}
	return client.ChatRequest{
		Model:       sc.Target.Model,
		MaxTokens:   f.MaxTokens,
		Temperature: float32(f.Temperature),
		IgnoreEOS:   f.IgnoreEOS,
		MinTokens:   f.MinTokens,
		ExtraBody:   f.ExtraBody,
		Timeout:     sc.Request.Timeout.Duration,
		// Engines that name the tier per request (SGLang) are asked to.
		CachedTokensDetails: r.cfg.Engine.RequestTier,
	}
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// Package runner runs a planned scenario against a server: it isolates each measured request
// (waiting for an idle server), scrapes the counters right before and after it, samples the
// KV usage while it runs, decides replay verdicts, runs probes and gates, and writes the step
// artifacts and the run record as it goes, so an interrupted run keeps what it measured.
package runner

import (
	"context"
	"encoding/json"
	"fmt"
	"path/filepath"
	"strings"
	"sync"
	"time"

	"golang.org/x/sync/errgroup"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/engine"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/verdict"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// Config is everything a run needs; preflight fills the server-side parts.
type Config struct {
	Scenario *scenarios.Scenario
	Plan     *plan.Plan
	Chat     ChatStreamer
	Metrics  MetricsSource
	// ResultsDir is the parent of the run directory (results/ by default).
	ResultsDir     string
	KvbenchVersion string
	ServerVersion  string
	ModelRoot      string
	// Cache and Setup describe the server's KV capacity as preflight resolved it.
	Cache     record.Cache
	Setup     capacity.Setup
	BlockSize int
	Preflight *PreflightReport
	// Slot attribution for engines that attribute by slot (engine.BySlot): with TokenIDs set,
	// a replay's cached tokens are attributed by its common token prefix with the prompt the
	// server's single slot held before (see verdict.DecideBySlot).
	TokenIDs func(ctx context.Context, msgs []prompts.Message) ([]int, error)
	Slots    int
	NoProbes bool
	// ProbeSecrets passes probes the variables whose names look secret (see ProbeEnv).
	ProbeSecrets bool
	Console      *Console
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
	Dir         string
	RecordPath  string
	Record      *record.Run
	Artifacts   []record.StepArtifact
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
	cfg       Config
	origin    time.Time
	dir       string
	artifacts []record.StepArtifact
	refs      []record.ArtifactRef
	// info is the run record's info as the run goes; reps the repetitions finished so far.
	info *record.RunInfo
	reps []record.Repetition
	// journal is the running step's request journal (nil between steps).
	journal *runs.Journal
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
	if cfg.Console == nil {
		cfg.Console = NewConsole(nil, false)
	}
	ctx, stop := context.WithCancelCause(ctx)
	defer stop(nil)
	r := &runner{cfg: cfg, origin: time.Now(), stop: stop}
	r.cfg.Metrics = &metricsGuard{inner: cfg.Metrics, budget: ScrapeBudget, limit: DeadScrapes, dead: r.fail}
	r.cfg.Console = cfg.Console.withRequestDone(r.journalRequest)
	started := cfg.Now()
	info := record.RunInfo{
		Scenario:       cfg.Scenario,
		ObservedAt:     started,
		Status:         record.StatusRunning,
		KvbenchVersion: cfg.KvbenchVersion,
		ServerVersion:  cfg.ServerVersion,
		ServedModel:    cfg.Scenario.Target.Model,
		ModelRoot:      cfg.ModelRoot,
		Cache:          cfg.Cache,
	}
	r.info = &info
	var err error
	if cfg.Preflight != nil {
		if info.Preflight, err = json.Marshal(cfg.Preflight); err != nil {
			return nil, fmt.Errorf("encoding the preflight report: %w", err)
		}
	}
	dir, err := runs.CreateRunDir(cfg.ResultsDir, cfg.Scenario.Name, started, record.Build(info, nil))
	if err != nil {
		return nil, err
	}
	r.dir = dir
	out := &Outcome{Dir: dir, RecordPath: filepath.Join(dir, "run.json")}
	if !cfg.NoProbes {
		info.Probes = append(info.Probes, runProbes(ctx, cfg.Scenario.Probes, "before", cfg.Console, probeEnv(cfg))...)
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
			info.Probes = append(info.Probes, runProbes(ctx, cfg.Scenario.Probes, "after", cfg.Console, probeEnv(cfg))...)
		}
	}
	if info.Status == record.StatusFailed {
		out.Failed = info.StopReason
	}
	info.Artifacts = r.refs
	rec := record.Build(info, r.artifacts)
	if info.Status == record.StatusCompleted {
		rec.Gates = evaluateRepeatedGates(cfg.Scenario.Gates, info.Repetitions, rec.Sections)
		reps := info.Repetitions
		if len(reps) == 0 {
			reps = []record.Repetition{{Steps: r.artifacts}}
		}
		rec.Gates = append(rec.Gates, implicitGates(cfg.Scenario.Gates, reps)...)
	}
	out.Record, out.Artifacts, out.Gates = rec, r.artifacts, rec.Gates
	if _, err := runs.ReplaceJSON(out.RecordPath, rec); err != nil {
		if r.failure() != nil {
			err = fmt.Errorf("%w (after %s)", err, info.StopReason)
		}
		return out, err
	}
	return out, nil
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

// journalRequest makes a finished request durable in the running step's journal.
func (r *runner) journalRequest(q record.Request) {
	if r.journal == nil {
		return
	}
	if err := r.journal.Append(q); err != nil {
		r.fail(fmt.Errorf("journaling %s[%d]: %w", q.Step, q.IndexInStep, err))
	}
}

func (r *runner) runStep(ctx context.Context, st plan.Step) record.StepArtifact {
	art := record.StepArtifact{
		Schema:      record.StepSchema,
		Scenario:    r.cfg.Scenario.Name,
		Step:        st.ID,
		Kind:        "sequence",
		Concurrency: st.Step.Concurrency,
		DeltaScope:  record.ScopeRequest,
		StartedAt:   r.cfg.Now().UTC(),
	}
	cpu0, cpuRead := processCPU()
	wall0 := time.Now()
	if st.Step.Replay != nil {
		art.Kind = "replay"
	}
	if sent, err := client.SentFields(r.chatRequest(plan.Request{PlannedRequest: scenarios.PlannedRequest{Step: st.ID}})); err == nil {
		art.Sent = sent
	}
	r.cfg.Console.StepStart(st)
	if st.Step.IsConversation() {
		r.runConversationStep(ctx, st, &art)
	} else if st.Step.Concurrency > 1 && len(st.Requests) > 1 {
		r.runConcurrentStep(ctx, st, &art)
	} else {
		var names, unread []string
		var windows []*metrics.Window
		for _, req := range st.Requests {
			if ctx.Err() != nil {
				break
			}
			rec := r.isolatedRequest(ctx, st, req)
			art.Requests = append(art.Requests, rec)
			art.Samples.Merge(rec.Samples)
			name := fmt.Sprintf("request %d", rec.IndexInStep)
			if rec.Counters != nil {
				names, windows = append(names, name), append(windows, rec.Counters)
			} else {
				unread = append(unread, name+": "+rec.CountersError)
			}
		}
		// The step's delta is only as good as every scrape in it.
		art.Counters = metrics.Join(names, windows)
		if art.Counters != nil {
			for _, u := range unread {
				art.Counters.Delta.InvalidateAll(metrics.InvalidScrapeFailed, "counters not read around "+u)
			}
		} else if len(unread) > 0 {
			art.CountersError = "no request's counters were read: " + strings.Join(unread, "; ")
		}
	}
	art.Interrupted = ctx.Err() != nil
	art.EndedAt = r.cfg.Now().UTC()
	if cpu1, ok := processCPU(); ok && cpuRead && !r.cfg.EngineInProcess {
		art.Client = r.clientCost(cpu1-cpu0, time.Since(wall0), art.Requests)
	}
	if art.Kind == "replay" {
		r.decideReplay(&art)
	}
	return art
}

// clientCost is what a step of reqs cost kvbench's process: cpu over wall time.
func (r *runner) clientCost(cpu, wall time.Duration, reqs []record.Request) *record.ClientCost {
	c := &record.ClientCost{CPUMS: ms(cpu), Cores: cpu.Seconds() / max(wall.Seconds(), 1e-9)}
	tokens := 0
	for _, q := range reqs {
		tokens += q.Result.OutputTokens
	}
	if tokens > 0 {
		v := ms(cpu) * 1000 / float64(tokens)
		c.CPUMSPer1kOutputTokens = &v
	}
	if t, ok := r.cfg.Chat.(interface{ TransportName() string }); ok {
		c.Transport = t.TransportName()
	}
	return c
}

// isolatedRequest sends one request alone: idle server, scrape, request, idle, scrape.
func (r *runner) isolatedRequest(ctx context.Context, st plan.Step, req plan.Request) record.Request {
	rec := r.newRequest(st, req)
	idle := r.cfg.Scenario.Target.IdleTimeout.Duration
	r.cfg.Console.Waiting(req)
	before, iso, waited, timedOut, err := waitIdle(ctx, r.cfg.Metrics, idle)
	iso.WaitBeforeMS, iso.TimedOutBefore = ms(waited), timedOut
	if err != nil {
		rec.CountersError = "before the request: " + err.Error()
	}
	smp := startSampler(ctx, r.cfg.Metrics, r.cfg.Scenario.Target.SampleInterval.Duration, r.origin)
	rec.Result = r.send(ctx, req, smp)
	rec.Samples = smp.finish()

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
		rec.Counters = metrics.NewWindow(before, after)
		checkIsolation(rec.Counters, rec.Result, iso, rec.Samples)
		rec.Replica = rec.Counters.Replica()
	}
	r.cfg.Console.RequestDone(rec)
	return rec
}

// runConcurrentStep overlaps the step's requests: only the step's counter delta is meaningful.
// Workers send results on a channel; this goroutine is the one consumer.
func (r *runner) runConcurrentStep(ctx context.Context, st plan.Step, art *record.StepArtifact) {
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
				r.cfg.Console.Sending(req)
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
		r.cfg.Console.RequestDone(rec)
		got[d.i] = rec
	}
	samples := smp.finish()
	after, _, _, _, errAfter := waitIdle(context.WithoutCancel(ctx), r.cfg.Metrics, idle)
	for i := range st.Requests {
		if rec, ok := got[i]; ok { // not sent: interrupted
			art.Requests = append(art.Requests, rec)
		}
	}
	art.Samples = samples
	if errBefore != nil {
		art.CountersError = "before the step: " + errBefore.Error()
	}
	if errAfter != nil {
		art.CountersError = joinErr(art.CountersError, "after the step: "+errAfter.Error())
	}
	if art.CountersError == "" {
		art.Counters = metrics.NewWindow(before, after)
	}
}

func (r *runner) newRequest(st plan.Step, req plan.Request) record.Request {
	rec := record.Request{
		Step:          st.ID,
		IndexInStep:   req.IndexInStep,
		Ordinal:       req.Ordinal,
		Replay:        req.Replay,
		PlannedTokens: req.PlannedTokens,
		Prompt:        req.Prompt,
	}
	if req.Replay {
		ref := *st.Step.Replay
		rec.ReplayOf = &ref
	}
	return rec
}

func (r *runner) send(ctx context.Context, req plan.Request, smp *sampler) client.Result {
	return r.cfg.Chat.StreamChat(ctx, r.chatRequest(req), func(p client.Progress) {
		if p.Phase == client.PhaseDecode && p.Tokens <= 1 {
			smp.sampleNow()
		}
		r.cfg.Console.Progress(req, p)
	})
}

// chatRequest is req as sent: its prompt with its step's request fields.
func (r *runner) chatRequest(req plan.Request) client.ChatRequest {
	sc := r.cfg.Scenario
	f := sc.RequestFor(sc.StepByID(req.Step))
	def, _ := engine.ByName(sc.Target.Backend)
	return client.ChatRequest{
		Model:       sc.Target.Model,
		Messages:    req.Prompt.Messages,
		MaxTokens:   f.MaxTokens,
		Temperature: float32(f.Temperature),
		IgnoreEOS:   f.IgnoreEOS,
		MinTokens:   f.MinTokens,
		ExtraBody:   f.ExtraBody,
		Timeout:     sc.Request.Timeout.Duration,
		// Engines that name the tier per request (SGLang) are asked to.
		CachedTokensDetails: def != nil && def.RequestTier,
	}
}

// decideReplay sets the replay request's verdict and the step's capacity math, with the
// tokens the server counted and the bytes per token the run measured.
func (r *runner) decideReplay(art *record.StepArtifact) {
	if len(art.Requests) == 0 {
		return
	}
	req := &art.Requests[0]
	c := req.Counters
	if c == nil && art.DeltaScope == record.ScopeStep {
		c = art.Counters // overlapping requests: only the step's window exists
	}
	ev := verdict.Evidence{
		PromptTokens:       req.Result.PromptTokens,
		CachedPromptTokens: req.Result.CachedPromptTokens,
		SharedPrefixTokens: req.Prompt.SharedPrefixTokens,
		BlockSize:          r.cfg.BlockSize,
		LoadBytesPerToken:  r.cfg.Scenario.Server.LoadBytesPerToken,
		CountersValid:      true,
		RequestFailed:      req.Result.Failed(),
		RequestFailure:     req.Result.Error,
	}
	if c != nil {
		ev.CountersValid = c.Delta.Valid
		ev.Invalidity, ev.InvalidReason = c.Delta.FirstInvalid()
		for _, k := range []metrics.Counter{metrics.GPUPrefixHits, metrics.ExternalPrefixHits, metrics.LoadBytes} {
			if why := c.Delta.Unreadable(k); why != "" {
				ev.UnreadableCounters = append(ev.UnreadableCounters, why)
			}
		}
		ev.GPUHitsDelta = c.Delta.Ptr(metrics.GPUPrefixHits)
		ev.ExternalHitsDelta = c.Delta.Ptr(metrics.ExternalPrefixHits)
		ev.LoadBytesDelta = c.Delta.Ptr(metrics.LoadBytes)
		ev.HostCachedDelta = c.Delta.Ptr(metrics.CachedFromHost)
		ev.ReloadTokensDelta = c.Delta.Ptr(metrics.ReloadTokens)
		ev.DiskReloadTokensDelta = c.Delta.Ptr(metrics.DiskReloadTokens)
	} else {
		why := req.CountersError
		if art.DeltaScope == record.ScopeStep {
			why = art.CountersError
		}
		ev.CountersValid, ev.Invalidity, ev.InvalidReason = false, metrics.InvalidScrapeFailed, why
		if ev.InvalidReason == "" {
			ev.InvalidReason = "none were scraped"
		}
	}
	if t := req.Result.CachedTokensDetails; t != nil && !req.Result.Failed() {
		ev.RequestTier = &verdict.TierTokens{Device: t.Device, Host: t.Host, Storage: t.Storage, StorageBackend: t.StorageBackend}
	}
	v := verdict.Decide(ev)
	r.engineNotes(&v, c)
	if r.cfg.TokenIDs != nil && (c == nil || !c.Delta.Contaminated) {
		v = r.slotVerdict(art, req)
	}
	if c != nil && strings.HasPrefix(c.Delta.Isolation, "unchecked: ") {
		v.Notes = append(v.Notes, "isolation "+c.Delta.Isolation)
	}
	req.Verdict = &v

	setup := r.cfg.Setup
	if store, _ := record.MeasuredBytesPerToken(r.artifacts); store != nil {
		setup.StoreBytesPerToken, setup.StoreBytesSource = *store, "measured"
	}
	tokens := map[int]int{}
	counting := "measured"
	for _, a := range append(r.artifacts, *art) {
		for _, q := range a.Requests {
			if q.Result.PromptTokens != nil {
				tokens[q.Ordinal] = *q.Result.PromptTokens
			} else if _, ok := tokens[q.Ordinal]; !ok {
				tokens[q.Ordinal] = q.Prompt.Tokens
				counting = r.cfg.Plan.TokenCounting
			}
		}
	}
	for _, rp := range plan.AssessReplays(r.cfg.Scenario, setup, tokens, counting) {
		if rp.Step == art.Step {
			a := rp.Assessment
			art.Capacity = &a
		}
	}
	if v.Slot == nil && c != nil && c.Delta.Valid {
		r.diagnose(req.Verdict, c, art.Capacity, r.routing(req))
	}
}

// engineNotes adds what the engine's definition says about a verdict: why its tier is
// unknown, and its known counter traps.
func (r *runner) engineNotes(v *verdict.Replay, c *metrics.Window) {
	def, err := engine.ByName(r.cfg.Scenario.Target.Backend)
	if err != nil {
		return
	}
	if def.RequestTier && v.Evidence.RequestTier == nil && !v.Evidence.RequestFailed {
		v.Notes = append(v.Notes, "the response carried no cached_tokens_details: the verdict rests on the counters alone")
	}
	if c == nil {
		return
	}
	if def.TierUnknown != "" && v.Verdict == verdict.TierUnknown {
		v.Notes = append(v.Notes, def.TierUnknown)
		if d, ok := c.Delta.Value(metrics.PromptTokensCached); ok {
			v.Notes = append(v.Notes, fmt.Sprintf("the cached prompt token counter moved by %.0f around the replay", d))
		}
	}
	if def.ReloadCounterHint != "" {
		m, okM := c.Delta.Value(metrics.MatchedTokens)
		rl, okR := c.Delta.Value(metrics.ReloadTokens)
		if okM && okR && m > 0 && rl == 0 {
			v.Notes = append(v.Notes, def.ReloadCounterHint)
		}
	}
}

// diagnose explains a recompute or partial replay from the run's offload evidence: the
// deltas from this repetition's first scrape to the replay's last, and the capacity math.
func (r *runner) diagnose(v *verdict.Replay, c *metrics.Window, a *capacity.Assessment, routed verdict.OffloadEvidence) {
	if v.Verdict != verdict.Recompute && v.Verdict != verdict.Partial {
		return
	}
	first := c
	for i := range r.artifacts {
		if w := r.artifacts[i].Counters; w != nil {
			first = w
			break
		}
	}
	d := metrics.Diff(first.Before, c.After)
	o := verdict.OffloadEvidence{
		StoreBytes:         d.Ptr(metrics.StoreBytes),
		StoresSkipped:      d.Ptr(metrics.StoresSkipped),
		AllocationFailures: d.Ptr(metrics.AllocationFailures),
	}
	if a != nil {
		o.TierHoldsSequence, o.TierTokens, o.UniqueTokens = string(a.TierHoldsSequence), a.CPUTierTokens, a.UniqueTokens
	}
	o.RoutedElsewhere, o.OriginalReplica, o.ReplayReplica = routed.RoutedElsewhere, routed.OriginalReplica, routed.ReplayReplica
	v.Offload = &o
	v.Diagnosis = verdict.Diagnose(v.Verdict, o)
}

// slotVerdict attributes the replay's cached tokens by its common token prefix with the
// request sent just before it, which is what the single slot held. Token ids are read after
// the run, off the timed path.
func (r *runner) slotVerdict(art *record.StepArtifact, req *record.Request) verdict.Replay {
	ev := verdict.SlotEvidence{
		PromptTokens:       req.Result.PromptTokens,
		CachedPromptTokens: req.Result.CachedPromptTokens,
		Slots:              r.cfg.Slots,
		Tolerance:          max(r.cfg.BlockSize, 16),
		RequestFailed:      req.Result.Failed(),
		RequestFailure:     req.Result.Error,
	}
	var prev *record.Request
	if n := len(r.artifacts); n > 0 && art.Concurrency <= 1 {
		if reqs := r.artifacts[n-1].Requests; len(reqs) > 0 && r.artifacts[n-1].Concurrency <= 1 {
			prev = &reqs[len(reqs)-1]
		}
	}
	var notes []string
	if prev != nil {
		ctx, cancel := context.WithTimeout(context.Background(), time.Minute)
		defer cancel()
		a, errA := r.cfg.TokenIDs(ctx, req.Prompt.Messages)
		b, errB := r.cfg.TokenIDs(ctx, prev.Prompt.Messages)
		if errA == nil && errB == nil {
			n := commonPrefix(a, b)
			ev.CommonPrefix = &n
		} else {
			notes = append(notes, fmt.Sprintf("reading token ids: %v %v", errA, errB))
		}
	} else {
		ev.NoCommonPrefix = "no single request was sent just before the replay (the step before it overlapped its requests), so the prompt the slot held is unknown"
	}
	v := verdict.DecideBySlot(ev).AsReplay()
	v.Notes = append(v.Notes, notes...)
	if c := req.Counters; c != nil && req.Result.CachedPromptTokens != nil {
		if got, ok := c.Delta.Value(metrics.PromptTokensCached); ok && got != float64(*req.Result.CachedPromptTokens) {
			v.Notes = append(v.Notes, fmt.Sprintf("the cached-tokens counter moved by %.0f but usage reports %d", got, *req.Result.CachedPromptTokens))
		}
	}
	return v
}

func commonPrefix(a, b []int) int {
	n := 0
	for n < len(a) && n < len(b) && a[n] == b[n] {
		n++
	}
	return n
}

func joinErr(a, b string) string {
	if a == "" {
		return b
	}
	return a + "; " + b
}

// routing compares the replica that served the replay with the one that served its original
// request, both read from which replica's counters moved around each; only the routing
// fields are set, and none when either replica is unknown.
func (r *runner) routing(replay *record.Request) verdict.OffloadEvidence {
	if replay.ReplayOf == nil || !replay.Replica.Known() {
		return verdict.OffloadEvidence{}
	}
	for _, a := range r.artifacts {
		if a.Step != replay.ReplayOf.Step {
			continue
		}
		for _, q := range a.Requests {
			if q.IndexInStep != replay.ReplayOf.Request || !q.Replica.Known() {
				continue
			}
			elsewhere := q.Replica.Replica != replay.Replica.Replica
			return verdict.OffloadEvidence{RoutedElsewhere: &elsewhere, OriginalReplica: q.Replica.Replica, ReplayReplica: replay.Replica.Replica}
		}
	}
	return verdict.OffloadEvidence{}
}

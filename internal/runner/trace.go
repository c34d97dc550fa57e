package runner

import (
	"context"
	"crypto/sha256"
	"encoding/binary"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"net/http/httptrace"
	"runtime"
	"slices"
	"sync"
	"sync/atomic"
	"time"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// MaxTraceInFlight bounds an open loop's requests in flight: past it a request waits for one
// to finish, and its dispatch lag shows the wait.
const MaxTraceInFlight = scenarios.MaxConcurrency

// traceProgressEvery throttles a trace step's progress reports.
const traceProgressEvery = 250 * time.Millisecond

// traceJob is one trace request with its prompt built, ready to send.
type traceJob struct {
	index     int
	line      int
	traceTime time.Duration
	input     int
	output    int // the trace's output_length
	maxTokens int // asked: output_length, at least 1
	hashIDs   int
	prompt    *prompts.StreamedPrompt // a block-exact prompt by its blocks (nil once encoded into body)
	text      string                  // the trace's text_input ("" once encoded into body)
	chat      bool                    // sent to the chat endpoint: the trace's messages, as given
	messages  []prompts.Message       // nil once encoded into body
	identity  string
	// body is the request's JSON body, encoded ahead of its due time: a block-exact prompt's
	// is written from the block cache as it is sent, so a request in flight holds its block
	// list, not its bytes. nil if it failed to encode (the client then reports why).
	body *client.Body
	due  time.Time // when it is to go out
	// ctx notes in wrote when its body was written to the connection (httptrace), in
	// nanoseconds since the step started; 0 until then, and with a client that is not HTTP.
	ctx   context.Context
	wrote *atomic.Int64
}

// traceDone is a sent trace request with what was measured: when a worker took it up, and
// when its body was written (zero when the client did not say).
type traceDone struct {
	job       traceJob
	startedAt time.Time
	wroteAt   time.Time
	res       client.Result
}

// runTraceStep replays a trace step's window: each request's prompt built block for block
// just in time (prompts.BlockBuilder), sent as a streamed completion at its timestamp x
// time_scale (open loop) or as soon as one of concurrency slots is free (closed loop), while
// a scraper reads the counters at a fixed interval. Requests overlap, so only the step's
// counters and the series mean anything; each request is journaled the moment it ends. At
// the end the ideal at the server's pool sizes is computed from the same window.
func (r *runner) runTraceStep(ctx context.Context, k int, st plan.Step, art *record.StepArtifact) {
	ts := st.Step
	sc := r.cfg.Scenario
	tp := st.Trace
	art.Kind = record.KindTrace
	art.DeltaScope = record.ScopeStep
	tr := r.traceReplay(ts, tp)
	art.Trace = tr
	if tp == nil {
		r.fail(fmt.Errorf("step %s: the trace step was not planned", st.ID))
		return
	}
	sel, closeFile, sum, err := plan.OpenTrace(ts)
	if err != nil {
		r.fail(fmt.Errorf("step %s: %w", st.ID, err))
		return
	}
	defer closeFile()
	form := tp.PromptForm
	// A salted run draws fresh blocks (prompts.SaltedSeed); the engine's cache-isolation
	// field is not sent on completions (TensorRT-LLM refuses it there).
	builder, err := prompts.NewBlockBuilder(prompts.BlockConfig{Seed: prompts.SaltedSeed(uint64(r.cur.Seed), sc.Prompt.Salt), BlockTokens: ts.BlockTokens})
	if err != nil {
		r.fail(fmt.Errorf("step %s: %w", st.ID, err))
		return
	}

	idle := sc.Target.IdleTimeout.Duration
	before, _, _, _, errBefore := waitIdle(ctx, r.cfg.Metrics, idle)
	start := time.Now()
	scr, smp := startStepObservers(ctx, r.cfg.Metrics, ts.ScrapeInterval.Duration, sc.Target.SampleInterval.Duration, start, r.origin, before, errBefore == nil)

	var inFlight, peak atomic.Int64
	results := make(chan traceDone, 64)
	var readErr error
	go func() {
		readErr = r.dispatchTrace(ctx, ts, sel, tp.Requests, tp.First, builder, form, start, smp, &inFlight, &peak, results)
		close(results)
	}()

	got := make([]record.Request, 0, tp.Requests)
	prog := traceProgress{step: st.ID, total: tp.Requests, start: start}
	for d := range results {
		rec := r.traceRecord(st, d, start)
		if !r.recordRequest(ctx, k, rec) {
			continue
		}
		got = append(got, rec)
		prog.add(rec)
		if time.Since(prog.last) >= traceProgressEvery {
			r.emit(prog.event(scr, before, errBefore == nil, int(inFlight.Load()), false))
		}
	}
	final := prog.event(scr, before, errBefore == nil, 0, true)
	if readErr != nil {
		// Planning read the whole window: a line that now fails to read was changed since.
		r.fail(fmt.Errorf("step %s: %s changed since it was planned: %w", st.ID, ts.Source.Name(), readErr))
	}
	samples := smp.finish()
	art.Samples = &samples
	tr.Series, tr.ScrapeErrors = scr.finish()
	after, _, _, _, errAfter := waitIdle(context.WithoutCancel(ctx), r.cfg.Metrics, idle)
	sortByIndex(got)
	art.Requests = got
	tr.PeakInFlight = int(peak.Load())
	if r.traits.BySlot {
		tr.SlotSplitUnavailable = r.slotSplits(ts, got, tr.PeakInFlight)
	}
	if !ts.ClosedLoop() {
		// An open loop asks for no concurrency: the step reports the most it reached.
		art.Concurrency = tr.PeakInFlight
	}
	if readErr == nil && ctx.Err() == nil {
		// The replay stopped at the planned count; the rest of the file must be as planned too.
		if err := sameTrace(ts, tp, sum); err != nil {
			r.fail(fmt.Errorf("step %s: %w", st.ID, err))
		} else {
			tr.SHA256 = tp.SHA256
		}
	}
	art.Counters, art.CountersError = derive.StepCounters(before, after, errBefore, errAfter, scr.reset())
	// The closing line says what the record says: the step's counters to the end, not the
	// scraper's last reading, which misses the last interval.
	final.Tiers = record.TierShares{}
	if art.Counters != nil {
		final.Tiers = derive.SplitTiers(art.Counters).Shares()
	}
	if t, ok := derive.SlotTiers(got); ok && final.Tiers.Host == nil {
		final.Tiers = t
	}
	r.emit(final)
	tr.Ideal, tr.IdealUnavailable = r.traceIdeal(ts, tp, completedIndexes(got))
}

// slotSplits sets each request's split between llama.cpp's live slot and host prompt cache
// (trace.SlotHistory), or says why it cannot: the split follows the slot's history, known
// only when one request ran at a time on one slot (kvbench does not read which slot served a
// request), every request came back with its cached tokens, and all of them completed.
func (r *runner) slotSplits(ts *scenarios.Step, got []record.Request, peak int) string {
	switch {
	case r.cfg.Slots != 1:
		return fmt.Sprintf("the server has %d slots (0: unknown) and kvbench does not read which slot served each request: the live slot's share and the host cache's are not known apart (run llama-server with -np 1)", r.cfg.Slots)
	case peak > 1:
		return fmt.Sprintf("up to %d requests were in flight at once: the slot's history is not one request after another (replay with concurrency = 1)", peak)
	}
	for _, q := range got {
		if q.Result.Failed() || q.Result.PromptTokens == nil || q.Result.CachedPromptTokens == nil || q.Trace == nil {
			return fmt.Sprintf("request %d failed or came back without its prompt or cached tokens: the slot's contents after it are not known", q.IndexInStep)
		}
	}
	sel, closeFile, _, err := plan.OpenTrace(ts)
	if err != nil {
		return "reading the trace again: " + err.Error()
	}
	defer closeFile()
	h := trace.SlotHistory{BlockTokens: ts.BlockTokens}
	splits := make([]*record.SlotSplit, len(got))
	var req trace.Request
	for i, at := 0, 0; i < len(got); at++ {
		if err := sel.Next(&req); err != nil {
			return "reading the trace again: " + err.Error()
		}
		if at != got[i].IndexInStep {
			continue
		}
		res := got[i].Result
		if req.InputLength != *res.PromptTokens {
			return fmt.Sprintf("line %d: the server counted %d prompt tokens, the trace says %d: the prompt was not sent token-exact, so its shared prefix is not known", got[i].Trace.Line, *res.PromptTokens, req.InputLength)
		}
		live, host := h.Split(&req, *res.CachedPromptTokens)
		splits[i] = &record.SlotSplit{LiveTokens: live, HostTokens: host, Method: record.TierBySlotHistory}
		i++
	}
	for i, sp := range splits {
		got[i].Trace.Slot = sp
	}
	return ""
}

// sameTrace checks that the trace's bytes, read to the end by sum, are those planning read.
func sameTrace(ts *scenarios.Step, tp *plan.TracePlan, sum func() (string, error)) error {
	sha, err := sum()
	if err != nil {
		return err
	}
	if sha != tp.SHA256 {
		return fmt.Errorf("%s changed since it was planned (sha256 %s now, %s planned)", ts.Source.Name(), sha, tp.SHA256)
	}
	return nil
}

// completedIndexes are the window positions of the requests that completed, ascending
// (reqs in trace order).
func completedIndexes(reqs []record.Request) []int {
	var idx []int
	for _, q := range reqs {
		if !q.Result.Failed() {
			idx = append(idx, q.IndexInStep)
		}
	}
	return idx
}

// traceReplay is the artifact's trace section as the step starts.
func (r *runner) traceReplay(ts *scenarios.Step, tp *plan.TracePlan) *record.TraceReplay {
	tr := &record.TraceReplay{
		File: ts.Source.Name(), NamedBy: "scenario", BlockTokens: ts.BlockTokens,
		StartSeconds: ts.Start.Seconds(), DurationSeconds: ts.Duration.Seconds(), RequestLimit: ts.Requests, MaxInputTokens: ts.MaxInputTokens,
		Mode: record.TraceOpenLoop, IgnoreEOS: !r.cfg.Engine.NoIgnoreEOS,
		ScrapeIntervalMS: ms(ts.ScrapeInterval.Duration), Series: []record.SeriesPoint{},
	}
	if ts.Source.NamedByUser() {
		tr.NamedBy = "command line"
	}
	if !ts.Shard.IsWhole() {
		tr.Shard = &record.TraceShard{Index: ts.Shard.Index, Count: ts.Shard.Count}
	}
	if ts.ClosedLoop() {
		tr.Mode, tr.Concurrency = record.TraceClosedLoop, ts.Concurrency
	} else {
		scale := ts.TimeScale
		tr.TimeScale = &scale
	}
	if tp != nil {
		tr.PlannedRequests, tr.DroppedRequests, tr.PromptForm, tr.SpanSeconds = tp.Requests, tp.Dropped, tp.PromptForm, tp.SpanSeconds
		tr.Format = tp.Format
	}
	if p := r.cfg.Preflight; p != nil {
		if d, ok := p.TraceTextBlocks[ts.ID]; ok {
			tr.TextBlocks = &d
		}
	}
	return tr
}

// promptsAhead is how many prompts are built before their turn: building a long prompt
// takes milliseconds, which must not delay a request due right after the previous one.
const promptsAhead = 4

// traceWorkersAhead is how many workers an open loop starts before its first request.
const traceWorkersAhead = 16

// dispatchTrace reads the window and sends its requests: a builder goroutine builds each
// prompt and encodes its body before its turn (just in time: at most the requests in flight
// and promptsAhead more are held), and this goroutine hands each to a waiting worker at its
// due time (open loop) or when a slot frees up (closed loop), so that nothing is built,
// encoded or started between a request's due time and its write. An open loop's times count
// from first, the window's first request of every shard (--shard). It returns a read error
// of the trace, after every request it sent has finished.
func (r *runner) dispatchTrace(ctx context.Context, ts *scenarios.Step, sel *trace.Selection, planned int, first time.Duration, b *prompts.BlockBuilder, form string,
	start time.Time, smp *sampler, inFlight, peak *atomic.Int64, results chan<- traceDone) error {
	// A request's first output is when its blocks are all allocated: the sampler reads the
	// KV usage then (at most once an interval, however many requests there are).
	firstOutput := func(p client.Progress) {
		if p.Phase == client.PhaseDecode && p.Tokens <= 1 {
			smp.sampleNow()
		}
	}
	slots := MaxTraceInFlight
	if ts.ClosedLoop() {
		slots = ts.Concurrency
	}
	sem := make(chan struct{}, slots)
	var wg sync.WaitGroup
	defer wg.Wait()
	jobs := make(chan traceJob, promptsAhead)
	bctx, stopBuilder := context.WithCancel(ctx)
	defer stopBuilder()
	var buildErr error
	ahead := func(job *traceJob) { r.prepareTraceJob(ctx, ts, job, start) }
	primed := make(chan struct{}) // closed once promptsAhead requests are built, or all are
	go func() {
		defer close(jobs)
		buildErr = buildTraceJobs(bctx, ts, sel, planned, b, form, ahead, jobs, primed)
	}()
	defer func() {
		stopBuilder()
		for range jobs { // not sent: the run stopped
		}
	}()
	// Workers send the requests this goroutine hands them when due: started ahead and kept
	// (a new goroutine, its stack grown by the client's calls, costs time at the due
	// instant), one more started only when none is idle.
	ready := make(chan traceJob) // unbuffered: a hand-over succeeds only to an idle worker
	send := func(job traceJob) {
		startedAt := time.Now()
		var res client.Result
		if job.chat {
			res = r.traceChat(job.ctx, ts, &job, firstOutput)
		} else {
			res = r.completions().StreamCompletion(job.ctx, r.traceRequest(ts, &job), firstOutput)
		}
		var wroteAt time.Time
		if w := job.wrote.Load(); w > 0 {
			wroteAt = start.Add(time.Duration(w))
		}
		job.body = nil
		inFlight.Add(-1)
		<-sem
		results <- traceDone{job: job, startedAt: startedAt, wroteAt: wroteAt, res: res}
	}
	startWorker := func(first *traceJob) {
		wg.Add(1)
		go func() {
			defer wg.Done()
			if first != nil {
				send(*first)
			}
			for job := range ready {
				send(job)
			}
		}()
	}
	defer close(ready) // before wg.Wait: idle workers end
	for range min(slots, traceWorkersAhead) {
		startWorker(nil)
	}
	// An open loop's clock starts once the first requests are built: were it started with
	// the step, those due in its first milliseconds would go out late by their building.
	select {
	case <-primed:
	case <-ctx.Done():
		return nil
	}
	origin := time.Now()
	timer := time.NewTimer(0)
	defer timer.Stop()
	for job := range jobs {
		select {
		case sem <- struct{}{}:
		case <-ctx.Done():
			return nil
		}
		if ctx.Err() != nil { // a slot and the end can come at once: the end wins
			<-sem
			return nil
		}
		if ts.ClosedLoop() {
			job.due = time.Now() // a slot freed up: it is due now
		} else {
			job.due = origin.Add(time.Duration(float64(job.traceTime-first) * ts.TimeScale))
			if !sleepUntil(ctx, timer, job.due) {
				<-sem
				return nil
			}
		}
		n := inFlight.Add(1)
		for p := peak.Load(); n > p && !peak.CompareAndSwap(p, n); p = peak.Load() {
		}
		select {
		case ready <- job: // an idle worker takes it at once
		default:
			startWorker(&job)
		}
		// The worker waits in this goroutine's run slot until it yields: let it go out now.
		runtime.Gosched()
	}
	if ctx.Err() != nil {
		return nil
	}
	return buildErr
}

// buildTraceJobs reads the window and builds each request's prompt in order onto jobs; it
// returns a read error of the trace, or nil at the window's end, after the planned count
// (lines appended since planning are not replayed), or when ctx ends.
func buildTraceJobs(ctx context.Context, ts *scenarios.Step, sel *trace.Selection, planned int, b *prompts.BlockBuilder, form string,
	ahead func(*traceJob), jobs chan<- traceJob, primed chan<- struct{}) error {
	defer func() {
		if primed != nil {
			close(primed)
		}
	}()
	var req trace.Request
	var scratch promptScratch
	for i := 0; i < planned; i++ {
		err := sel.Next(&req)
		if errors.Is(err, io.EOF) {
			return nil
		}
		if err != nil {
			return err
		}
		job := traceJob{index: i, line: req.Line, traceTime: req.Timestamp, input: req.InputLength, output: req.OutputLength,
			maxTokens: plan.OutputTokens(&req), hashIDs: len(req.HashIDs)}
		if err = buildTracePrompt(&job, b, &req, form, &scratch); err != nil {
			return fmt.Errorf("%s:%d: %w", ts.Source.Name(), req.Line, err)
		}
		ahead(&job)
		select {
		case jobs <- job:
		case <-ctx.Done():
			return nil
		}
		if i+1 == promptsAhead {
			close(primed)
			primed = nil
		}
	}
	return nil
}

// timerEarly is how long before a request's due time the dispatcher's timer fires: a timer
// wakes late by up to a millisecond or two (the host's scheduling), so it is set early and the
// rest is waited out yielding the processor, which costs at most that much CPU a request.
const timerEarly = time.Millisecond

// sleepUntil waits for t on a reused timer, the last timerEarly yielding; false when ctx ends
// first.
func sleepUntil(ctx context.Context, timer *time.Timer, t time.Time) bool {
	if d := time.Until(t) - timerEarly; d > 0 {
		timer.Reset(d)
		select {
		case <-timer.C:
		case <-ctx.Done():
			if !timer.Stop() {
				<-timer.C
			}
			return false
		}
	}
	for time.Now().Before(t) {
		runtime.Gosched()
	}
	return ctx.Err() == nil
}

// promptScratch is buildTracePrompt's buffers, reused across calls.
type promptScratch struct {
	bytes []byte
	ids   []int32
}

// buildTracePrompt builds job's prompt and its identity: the sha256 of its token ids (4 bytes
// each, little-endian) or of its text. A block-exact prompt is kept by its blocks
// (prompts.StreamedPrompt); its tokens are built here only to be hashed.
func buildTracePrompt(job *traceJob, b *prompts.BlockBuilder, req *trace.Request, form string, scratch *promptScratch) error {
	var err error
	if req.Text != "" { // the trace's own prompt (AIPerf's text_input), sent as given
		job.text = req.Text
		sum := sha256.Sum256([]byte(req.Text))
		job.identity = hex.EncodeToString(sum[:])
		return nil
	}
	if req.Messages != nil { // the trace's own chat (AIPerf's messages), sent as given
		job.chat = true
		job.messages = make([]prompts.Message, len(req.Messages))
		for i, m := range req.Messages {
			job.messages[i] = prompts.Message{Role: m.Role, Content: m.Content}
		}
		text, _ := json.Marshal(job.messages) // strings only: it cannot fail
		sum := sha256.Sum256(text)
		job.identity = hex.EncodeToString(sum[:])
		return nil
	}
	if form == scenarios.PromptFormText {
		if scratch.bytes, err = b.AppendText(scratch.bytes[:0], req.HashIDs, req.InputLength, uint64(req.Line)); err != nil {
			return err
		}
		sum := sha256.Sum256(scratch.bytes)
		job.identity = hex.EncodeToString(sum[:])
		job.prompt, err = b.TextPrompt(req.HashIDs, req.InputLength, uint64(req.Line))
		return err
	}
	if scratch.ids, err = b.AppendTokenIDs(scratch.ids[:0], req.HashIDs, req.InputLength, uint64(req.Line)); err != nil {
		return err
	}
	scratch.bytes = scratch.bytes[:0]
	for _, id := range scratch.ids {
		scratch.bytes = binary.LittleEndian.AppendUint32(scratch.bytes, uint32(id))
	}
	sum := sha256.Sum256(scratch.bytes)
	job.identity = hex.EncodeToString(sum[:])
	job.prompt, err = b.TokenIDPrompt(req.HashIDs, req.InputLength, uint64(req.Line))
	return err
}

// completions is the streamer of trace requests.
func (r *runner) completions() CompletionStreamer {
	if r.cfg.Completions != nil {
		return r.cfg.Completions
	}
	if c, ok := r.cfg.Chat.(CompletionStreamer); ok {
		return c
	}
	return noCompletions{}
}

// noCompletions fails every request: the run was configured without a completions client.
type noCompletions struct{}

func (noCompletions) StreamCompletion(_ context.Context, req client.CompletionRequest, _ func(client.Progress)) client.Result {
	return client.Result{StartedAt: time.Now().UTC(), Model: req.Model, ErrorKind: client.ErrorKindInvalidRequest, Error: "no completions client configured"}
}

// completionRequest is a trace step's request fields for a request asking output tokens:
// max_tokens its output length, ignore_eos where the engine takes it, the scenario's
// temperature and extra_body.
func (r *runner) completionRequest(ts *scenarios.Step, output int) client.CompletionRequest {
	sc := r.cfg.Scenario
	f := sc.RequestFor(ts)
	return client.CompletionRequest{
		Model: sc.Target.Model, MaxTokens: output, Temperature: float32(f.Temperature),
		IgnoreEOS: !r.cfg.Engine.NoIgnoreEOS, ExtraBody: f.ExtraBody, Timeout: sc.Request.Timeout.Duration,
		CachedTokensDetails: r.cfg.Engine.RequestTier,
	}
}

// traceRequest is job as sent: its body encoded ahead, or (before that, or where encoding
// failed, which the client then reports) its prompt.
func (r *runner) traceRequest(ts *scenarios.Step, job *traceJob) client.CompletionRequest {
	req := r.completionRequest(ts, job.maxTokens)
	req.Body = job.body
	if job.prompt != nil {
		req.PromptJSON = job.prompt
	} else {
		req.PromptText = job.text
	}
	return req
}

// traceChat sends a line's messages as given to the chat endpoint, with the fields a
// completion of the step would carry.
func (r *runner) traceChat(ctx context.Context, ts *scenarios.Step, job *traceJob, progress func(client.Progress)) client.Result {
	if r.cfg.Chat == nil {
		return client.Result{StartedAt: time.Now().UTC(), Model: r.cfg.Scenario.Target.Model, ErrorKind: client.ErrorKindInvalidRequest, Error: "no chat client configured"}
	}
	return r.cfg.Chat.StreamChat(ctx, r.traceChatRequest(ts, job), progress)
}

// traceChatRequest is a messages line as sent (traceRequest).
func (r *runner) traceChatRequest(ts *scenarios.Step, job *traceJob) client.ChatRequest {
	c := r.completionRequest(ts, job.maxTokens)
	return client.ChatRequest{Model: c.Model, Messages: job.messages, Body: job.body, MaxTokens: c.MaxTokens, Temperature: c.Temperature,
		IgnoreEOS: c.IgnoreEOS, ExtraBody: c.ExtraBody, Timeout: c.Timeout, CachedTokensDetails: c.CachedTokensDetails}
}

// prepareTraceJob encodes job's body ahead of its due time, in place of its prompt, and gives
// it the context that notes when the body was written, in nanoseconds since start.
func (r *runner) prepareTraceJob(ctx context.Context, ts *scenarios.Step, job *traceJob, start time.Time) {
	// The body carries the prompt: holding it twice would double a request's memory.
	if job.chat {
		if body, err := client.EncodeChat(r.traceChatRequest(ts, job)); err == nil {
			job.body, job.messages = body, nil
		}
	} else if body, err := client.EncodeCompletion(r.traceRequest(ts, job)); err == nil {
		job.body, job.text, job.prompt = body, "", nil
	}
	wrote := new(atomic.Int64)
	job.wrote = wrote
	job.ctx = httptrace.WithClientTrace(ctx, &httptrace.ClientTrace{WroteRequest: func(info httptrace.WroteRequestInfo) {
		if info.Err == nil {
			wrote.Store(max(int64(time.Since(start)), 1))
		}
	}})
}

// traceRecord is a sent trace request as the record keeps it: its dispatch lag runs from its
// due time to its body written, what the server saw, or where the client did not say (not
// HTTP), to when a worker took it up.
func (r *runner) traceRecord(st plan.Step, d traceDone, start time.Time) record.Request {
	j := d.job
	startLag := ms(d.startedAt.Sub(j.due))
	lag, written := startLag, !d.wroteAt.IsZero()
	if written {
		lag = ms(d.wroteAt.Sub(j.due))
	}
	return record.Request{
		Step: st.ID, IndexInStep: j.index, Ordinal: j.index, PlannedTokens: j.input,
		Prompt: record.Prompt{Tokens: j.input, TokenCounting: st.Trace.PromptForm, WithinTolerance: true, Identity: j.identity},
		Result: d.res,
		Trace: &record.TraceRequest{
			Line: j.line, TraceTimeMS: ms(j.traceTime), ScheduledMS: ms(j.due.Sub(start)), DispatchLagMS: lag, StartLagMS: &startLag, BodyWritten: written,
			InputLength: j.input, OutputLength: j.output, MaxTokens: j.maxTokens, HashIDs: j.hashIDs,
		},
	}
}

// sortByIndex puts requests, which finish out of order, in trace order.
func sortByIndex(reqs []record.Request) {
	slices.SortFunc(reqs, func(a, b record.Request) int { return a.IndexInStep - b.IndexInStep })
}

// traceIdeal is the ideal at the server's pool sizes over the window's requests that
// completed, at positions done (docs/traces.md): a replay stopped or partly failed is held
// against what it served, not the whole window. The GPU pool is the one the run resolved,
// holding each request's partial block and output as an engine's pool does, and the host
// tier's GiB in tokens at the stored bytes per token the scenario or the server gives. It
// says why when a size is unknown, no request completed, or the trace changed since planning.
func (r *runner) traceIdeal(ts *scenarios.Step, tp *plan.TracePlan, done []int) (*record.IdealTiers, string) {
	if f := tp.Format; f != nil && !f.PrefixInformation {
		return nil, fmt.Sprintf("%s (the %s trace names no blocks: lengths and arrivals only)", record.NoPrefixInformation, f.Format)
	}
	if len(done) == 0 {
		return nil, "no request of the step completed"
	}
	setup := r.cfg.Engine.Resolve(r.cfg.Capacity...)
	gpu := int64(setup.GPUKVTokens)
	if gpu <= 0 {
		return nil, "the GPU KV pool size is unknown (no cache config on the server and no server.gpu_kv_tokens)"
	}
	if setup.Topology == capacity.SingleSlot {
		return nil, "the engine keeps one live slot per sequence, not a shared LRU block pool: the ideal does not model it"
	}
	ideal := &record.IdealTiers{GPUTokens: gpu, GPUTokensSource: setup.GPUKVTokensSource, BlockTokens: ts.BlockTokens, PoolHoldsOutput: true}
	switch {
	case setup.CPUOffloadGiB <= 0:
		ideal.HostTokensSource = "no host tier"
		if src := setup.CPUOffloadGiBSource; src != "" {
			ideal.HostTokensSource += " (" + src + ")"
		}
	case setup.StoreBytesPerToken <= 0:
		return nil, fmt.Sprintf("the host tier's %s GiB cannot be put in tokens: the stored bytes per token is unknown (set server.store_bytes_per_token; a trace's store counters cannot give it, since stores skip what the tier holds)", units.Exact(setup.CPUOffloadGiB))
	default:
		ideal.HostTokens = int64(setup.CPUOffloadGiB * capacity.GiB / setup.StoreBytesPerToken)
		ideal.HostTokensSource = fmt.Sprintf("%s GiB (%s) / %s bytes per stored token (%s)", units.Exact(setup.CPUOffloadGiB), units.Text(setup.CPUOffloadGiBSource), units.Whole(setup.StoreBytesPerToken), units.Text(setup.StoreBytesSource))
	}
	sel, closeFile, sum, err := plan.OpenTrace(ts)
	if err != nil {
		return nil, "reading the trace again: " + err.Error()
	}
	defer closeFile()
	a, err := trace.Analyze(trace.SubsetOf(sel, done), trace.Config{BlockTokens: ts.BlockTokens, Tiers: &trace.Tiers{GPUTokens: ideal.GPUTokens, HostTokens: ideal.HostTokens, PoolHoldsOutput: true}})
	if err != nil {
		return nil, "analysing the trace: " + err.Error()
	}
	if err := sameTrace(ts, tp, sum); err != nil {
		return nil, err.Error()
	}
	t := a.Tiers
	ideal.PromptTokens, ideal.IdealShares, ideal.MaxHitRate = a.PromptTokens, t.IdealShares, a.MaxHitRate
	ideal.BlockSizeNote = blockSizeNote(r.cfg.BlockSize, ts.BlockTokens)
	return ideal, ""
}

// blockSizeNote says what a server block size of b means for an ideal in blocks of bt
// (docs/traces.md, "When the server's block size is not the trace's").
func blockSizeNote(b, bt int) string {
	switch {
	case b <= 0:
		return "the server's block size is unknown: the ideal assumes it is block_tokens"
	case b == bt:
		return ""
	case bt%b == 0:
		return fmt.Sprintf("the server caches blocks of %d tokens, which divides block_tokens (%d): shared prefixes line up, and measured hits can exceed the ideal by less than %d tokens a request (the server also caches the whole %d-token blocks of a partial trace block)", b, bt, bt, b)
	case b > bt:
		return fmt.Sprintf("the server caches blocks of %d tokens, larger than block_tokens (%d): an engine block spans trace blocks and is shared only when all of them are, so measured hits fall short of the ideal (a shared prefix under %d tokens is worth nothing)", b, bt, b)
	default:
		return fmt.Sprintf("the server caches blocks of %d tokens, which does not divide block_tokens (%d): engine blocks straddle trace blocks, a shared prefix loses up to %d tokens at its end, and the shares match the ideal only approximately", b, bt, b-1)
	}
}

// traceProgress keeps what a trace step's progress reports say.
type traceProgress struct {
	step        string
	total, done int
	failed      int
	lags        []float64
	start, last time.Time
}

func (p *traceProgress) add(rec record.Request) {
	p.done++
	if rec.Result.Failed() {
		p.failed++
	}
	if rec.Trace != nil {
		p.lags = append(p.lags, rec.Trace.DispatchLagMS)
	}
}

// event is the report now: the lag percentiles so far, and the tier shares from the step's
// first reading (before) to the scraper's latest.
func (p *traceProgress) event(scr *scraper, before metrics.Snapshot, haveBefore bool, inFlight int, final bool) events.TraceProgress {
	p.last = time.Now()
	e := events.TraceProgress{Step: p.step, Done: p.done, Total: p.total, Failed: p.failed, InFlight: inFlight, Elapsed: time.Since(p.start), Final: final}
	lag := derive.PercentilesOf(p.lags)
	if lag.P50 != nil {
		e.LagP50MS, e.LagP99MS = *lag.P50, *lag.P99
	}
	if latest, ok := scr.latest(); ok && haveBefore {
		if d := derive.NewCounters(before, latest); d.Valid {
			e.Tiers = derive.SplitTiers(d).Shares()
		}
	}
	return e
}

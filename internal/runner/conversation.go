package runner

import (
	"context"
	"fmt"
	"sort"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/plan"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
	"github.com/anvil-serving/kvbench/prompts"
	"github.com/anvil-serving/kvbench/scenarios"
)

// scrapeTimeout bounds one interval scrape of a conversation step.
const scrapeTimeout = 10 * time.Second

// runConversationStep runs a conversation step: one goroutine per user, each sending its
// turns in order (the whole history, then the answer appended), while a scraper reads the
// counters at a fixed interval. Requests overlap, so only the step's counters and the
// interval series mean anything; each turn is journaled the moment it ends.
func (r *runner) runConversationStep(ctx context.Context, k int, st plan.Step, art *record.StepArtifact) {
	cs := st.Step
	sc := r.cfg.Scenario
	art.Kind = record.KindConversation
	art.DeltaScope = record.ScopeStep
	art.Concurrency = cs.Users
	idle := sc.Target.IdleTimeout.Duration
	before, _, _, _, errBefore := waitIdle(ctx, r.cfg.Metrics, idle)
	start := time.Now()
	trace := &record.ConversationTrace{Users: cs.Users, Turns: cs.Turns, ScrapeIntervalMS: ms(cs.ScrapeInterval.Duration)}
	scr, smp := startStepObservers(ctx, r.cfg.Metrics, cs.ScrapeInterval.Duration, sc.Target.SampleInterval.Duration, start, r.origin, before, errBefore == nil)

	seed := prompts.SaltedSeed(uint64(sc.Prompt.Seed), sc.Prompt.Salt)
	system := prompts.SystemPrompt(seed, cs.SystemPromptTokens)
	sysTokens := 0
	if system != "" {
		sysTokens = prompts.EstimateTokens([]prompts.Message{{Role: "system", Content: system}})
	}
	results := make(chan record.Request)
	var wg sync.WaitGroup
	for u := range cs.Users {
		wg.Add(1)
		go func() {
			defer wg.Done()
			r.converse(ctx, st, u, system, sysTokens, results)
		}()
	}
	go func() {
		wg.Wait()
		close(results)
	}()
	var got []record.Request
	for rec := range results {
		if r.recordRequest(ctx, k, rec) {
			got = append(got, rec)
		}
	}
	samples := smp.finish()
	art.Samples = &samples
	trace.Series, trace.ScrapeErrors = scr.finish()
	after, _, _, _, errAfter := waitIdle(context.WithoutCancel(ctx), r.cfg.Metrics, idle)
	sort.Slice(got, func(i, j int) bool { return got[i].IndexInStep < got[j].IndexInStep })
	art.Requests = got
	art.Conversation = trace
	art.Counters, art.CountersError = derive.StepCounters(before, after, errBefore, errAfter, scr.reset())
}

// converse is one user's chat: arrive, then for each turn think, ask and keep the answer.
// A failed turn ends the user's conversation: its history has no answer to carry on from.
func (r *runner) converse(ctx context.Context, st plan.Step, user int, system string, sysTokens int, out chan<- record.Request) {
	cs := st.Step
	sc := r.cfg.Scenario
	if !sleepCtx(ctx, cs.ArrivalDelay(user)) {
		return
	}
	chat := prompts.NewChat(prompts.SaltedSeed(uint64(sc.Prompt.Seed), sc.Prompt.Salt), user, system, cs.TurnTokens)
	for turn := range cs.Turns {
		if turn > 0 && !sleepCtx(ctx, cs.ThinkPause(sc.Prompt.Seed, user, turn)) {
			return
		}
		msgs := chat.Ask(turn)
		tokens := prompts.EstimateTokens(msgs)
		index := user*cs.Turns + turn
		req := plan.Request{
			PlannedRequest: scenarios.PlannedRequest{Step: st.ID, IndexInStep: index, Ordinal: index, PlannedTokens: tokens},
			Prompt: prompts.Prompt{Index: index, PlannedTokens: tokens, Messages: msgs, Prompt: record.Prompt{
				Tokens: tokens, TokenCounting: prompts.Estimated,
				WithinTolerance: true, SharedPrefixTokens: sysTokens, Identity: prompts.Identity(msgs),
				Shape: prompts.ChatShape(uint64(sc.Prompt.Seed), user, turn, cs.TurnTokens, cs.SystemPromptTokens),
			}},
		}
		if sysTokens > 0 {
			req.Prompt.SharedPrefixSHA256 = prompts.Identity(msgs[:1])
		}
		res := r.send(ctx, req, nopSampler)
		rec := r.newRequest(st, req)
		rec.Result = res
		rec.Turn = &record.Turn{User: user, Turn: turn}
		out <- rec
		if res.Failed() || ctx.Err() != nil {
			return
		}
		chat.Answer(res.Answer)
	}
}

// nopSampler takes the first-output kicks of conversation requests: with many users they
// would keep the sampler scraping back to back, and the scraper covers the step already.
var nopSampler = &sampler{kick: make(chan struct{}, 1)}

func sleepCtx(ctx context.Context, d time.Duration) bool {
	if d <= 0 {
		return ctx.Err() == nil
	}
	t := time.NewTimer(d)
	defer t.Stop()
	select {
	case <-t.C:
		return true
	case <-ctx.Done():
		return false
	}
}

// scraper reads the counters at a fixed interval and turns each pair of consecutive good
// readings into a series point.
type scraper struct {
	src      MetricsSource
	interval time.Duration
	start    time.Time
	mu       sync.Mutex // guards prev and havePrev, which latest reads
	prev     metrics.Snapshot
	havePrev bool

	series   []record.SeriesPoint
	errors   int
	resetWhy string
	stop     chan struct{}
	done     chan struct{}
	// sampler, when set, takes each reading's gauges too (startStepObservers).
	sampler *sampler
}

func startScraper(ctx context.Context, src MetricsSource, interval time.Duration, start time.Time, first metrics.Snapshot, ok bool, feed *sampler) *scraper {
	s := &scraper{src: src, interval: interval, start: start, prev: first, havePrev: ok, stop: make(chan struct{}), done: make(chan struct{}), sampler: feed}
	go s.loop(ctx)
	return s
}

func (s *scraper) loop(ctx context.Context) {
	defer close(s.done)
	t := time.NewTicker(s.interval)
	defer t.Stop()
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			s.read(context.WithoutCancel(ctx)) // the last interval, up to the end of the step
			return
		case <-t.C:
			s.read(ctx)
		}
	}
}

func (s *scraper) read(ctx context.Context) {
	ctx, cancel := context.WithTimeout(ctx, scrapeTimeout)
	defer cancel()
	snap, err := s.src.Snapshot(ctx)
	if s.sampler != nil {
		s.sampler.take(snap, err)
	}
	if err != nil {
		s.errors++
		return
	}
	if s.havePrev {
		s.series = append(s.series, point(s.prev, snap, ms(time.Since(s.start))))
		if p := s.series[len(s.series)-1]; p.Invalid != "" && s.resetWhy == "" {
			s.resetWhy = p.Invalid
		}
	}
	s.mu.Lock()
	s.prev, s.havePrev = snap, true
	s.mu.Unlock()
}

// latest is the last good reading; false before any.
func (s *scraper) latest() (metrics.Snapshot, bool) {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.prev, s.havePrev
}

// finish stops the scraper after one last reading and returns the series.
func (s *scraper) finish() ([]record.SeriesPoint, int) {
	close(s.stop)
	<-s.done
	return s.series, s.errors
}

// reset is why a counter went down during the step ("" when none did); call after finish.
func (s *scraper) reset() string { return s.resetWhy }

// point is the interval from a to b.
func point(a, b metrics.Snapshot, at float64) record.SeriesPoint {
	d := derive.NewCounters(a, b)
	p := record.SeriesPoint{AtMS: at}
	if !d.Valid {
		p.Invalid = fmt.Sprintf("interval ending at %s ms: %s", units.Whole(at), d.InvalidReasons[0])
	} else {
		derive.SplitTiers(d).Point(&p)
		p.StoreBytes, p.LoadBytes, p.Preemptions = d.Delta(metrics.StoreBytes), d.Delta(metrics.LoadBytes), d.Delta(metrics.Preemptions)
	}
	gauge := func(g metrics.Gauge) *float64 {
		if r := b.Gauges[g]; r.Present {
			v := r.Value
			return &v
		}
		return nil
	}
	p.KVUsage, p.Running, p.Waiting = gauge(metrics.KVUsage), gauge(metrics.RequestsRunning), gauge(metrics.RequestsWaiting)
	return p
}

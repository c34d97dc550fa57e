package runner

import (
	"context"
	"fmt"
	"strings"
	"sync"
	"time"

	"github.com/anvil-serving/kvbench/harness/client"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/units"
)

// ChatStreamer sends one streamed chat request and measures it (client.Client).
type ChatStreamer interface {
	StreamChat(ctx context.Context, req client.ChatRequest, progress func(client.Progress)) client.Result
}

// CompletionStreamer sends one streamed completion and measures it (client.Client): how a
// trace step sends its block-exact prompts. It must not keep req.PromptTokenIDs once it
// returns: the runner reuses the buffer for a later prompt.
type CompletionStreamer interface {
	StreamCompletion(ctx context.Context, req client.CompletionRequest, progress func(client.Progress)) client.Result
}

// MetricsSource reads the server's counters (metrics.Target).
type MetricsSource interface {
	Snapshot(ctx context.Context) (metrics.Snapshot, error)
}

var (
	_ ChatStreamer       = (*client.Client)(nil)
	_ CompletionStreamer = (*client.Client)(nil)
	_ MetricsSource      = metrics.Target{}
)

// idlePoll is how often the running/waiting gauges are read while waiting for idle.
const idlePoll = 25 * time.Millisecond

// waitIdle polls until the server reports no running or waiting requests, or timeout passes,
// and returns the last snapshot: taken while idle, it serves as the next "before" scrape.
func waitIdle(ctx context.Context, src MetricsSource, timeout time.Duration) (metrics.Snapshot, record.Isolation, time.Duration, bool, error) {
	iso := record.Isolation{IdleCheck: "gauges"}
	start := time.Now()
	deadline := start.Add(timeout)
	for {
		snap, err := src.Snapshot(ctx)
		if err != nil {
			return snap, iso, time.Since(start), false, err
		}
		run, wait := snap.Gauges[metrics.RequestsRunning], snap.Gauges[metrics.RequestsWaiting]
		if !run.Present {
			iso.IdleCheck = "unavailable"
			return snap, iso, time.Since(start), false, nil
		}
		if run.Value == 0 && (!wait.Present || wait.Value == 0) {
			return snap, iso, time.Since(start), false, nil
		}
		if time.Now().After(deadline) {
			return snap, iso, time.Since(start), true, nil
		}
		select {
		case <-ctx.Done():
			return snap, iso, time.Since(start), false, ctx.Err()
		case <-time.After(idlePoll):
		}
	}
}

// sampler reads the KV usage and running gauges at an interval while requests run, keeping
// the series and the peaks (block occupancy is a pool-wide gauge, so it is sampled, not diffed).
type sampler struct {
	src      MetricsSource
	interval time.Duration
	origin   time.Time
	// fed: a scraper reading at the same interval feeds it (startStepObservers), so it has
	// no ticker and reads on a kick only where no reading came for an interval.
	fed bool

	mu          sync.Mutex
	samples     record.Samples
	lastReading time.Time // of either source
	finished    bool      // finish returned the samples: later readings are not theirs
	kick        chan struct{}
	stop        chan struct{}
	done        chan struct{}
}

func startSampler(ctx context.Context, src MetricsSource, interval time.Duration, origin time.Time) *sampler {
	s := newSampler(src, interval, origin)
	go s.loop(ctx)
	return s
}

func newSampler(src MetricsSource, interval time.Duration, origin time.Time) *sampler {
	s := &sampler{src: src, interval: interval, origin: origin, kick: make(chan struct{}, 1), stop: make(chan struct{}), done: make(chan struct{})}
	s.samples.IntervalMS = ms(interval)
	return s
}

// startStepObservers starts the scraper of a step whose requests overlap (its counters'
// series) and the sampler of its gauges. When both read at the same interval the sampler
// takes the scraper's readings instead of ticking on its own, and a kick reads only where
// neither read for an interval (the step's first requests, a step shorter than the
// interval): /metrics is read and parsed once an interval, not up to three times for the
// same figures; at 64 streams those extra scrapes cost the client a twentieth of its CPU.
func startStepObservers(ctx context.Context, src MetricsSource, scrapeEvery, sampleEvery time.Duration, start, origin time.Time,
	before metrics.Snapshot, ok bool) (*scraper, *sampler) {
	if scrapeEvery != sampleEvery {
		return startScraper(ctx, src, scrapeEvery, start, before, ok, nil), startSampler(ctx, src, sampleEvery, origin)
	}
	smp := newSampler(src, sampleEvery, origin)
	smp.fed = true
	go smp.loop(ctx)
	return startScraper(ctx, src, scrapeEvery, start, before, ok, smp), smp
}

func (s *sampler) loop(ctx context.Context) {
	defer close(s.done)
	var tick <-chan time.Time
	if !s.fed {
		t := time.NewTicker(s.interval)
		defer t.Stop()
		tick = t.C
	}
	var lastKick time.Time
	for {
		select {
		case <-ctx.Done():
			return
		case <-s.stop:
			return
		case <-tick:
		case <-s.kick:
			// At most one kicked reading per interval: with many streams a kick comes
			// with every request's first output, and a scrape per request would cost the
			// client more than the streams do. A tick never suppresses a kick: the
			// reading at a request's first output is its peak. Fed, the scraper's
			// reading every interval does.
			if s.fed && time.Since(s.readAt()) < s.interval {
				continue
			}
			if !lastKick.IsZero() && time.Since(lastKick) < s.interval {
				continue
			}
			lastKick = time.Now()
		}
		s.take(s.src.Snapshot(ctx))
	}
}

// take records one reading of the gauges, or its failure; nothing once the sampler finished.
func (s *sampler) take(snap metrics.Snapshot, err error) {
	s.mu.Lock()
	defer s.mu.Unlock()
	if s.finished {
		return
	}
	s.lastReading = time.Now()
	if err != nil {
		s.samples.Errors++
		return
	}
	smp := record.Sample{AtMS: ms(time.Since(s.origin))}
	if r := snap.Gauges[metrics.KVUsage]; r.Present {
		v := r.Value
		smp.KVUsage = &v
		s.samples.PeakKVUsage = maxOf(s.samples.PeakKVUsage, v)
	}
	if r := snap.Gauges[metrics.RequestsRunning]; r.Present {
		v := r.Value
		smp.Running = &v
		s.samples.PeakRunning = maxOf(s.samples.PeakRunning, v)
	}
	s.samples.Count++
	s.samples.Series = append(s.samples.Series, smp)
}

// readAt is when the latest reading was taken; zero before any.
func (s *sampler) readAt() time.Time {
	s.mu.Lock()
	defer s.mu.Unlock()
	return s.lastReading
}

// sampleNow asks for a reading at once without waiting for it, unless another kick was read
// less than an interval ago (or, fed, any reading). The runner calls it at a request's first
// output, when its blocks are allocated: a request shorter than the interval still gets a
// reading at its peak.
func (s *sampler) sampleNow() {
	select {
	case s.kick <- struct{}{}:
	default:
	}
}

// finish stops the sampler and returns what it read.
func (s *sampler) finish() record.Samples {
	close(s.stop)
	<-s.done
	s.mu.Lock()
	defer s.mu.Unlock()
	s.finished = true
	return s.samples
}

func maxOf(p *float64, v float64) *float64 {
	if p == nil || v > *p {
		return &v
	}
	return p
}

func ms(d time.Duration) float64 { return float64(d) / float64(time.Millisecond) }

// isolationSlack is how many tokens a token counter may move beyond the request's usage
// before the window counts as contaminated: engines count the same tokens usage reports, but
// one may count a final stop token usage leaves out. Another request adds at least its chat
// template's tokens, far more.
const isolationSlack = 1

// checkIsolation proves, as far as the server's counters and gauges allow, that w saw only
// the one request res: the prompt and generation token counters moved by what its usage
// reports, the server was idle before and after it, and no second request ran during it.
// Evidence of another request contaminates the window; a check that cannot be made leaves it
// "unchecked", never assumed clean.
func checkIsolation(w *record.Counters, res record.Result, iso record.Isolation, samples record.Samples) {
	var foreign, checked, unchecked []string
	tokens := func(c metrics.Counter, usage *int, what string) {
		d, ok := w.Value(c)
		// A counter printed with too few digits (llama.cpp above 10^6) moves in steps: one
		// step beyond usage is rounding, not another request.
		step := w.Values[c].Resolution
		switch {
		case usage == nil:
			unchecked = append(unchecked, "usage reports no "+what)
		case !ok:
			unchecked = append(unchecked, fmt.Sprintf("no usable %s delta", c))
		case d > float64(*usage+isolationSlack)+step:
			foreign = append(foreign, fmt.Sprintf("%s moved by %s but the request's usage reports %d %s", c, units.Whole(d), *usage, what))
		case step > 1:
			checked = append(checked, fmt.Sprintf("%s moved by %s, usage %d (the counter is printed in steps of %s)", c, units.Whole(d), *usage, units.Whole(step)))
		default:
			checked = append(checked, fmt.Sprintf("%s moved by %s, usage %d", c, units.Whole(d), *usage))
		}
	}
	if res.Failed() {
		unchecked = append(unchecked, "the request failed, so its usage does not bound the counters")
	} else {
		tokens(metrics.PromptTokens, res.PromptTokens, "prompt tokens")
		var out *int
		if res.OutputTokensSource == client.OutputTokensFromUsage {
			out = &res.OutputTokens
		}
		tokens(metrics.GenerationTokens, out, "completion tokens")
	}
	switch {
	case iso.IdleCheck != "gauges":
		unchecked = append(unchecked, "no running-requests gauge")
	case iso.TimedOutBefore:
		foreign = append(foreign, "the running/waiting gauges never reached 0 before the request")
	case iso.TimedOutAfter:
		foreign = append(foreign, "the running/waiting gauges never reached 0 after the request")
	}
	if samples.PeakRunning != nil && *samples.PeakRunning > 1 {
		foreign = append(foreign, fmt.Sprintf("%s requests were running at once during it", units.Whole(*samples.PeakRunning)))
	}
	switch {
	case len(foreign) > 0:
		w.Contaminate(strings.Join(foreign, "; "))
	case len(checked) > 0 && iso.IdleCheck == "gauges":
		w.Isolation = "clean: " + strings.Join(checked, "; ")
	default:
		w.Isolation = "unchecked: " + strings.Join(unchecked, "; ")
	}
}

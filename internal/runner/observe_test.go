package runner

import (
	"context"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/metrics"
)

// TestStepObserversShareOneScrape: a step whose scraper reads at the sampler's interval
// scrapes /metrics once per reading, the sampler taking the scraper's gauges.
func TestStepObserversShareOneScrape(t *testing.T) {
	fake := newFakeMetrics()
	fake.gauges[metrics.KVUsage] = 0.25
	fake.scraped = make(chan struct{}, 1)
	src := &countingMetrics{inner: fake}
	ctx := context.Background()
	before, err := fake.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-fake.scraped // the before reading's
	now := time.Now()
	scr, smp := startStepObservers(ctx, src, 10*time.Millisecond, 10*time.Millisecond, now, now, before, true)
	for src.n.Load() < 4 {
		select {
		case <-fake.scraped:
		case <-time.After(30 * time.Second):
			t.Fatal("no scrape in 30s")
		}
	}
	samples := smp.finish()
	series, errs := scr.finish()
	if errs != 0 {
		t.Fatalf("%d scrape errors", errs)
	}
	if got, want := src.n.Load(), int64(len(series)); got != want {
		t.Fatalf("%d scrapes for %d series points: the sampler scraped on its own", got, want)
	}
	// The fourth reading had begun, so three were taken.
	if samples.Count < 3 || samples.Count > len(series) || len(samples.Series) != samples.Count {
		t.Fatalf("%d samples (%d in the series) from %d readings", samples.Count, len(samples.Series), len(series))
	}
	if samples.PeakKVUsage == nil || *samples.PeakKVUsage != 0.25 || samples.IntervalMS != 10 {
		t.Fatalf("samples %+v", samples)
	}
}

// TestStepObserversKickWithoutReading: a fed sampler reads on a kick where no reading came
// for an interval (a step shorter than it still gets its sample), and not again while one is
// that recent.
func TestStepObserversKickWithoutReading(t *testing.T) {
	fake := newFakeMetrics()
	fake.gauges[metrics.KVUsage] = 0.5
	fake.scraped = make(chan struct{}, 1)
	src := &countingMetrics{inner: fake}
	ctx := context.Background()
	before, err := fake.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	<-fake.scraped
	now := time.Now()
	scr, smp := startStepObservers(ctx, src, time.Hour, time.Hour, now, now, before, true)
	smp.sampleNow()
	select {
	case <-fake.scraped:
	case <-time.After(30 * time.Second):
		t.Fatal("the kick read nothing in 30s")
	}
	for range 5 {
		smp.sampleNow()
	}
	samples := smp.finish()
	series, _ := scr.finish() // its one reading, at the end
	if samples.Count != 1 || samples.PeakKVUsage == nil || *samples.PeakKVUsage != 0.5 {
		t.Fatalf("samples %+v", samples)
	}
	if got := src.n.Load(); got != 2 || len(series) != 1 {
		t.Fatalf("%d scrapes, %d series points; want the kick's and the scraper's last", got, len(series))
	}
}

// TestStepObserversOwnIntervals: a sampler at another interval than the scraper's keeps its
// own readings.
func TestStepObserversOwnIntervals(t *testing.T) {
	fake := newFakeMetrics()
	src := &countingMetrics{inner: fake}
	ctx := context.Background()
	before, err := fake.Snapshot(ctx)
	if err != nil {
		t.Fatal(err)
	}
	now := time.Now()
	scr, smp := startStepObservers(ctx, src, time.Hour, 10*time.Millisecond, now, now, before, true)
	for i := 0; src.n.Load() < 2; i++ {
		if i > 3000 {
			t.Fatal("the sampler did not scrape on its own in 30s")
		}
		time.Sleep(10 * time.Millisecond)
	}
	samples := smp.finish()
	series, _ := scr.finish()
	if samples.Count < 2 || len(series) != 1 {
		t.Fatalf("%d samples, %d series points", samples.Count, len(series))
	}
}

package runs

import (
	"errors"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"sync"
	"sync/atomic"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
)

// TestJournalReadsBackWhatWasAppended: every appended request reads back in order; a last
// line cut short is dropped, a bad line elsewhere is an error naming file and line.
func TestJournalReadsBackWhatWasAppended(t *testing.T) {
	path := filepath.Join(t.TempDir(), JournalName("step-01-seq.json"))
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	for i := 0; i < 3; i++ {
		if err := j.Append(record.Request{Step: "seq", IndexInStep: i}); err != nil {
			t.Fatal(err)
		}
	}
	j.Close()
	if _, err := OpenJournal(path); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("reopening a journal: %v", err)
	}
	f, _ := os.OpenFile(path, os.O_WRONLY|os.O_APPEND, 0)
	f.WriteString(`{"step":"seq","ind`)
	f.Close()
	got, err := ReadJournal(path)
	if err != nil || len(got) != 3 || got[2].IndexInStep != 2 {
		t.Fatalf("read %+v, %v", got, err)
	}
	data, _ := os.ReadFile(path)
	os.WriteFile(path, append([]byte("{oops\n"), data...), 0o644)
	if _, err := ReadJournal(path); err == nil || !strings.Contains(err.Error(), ":1:") {
		t.Fatalf("a bad first line: %v", err)
	}
}

func TestArtifactNames(t *testing.T) {
	long := strings.Repeat("s", 300)
	for _, c := range []struct {
		k, i int
		id   string
	}{{0, 0, "replay"}, {3, 11, "eviction_sequence"}, {0, 104, long}, {2, 1, long}} {
		name := ArtifactName(c.k, c.i, c.id)
		if len(JournalName(name)) > 255 {
			t.Fatalf("%q: journal name of %d bytes", name, len(JournalName(name)))
		}
		for _, n := range []string{name, JournalName(name)} {
			if k, i, ok := parseArtifactName(n); !ok || k != c.k || i != c.i {
				t.Fatalf("%q parsed as %d %d %v, want %d %d", n, k, i, ok, c.k, c.i)
			}
		}
	}
	if ArtifactName(0, 0, "replay") != "step-01-replay.json" || ArtifactName(1, 0, "replay") != "repeat-01-step-01-replay.json" {
		t.Fatal("short ids must keep their names")
	}
	if ArtifactName(0, 0, long) == ArtifactName(0, 0, long[:299]+"t") {
		t.Fatal("two long ids share a file name")
	}
}

// TestReplaceJSONReplacesAtomically: run.json's rewrite replaces the file and leaves no
// temporary file; WriteJSON still refuses the same path.
func TestReplaceJSONReplacesAtomically(t *testing.T) {
	dir := t.TempDir()
	p := filepath.Join(dir, "run.json")
	for i := 1; i <= 3; i++ {
		sum, err := ReplaceJSON(p, map[string]int{"n": i})
		if err != nil {
			t.Fatal(err)
		}
		if got, _ := FileSHA256(p); got != sum {
			t.Fatalf("returned sha %s, file has %s", sum, got)
		}
	}
	data, _ := os.ReadFile(p)
	if string(data) != "{\n  \"n\": 3\n}\n" {
		t.Fatalf("file %q", data)
	}
	if entries, _ := os.ReadDir(dir); len(entries) != 1 {
		t.Fatalf("temp files left behind: %v", entries)
	}
	if _, err := WriteJSON(p, 1); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("WriteJSON over run.json: %v", err)
	}
}

// TestCreateRunDirNeverReuses: a run directory appears with its run.json in it, under a
// fresh name each time, and no temporary directory stays behind.
func TestCreateRunDirNeverReuses(t *testing.T) {
	parent := t.TempDir()
	at := time.Date(2026, 11, 30, 10, 0, 0, 0, time.UTC)
	var dirs []string
	for i := 0; i < 3; i++ {
		d, err := CreateRunDir(parent, "eviction/6x", at, map[string]int{"i": i})
		if err != nil {
			t.Fatal(err)
		}
		dirs = append(dirs, filepath.Base(d))
		if _, err := os.Stat(filepath.Join(d, "run.json")); err != nil {
			t.Fatal(err)
		}
	}
	if dirs[0] != "eviction_6x-20261130T100000Z" || dirs[1] != dirs[0]+"-1" || dirs[2] != dirs[0]+"-2" {
		t.Fatalf("dirs %v", dirs)
	}
	if entries, _ := os.ReadDir(parent); len(entries) != 3 {
		t.Fatalf("entries %v", entries)
	}
}

// BenchmarkJournalAppend: many streams finishing requests at once, as in a 64-stream run
// (SetParallelism(32) starts 32 goroutines per CPU, so a 2-CPU machine gets 64 streams).
func BenchmarkJournalAppend(b *testing.B) {
	j, err := OpenJournal(filepath.Join(b.TempDir(), JournalName("step-01-bench.json")))
	if err != nil {
		b.Fatal(err)
	}
	defer j.Close()
	var fsyncs atomic.Int64
	j.fsync = func() error { fsyncs.Add(1); return j.f.Sync() }
	q := record.Request{Step: "bench", PlannedTokens: 512}
	b.SetParallelism(32)
	b.ResetTimer()
	b.RunParallel(func(pb *testing.PB) {
		for pb.Next() {
			if err := j.Append(q); err != nil {
				b.Error(err)
				return
			}
		}
	})
	b.ReportMetric(float64(fsyncs.Load())/float64(b.N), "fsyncs/op")
}

// TestJournalConcurrentAppends: every one of many concurrent Appends succeeds and its
// request reads back exactly once.
func TestJournalConcurrentAppends(t *testing.T) {
	path := filepath.Join(t.TempDir(), JournalName("step-01-par.json"))
	j, err := OpenJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	const streams, each = 64, 50
	var wg sync.WaitGroup
	errs := make(chan error, streams*each)
	for g := 0; g < streams; g++ {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for i := 0; i < each; i++ {
				if err := j.Append(record.Request{Step: "par", IndexInStep: g*each + i}); err != nil {
					errs <- err
				}
			}
		}()
	}
	wg.Wait()
	close(errs)
	for err := range errs {
		t.Fatal(err)
	}
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	got, err := ReadJournal(path)
	if err != nil {
		t.Fatal(err)
	}
	seen := make(map[int]bool)
	for _, q := range got {
		if seen[q.IndexInStep] {
			t.Fatalf("request %d read twice", q.IndexInStep)
		}
		seen[q.IndexInStep] = true
	}
	if len(seen) != streams*each {
		t.Fatalf("read %d requests, want %d", len(seen), streams*each)
	}
}

// gatedJournal opens a journal whose fsync blocks until the test releases it: each call
// sends on entered, then returns the error received from release (the real fsync if nil).
func gatedJournal(t *testing.T) (j *Journal, entered chan struct{}, release chan error, calls *atomic.Int32) {
	t.Helper()
	j, err := OpenJournal(filepath.Join(t.TempDir(), JournalName("step-01-gate.json")))
	if err != nil {
		t.Fatal(err)
	}
	entered, release, calls = make(chan struct{}), make(chan error), new(atomic.Int32)
	j.fsync = func() error {
		calls.Add(1)
		entered <- struct{}{}
		if err := <-release; err != nil {
			return err
		}
		return j.f.Sync()
	}
	return j, entered, release, calls
}

// within fails the test unless ch delivers within a generous bound (no timing is asserted:
// the bound only keeps a broken journal from hanging the test).
func within[T any](t *testing.T, ch <-chan T, what string) T {
	t.Helper()
	select {
	case v := <-ch:
		return v
	case <-time.After(10 * time.Second):
		t.Fatalf("no %s within 10 s", what)
		panic("unreachable")
	}
}

// TestJournalAppendsDoNotWaitForFsync: Appends return while the background fsync is blocked;
// the flush that was running goes on to cover the lines written meanwhile, so two fsyncs
// serve every Append, and Close has nothing left to sync.
func TestJournalAppendsDoNotWaitForFsync(t *testing.T) {
	j, entered, release, calls := gatedJournal(t)
	if err := j.Append(record.Request{Step: "gate"}); err != nil {
		t.Fatal(err)
	}
	within(t, entered, "background fsync")
	const n = 16
	for i := 1; i <= n; i++ {
		if err := j.Append(record.Request{Step: "gate", IndexInStep: i}); err != nil {
			t.Fatal(err)
		}
	}
	release <- nil
	within(t, entered, "second fsync, for the lines written during the first")
	release <- nil
	if err := j.Close(); err != nil {
		t.Fatal(err)
	}
	if c := calls.Load(); c != 2 {
		t.Fatalf("%d fsyncs, want 2", c)
	}
	if got, err := ReadJournal(j.Path()); err != nil || len(got) != n+1 {
		t.Fatalf("read %d requests, %v", len(got), err)
	}
}

// TestJournalCloseSyncsTheRest: a line not yet covered is fsynced by Close.
func TestJournalCloseSyncsTheRest(t *testing.T) {
	j, entered, release, calls := gatedJournal(t)
	if err := j.Append(record.Request{Step: "gate"}); err != nil {
		t.Fatal(err)
	}
	closed := make(chan error, 1)
	go func() { closed <- j.Close() }()
	within(t, entered, "fsync") // Close's, or the flush's that Close waits for
	release <- nil
	if err := within(t, closed, "Close"); err != nil {
		t.Fatal(err)
	}
	if c := calls.Load(); c != 1 || j.durable != j.written {
		t.Fatalf("%d fsyncs, %d of %d lines durable", c, j.durable, j.written)
	}
}

func TestJournalSyncErrorSticks(t *testing.T) {
	j, entered, release, _ := gatedJournal(t)
	if err := j.Append(record.Request{Step: "gate"}); err != nil {
		t.Fatal(err)
	}
	within(t, entered, "background fsync")
	injected := errors.New("injected EIO")
	release <- injected
	j.mu.Lock()
	for j.syncing {
		j.synced.Wait()
	}
	j.mu.Unlock()
	if err := j.Append(record.Request{Step: "gate"}); !errors.Is(err, injected) {
		t.Fatalf("Append after the failed fsync: %v", err)
	}
	if err := j.Close(); !errors.Is(err, injected) {
		t.Fatalf("Close after the failed fsync: %v", err)
	}
}

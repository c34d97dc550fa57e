package main

import (
	"bufio"
	"bytes"
	"context"
	"errors"
	"fmt"
	"io"
	"math/rand"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"strings"
	"sync"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// TestMain lets a test start kvbench as its own process: the test binary, re-executed with
// KVBENCH_TEST_EXEC=1, runs main with the arguments it was given; with engineProcessEnv set
// it serves the embedded engine for the client-cost benchmark.
func TestMain(m *testing.M) {
	if os.Getenv("KVBENCH_TEST_EXEC") == "1" {
		main()
		return
	}
	if profile := os.Getenv(engineProcessEnv); profile != "" {
		os.Exit(serveEngineProcess(profile))
	}
	os.Exit(m.Run())
}

// crashScenario is small and fast on the tiny profile: two isolated sequences (4 and 3
// requests) and a replay with its cold twin, 9 requests in all.
const crashScenario = `name = "crash"
[server]
gpu_kv_tokens = "server"
[prompt]
shared_prefix_tokens = 64
token_counting = "estimate"
[request]
max_tokens = 8
[[step]]
id = "first"
requests = 4
planned_context_tokens = [400]
[[step]]
id = "second"
requests = 3
planned_context_tokens = [400]
[[step]]
id = "replay"
replay = { step = "first", request = 0 }
`

const crashRequests = 9

// child is kvbench running as a process, its stdout (the console) read line by line.
type child struct {
	cmd    *exec.Cmd
	mu     sync.Mutex
	lines  []string
	read   chan struct{} // closed when stdout is at EOF
	stdout io.Closer     // the console pipe's end the test reads, closed to play `| head`
	stderr bytes.Buffer
}

func startChild(t *testing.T, args ...string) *child {
	t.Helper()
	c := &child{cmd: exec.Command(os.Args[0], args...), read: make(chan struct{})}
	c.cmd.Env = append(os.Environ(), "KVBENCH_TEST_EXEC=1")
	c.cmd.Stderr = &c.stderr
	out, err := c.cmd.StdoutPipe()
	if err != nil {
		t.Fatal(err)
	}
	c.stdout = out
	if err := c.cmd.Start(); err != nil {
		t.Fatal(err)
	}
	go func() {
		defer close(c.read)
		sc := bufio.NewScanner(out)
		for sc.Scan() {
			c.mu.Lock()
			c.lines = append(c.lines, sc.Text())
			c.mu.Unlock()
		}
	}()
	return c
}

// wait reaps the process (bounded: it is killed after limit) and returns its exit code, -1
// when a signal ended it.
func (c *child) wait(t *testing.T, limit time.Duration) int {
	t.Helper()
	timer := time.AfterFunc(limit, func() { c.cmd.Process.Kill() })
	defer timer.Stop()
	<-c.read
	err := c.cmd.Wait()
	var ee *exec.ExitError
	switch {
	case err == nil:
		return 0
	case errors.As(err, &ee):
		return ee.ExitCode()
	default:
		t.Fatal(err)
		return 0
	}
}

var (
	stepLine    = regexp.MustCompile(`^step (\S+): `)
	requestLine = regexp.MustCompile(`^  \[(\d+)\] planned `)
)

// done lists the requests the console reported finished, "step[i]". The runner journals a
// request (fsynced) before it prints its line, so each of them must survive anything.
func (c *child) done() []string {
	c.mu.Lock()
	defer c.mu.Unlock()
	var out []string
	step := ""
	for _, l := range c.lines {
		if m := stepLine.FindStringSubmatch(l); m != nil {
			step = m[1]
		} else if m := requestLine.FindStringSubmatch(l); m != nil {
			out = append(out, step+"["+m[1]+"]")
		}
	}
	return out
}

// waitDone waits until the console reported n finished requests (bounded).
func (c *child) waitDone(t *testing.T, n int) {
	t.Helper()
	for deadline := time.Now().Add(60 * time.Second); time.Now().Before(deadline); time.Sleep(5 * time.Millisecond) {
		if len(c.done()) >= n {
			return
		}
		select {
		case <-c.read:
			if len(c.done()) >= n {
				return
			}
			t.Fatalf("kvbench ended after %d of %d finished requests; console:\n%s", len(c.done()), n, c.console())
		default:
		}
	}
	t.Fatalf("no %d finished requests within 60 s; console:\n%s", n, c.console())
}

func (c *child) console() string {
	c.mu.Lock()
	defer c.mu.Unlock()
	return strings.Join(c.lines, "\n")
}

// loadedRequests lists every request a loaded run holds, "step[i]", repetition 0.
func loadedRequests(r *runs.Run) map[string]bool {
	got := map[string]bool{}
	for _, st := range r.Repetitions[0].Steps {
		for _, q := range st.Requests {
			got[fmt.Sprintf("%s[%d]", st.Step, q.IndexInStep)] = true
		}
	}
	return got
}

// runDirs lists the run directories under out (hidden ones are not runs).
func runDirs(t *testing.T, out string) []string {
	t.Helper()
	entries, err := os.ReadDir(out)
	if err != nil && !errors.Is(err, os.ErrNotExist) {
		t.Fatal(err)
	}
	var dirs []string
	for _, e := range entries {
		if e.IsDir() && !strings.HasPrefix(e.Name(), ".") {
			dirs = append(dirs, filepath.Join(out, e.Name()))
		}
	}
	return dirs
}

// TestKill9NeverLosesARequest kills kvbench run with SIGKILL at 20 random points of a run
// (after a random number of finished requests, plus a random delay) and checks every time that the directory loads, that every request the console reported
// finished is in it, and that only a run that finished says completed.
func TestKill9NeverLosesARequest(t *testing.T) {
	if testing.Short() {
		t.Skip("starts 22 kvbench processes")
	}
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 2})
	file := writeScenario(t, crashScenario)
	args := func(out string) []string {
		return []string{"run", file, "--endpoint", srv.URL() + "/v1", "--out", out}
	}

	// Two uncut runs: the faster says how long a run takes here (the first pays for a cold
	// start), the second is the run a killed one is compared with.
	var full time.Duration
	var refDirs []string
	for i := 0; i < 2; i++ {
		ref := t.TempDir()
		start := time.Now()
		c := startChild(t, args(ref)...)
		if code := c.wait(t, 2*time.Minute); code != 0 {
			t.Fatalf("uncut run: exit %d: %s", code, c.stderr.String())
		}
		if d := time.Since(start); i == 0 || d < full {
			full = d
		}
		if refDirs = runDirs(t, ref); len(refDirs) != 1 {
			t.Fatalf("uncut run wrote %v", refDirs)
		}
	}
	refRun, err := runs.Load(refDirs[0])
	if err != nil || refRun.Status != record.StatusCompleted || len(loadedRequests(refRun)) != crashRequests {
		t.Fatalf("uncut run: %v, %+v", err, refRun)
	}

	seed := time.Now().UnixNano()
	t.Logf("uncut run %v; kill points drawn with seed %d", full.Round(time.Millisecond), seed)
	rng := rand.New(rand.NewSource(seed))
	var incomplete string
	outcomes := map[string]int{}
	for i := 0; i < 20; i++ {
		// A kill point is "n requests reported finished, then a random part of one request's
		// time": spread over the run however fast or loaded this machine is.
		out := t.TempDir()
		n, delay := rng.Intn(crashRequests+1), time.Duration(rng.Int63n(int64(full/crashRequests)))
		at := fmt.Sprintf("%d requests + %v", n, delay.Round(time.Millisecond))
		c := startChild(t, args(out)...)
		c.waitDone(t, n)
		time.Sleep(delay)
		c.cmd.Process.Signal(syscall.SIGKILL)
		code := c.wait(t, time.Minute)
		finished := c.done()
		dirs := runDirs(t, out)
		if len(dirs) == 0 {
			if len(finished) > 0 {
				t.Fatalf("kill %d at %v: %d requests finished but no run directory", i, at, len(finished))
			}
			outcomes["no run directory yet"]++
			continue
		}
		r, err := runs.Load(dirs[0])
		if err != nil {
			t.Fatalf("kill %d at %v: %v", i, at, err)
		}
		got := loadedRequests(r)
		for _, q := range finished {
			if !got[q] {
				t.Fatalf("kill %d at %v: %s finished (console) but is not in the run (%v)", i, at, q, got)
			}
		}
		if r.Status == record.StatusCompleted && len(got) != crashRequests {
			t.Fatalf("kill %d at %v: completed with %d of %d requests", i, at, len(got), crashRequests)
		}
		if r.Status != record.StatusCompleted && code == 0 {
			t.Fatalf("kill %d at %v: the run finished (exit 0) but loads as %s", i, at, r.Status)
		}
		if r.Status == record.StatusIncomplete {
			incomplete = dirs[0]
		}
		readers(t, dirs[0], r.Status, fmt.Sprintf("kill %d at %v", i, at))
		outcomes[fmt.Sprintf("%s, %d/%d requests", r.Status, len(got), crashRequests)]++
	}
	t.Logf("outcomes: %v", outcomes)

	// A killed run never passes for a finished one: compare refuses it as the candidate.
	if incomplete != "" {
		_, stderr, code := runCLI(t, "compare", refDirs[0], incomplete)
		if code != cli.ExitUsage || !strings.Contains(stderr, "candidate is incomplete") {
			t.Fatalf("compare with a killed candidate: exit %d: %s", code, stderr)
		}
	}
}

// readers runs every command that reads a run directory on dir: none may refuse it as a run
// or crash on it (accounting may still say the run lacks what it sizes a pool with), and
// summarize merges an unfinished run only when told to.
func readers(t *testing.T, dir, status, what string) {
	t.Helper()
	for _, args := range [][]string{
		{"report", dir, "-o", filepath.Join(t.TempDir(), "r.html")},
		{"summarize", dir, "--allow-incomplete"},
		{"accounting", dir},
	} {
		if _, stderr, code := runCLI(t, args...); strings.Contains(stderr, "not a kvbench run") || code != cli.ExitOK && args[0] != "accounting" {
			t.Fatalf("%s: %s: exit %d: %s", what, args[0], code, stderr)
		}
	}
	if status != record.StatusCompleted {
		if _, stderr, code := runCLI(t, "summarize", dir); code != cli.ExitUsage || !strings.Contains(stderr, "is "+status) {
			t.Fatalf("%s: summarize of a %s run: exit %d: %s", what, status, code, stderr)
		}
	}
}

// TestStopSignalsEndRunCleanly: SIGTERM, SIGHUP and SIGINT end a run like Ctrl-C: exit 1
// (not death by signal), run.json says interrupted and names the signal, and every finished
// request is kept. The signal is sent while the third request waits at a gate, so it lands
// mid-run however loaded the machine is.
func TestStopSignalsEndRunCleanly(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 1})
	file := writeScenario(t, crashScenario)
	for _, sig := range []struct {
		sig  syscall.Signal
		name string
	}{{syscall.SIGTERM, "SIGTERM"}, {syscall.SIGHUP, "SIGHUP"}, {syscall.SIGINT, "SIGINT"}} {
		t.Run(sig.name, func(t *testing.T) {
			g := startGate(t, srv, preflightChats+2)
			out := t.TempDir()
			c := startChild(t, "run", file, "--endpoint", g.URL()+"/v1", "--out", out)
			g.waitHeld(t)
			c.cmd.Process.Signal(sig.sig)
			code := c.wait(t, time.Minute)
			checkInterrupted(t, c, code, out, sig.name)
		})
	}
}

func checkInterrupted(t *testing.T, c *child, code int, out, signal string) {
	t.Helper()
	if code != cli.ExitRuntime || !strings.Contains(c.stderr.String(), "interrupted") {
		t.Fatalf("exit %d, want 1; stderr: %s", code, c.stderr.String())
	}
	dirs := runDirs(t, out)
	if len(dirs) != 1 {
		t.Fatalf("run directories %v", dirs)
	}
	r, err := runs.Load(dirs[0])
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusInterrupted || !strings.Contains(r.StopReason, signal) {
		t.Fatalf("status %q, stop reason %q", r.Status, r.StopReason)
	}
	got := loadedRequests(r)
	for _, q := range c.done() {
		if !got[q] {
			t.Fatalf("%s finished but is not in the run (%v)", q, got)
		}
	}
	if len(got) == 0 || len(got) == crashRequests {
		t.Fatalf("%d requests kept: the signal did not land mid-run", len(got))
	}
	if m, _ := filepath.Glob(filepath.Join(dirs[0], "*.partial.jsonl")); len(m) > 0 {
		t.Fatalf("journals left after a clean stop: %v", m)
	}
}

// TestClosedStdoutEndsRunCleanly: `kvbench run ... | head` closes kvbench's stdout; its next
// console line raises SIGPIPE, which ends the run like Ctrl-C instead of killing it. The pipe
// is closed while the third request waits at a gate and that request is let through after:
// its line is the first write to the closed pipe, mid-run however loaded the machine is.
func TestClosedStdoutEndsRunCleanly(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 1})
	g := startGate(t, srv, preflightChats+2)
	file := writeScenario(t, crashScenario)
	out := t.TempDir()
	c := startChild(t, "run", file, "--endpoint", g.URL()+"/v1", "--out", out)
	g.waitHeld(t)
	c.stdout.Close()
	g.Open(1)
	code := c.wait(t, time.Minute)
	checkInterrupted(t, c, code, out, "SIGPIPE")
}

// TestUnwritableStepFileStopsRun: a step file that cannot be written stops the run (exit
// 1, status failed, the cause in stop_reason) and loses none of the step's requests: they
// are read back from its journal.
func TestUnwritableStepFileStopsRun(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 1})
	// Step two's first request is journaled, its second waits at the gate.
	g := startGate(t, srv, preflightChats+4+1)
	file := writeScenario(t, crashScenario)
	out := t.TempDir()
	ctx, cancel := context.WithCancel(context.Background())
	defer cancel()
	var stdout, stderr bytes.Buffer
	ended := make(chan error, 1)
	go func() {
		ended <- run(ctx, []string{"run", file, "--endpoint", g.URL() + "/v1", "--out", out}, &stdout, &stderr)
	}()
	g.waitHeld(t)
	// Put a directory where step two's file must go, then let the step finish.
	m, _ := filepath.Glob(filepath.Join(out, "*", "step-02-second.partial.jsonl"))
	if len(m) != 1 {
		t.Fatalf("step two's journal: %v", m)
	}
	if err := os.Mkdir(filepath.Join(filepath.Dir(m[0]), "step-02-second.json"), 0o755); err != nil {
		t.Fatal(err)
	}
	g.Open(crashRequests)
	var err error
	select {
	case err = <-ended:
	case <-time.After(time.Minute):
		t.Fatal("the run did not end within a minute")
	}
	if code := cli.ExitCode(err, &stderr); code != cli.ExitRuntime || !strings.Contains(stderr.String(), "step-02-second.json") {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	r, err := runs.Load(filepath.Join(out, onlyEntry(t, out)))
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusFailed || !strings.Contains(r.StopReason, "step-02-second.json") {
		t.Fatalf("status %q, stop reason %q", r.Status, r.StopReason)
	}
	got := loadedRequests(r)
	for _, q := range []string{"first[0]", "first[3]", "second[0]", "second[2]"} {
		if !got[q] {
			t.Fatalf("%s lost: %v", q, got)
		}
	}
	if st := r.Step(0, "second"); st == nil || !st.Interrupted {
		t.Fatalf("step second not rebuilt from its journal as interrupted: %+v", st)
	}
}

// TestReadOnlyRunDirStopsRun: the run directory turning read-only mid-run stops the run
// with a non-zero exit naming the cause, and a reader still finds every finished request.
func TestReadOnlyRunDirStopsRun(t *testing.T) {
	if os.Geteuid() == 0 {
		t.Skip("root writes into read-only directories; TestUnwritableStepFileStopsRun covers the same path")
	}
	srv := startSim(t, sim.Options{Profile: "tiny", Speed: 1})
	file := writeScenario(t, crashScenario)
	out := t.TempDir()
	// The directory turns read-only while the third request waits at the gate, before the
	// first step's file is written.
	g := startGate(t, srv, preflightChats+2)
	c := startChild(t, "run", file, "--endpoint", g.URL()+"/v1", "--out", out)
	g.waitHeld(t)
	dir := runDirs(t, out)[0]
	if err := os.Chmod(dir, 0o555); err != nil {
		t.Fatal(err)
	}
	t.Cleanup(func() { os.Chmod(dir, 0o755) })
	g.Open(crashRequests)
	code := c.wait(t, time.Minute)
	if code != cli.ExitRuntime || !strings.Contains(c.stderr.String(), "permission denied") {
		t.Fatalf("exit %d: %s", code, c.stderr.String())
	}
	r, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status == record.StatusCompleted {
		t.Fatal("a run that could not write its records loads as completed")
	}
	t.Logf("stderr: %s; loads as %s: %s", strings.TrimSpace(c.stderr.String()), r.Status, r.StopReason)
	got := loadedRequests(r)
	for _, q := range c.done() {
		if !got[q] {
			t.Fatalf("%s finished but is not in the run (%v)", q, got)
		}
	}
}

// TestLongStepIDIsWritten: the longest step id validate accepts (200 bytes; longer is bad
// input) gets a shortened file name and its requests are written like any other step's.
func TestLongStepIDIsWritten(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny"})
	id := strings.Repeat("s", 200)
	file := writeScenario(t, strings.Replace(crashScenario, `id = "second"`, `id = "`+id+`"`, 1))
	out := t.TempDir()
	var stdout, stderr bytes.Buffer
	if code := cli.ExitCode(run(context.Background(), []string{"run", file, "--endpoint", srv.URL() + "/v1", "--out", out}, &stdout, &stderr), &stderr); code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr.String())
	}
	r, err := runs.Load(filepath.Join(out, onlyEntry(t, out)))
	if err != nil {
		t.Fatal(err)
	}
	if st := r.Step(0, id); st == nil || len(st.Requests) != 3 {
		t.Fatalf("step with the long id: %+v", st)
	}
	if n := len(loadedRequests(r)); n != crashRequests {
		t.Fatalf("%d requests", n)
	}
}

// unfinishedCopy copies the compare baseline with its run.json's status set to status, as a
// run that was stopped or killed (running) after writing every step would leave it.
func unfinishedCopy(t *testing.T, status string) string {
	t.Helper()
	src := filepath.Join("testdata", "compare", "baseline")
	dst := t.TempDir()
	entries, err := os.ReadDir(src)
	if err != nil {
		t.Fatal(err)
	}
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(src, e.Name()))
		if e.Name() == "run.json" {
			data = bytes.Replace(data, []byte(`"status": "completed"`), []byte(`"status": "`+status+`"`), 1)
		}
		if err := os.WriteFile(filepath.Join(dst, e.Name()), data, 0o644); err != nil {
			t.Fatal(err)
		}
	}
	return dst
}

// TestCompareRefusesUnfinishedRun: a candidate or baseline that did not finish is refused
// with exit 2 and its status named, before any prompt identity is compared;
// --allow-incomplete compares it and says so. verify names it too.
func TestCompareRefusesUnfinishedRun(t *testing.T) {
	base := filepath.Join("testdata", "compare", "baseline")
	killed, stopped := unfinishedCopy(t, "running"), unfinishedCopy(t, "interrupted")
	for _, c := range []struct {
		base, cand, want string
	}{
		{base, killed, "candidate is incomplete"},
		{base, stopped, "candidate is interrupted"},
		{killed, base, "baseline is incomplete"},
	} {
		_, stderr, code := runCLI(t, "compare", c.base, c.cand)
		if code != cli.ExitUsage || !strings.Contains(stderr, c.want) || strings.Contains(stderr, "prompt identity") {
			t.Fatalf("compare %s %s: exit %d: %s", c.base, c.cand, code, stderr)
		}
	}
	out, stderr, code := runCLI(t, "compare", base, killed, "--allow-incomplete")
	if code != cli.ExitOK || !strings.Contains(out, "INCOMPLETE (allowed): candidate is incomplete: the run did not finish") {
		t.Fatalf("--allow-incomplete: exit %d: %s\n%s", code, stderr, out)
	}
	out, _, _ = runCLI(t, "verify", filepath.Join("testdata", "claims", "seed001-replay.toml"), killed)
	if !strings.Contains(out, "this run is INCOMPLETE") {
		t.Fatalf("verify does not say the run is incomplete:\n%s", out)
	}
}

// TestReadersAcceptRunWithoutRecord: a run directory whose run.json is gone still reads, as
// an incomplete run rebuilt from its step files, with every repetition.
func TestReadersAcceptRunWithoutRecord(t *testing.T) {
	dir := unfinishedCopy(t, "completed")
	if err := os.Remove(filepath.Join(dir, "run.json")); err != nil {
		t.Fatal(err)
	}
	r, err := runs.Load(dir)
	if err != nil {
		t.Fatal(err)
	}
	if r.Status != record.StatusIncomplete || len(r.Repetitions) != 2 || len(loadedRequests(r)) == 0 {
		t.Fatalf("status %q, %d repetitions", r.Status, len(r.Repetitions))
	}
	readers(t, dir, r.Status, "no run.json")
	_, stderr, code := runCLI(t, "compare", filepath.Join("testdata", "compare", "baseline"), dir)
	if code != cli.ExitUsage || !strings.Contains(stderr, "run.json is unreadable") {
		t.Fatalf("compare: exit %d: %s", code, stderr)
	}
}

// TestClosedStdoutAndStderrKeepTheExitCode: with both closed (`kvbench ... 2>&1 | head` once
// head is gone) the error's line is lost, but the exit code is still the error's, not the
// 141 of a SIGPIPE death.
func TestClosedStdoutAndStderrKeepTheExitCode(t *testing.T) {
	r, w, err := os.Pipe()
	if err != nil {
		t.Fatal(err)
	}
	r.Close() // no reader: every write is EPIPE and raises SIGPIPE
	defer w.Close()
	cmd := exec.Command(os.Args[0], "validate", filepath.Join(t.TempDir(), "missing.toml"))
	cmd.Env = append(os.Environ(), "KVBENCH_TEST_EXEC=1")
	cmd.Stdout, cmd.Stderr = w, w
	err = cmd.Run()
	var ee *exec.ExitError
	if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitUsage {
		t.Fatalf("kvbench validate with stdout and stderr closed: %v, want exit %d", err, cli.ExitUsage)
	}
}

// TestTraceAnalyzeOfAPipeStops: `trace analyze FIFO` reads the pipe and, while it waits on
// it for data, stops on SIGINT, SIGTERM and SIGHUP.
func TestTraceAnalyzeOfAPipeStops(t *testing.T) {
	for _, sig := range []syscall.Signal{syscall.SIGINT, syscall.SIGTERM, syscall.SIGHUP} {
		fifo := filepath.Join(t.TempDir(), "trace.jsonl")
		if err := syscall.Mkfifo(fifo, 0o600); err != nil {
			t.Fatal(err)
		}
		cmd := exec.Command(os.Args[0], "trace", "analyze", fifo)
		cmd.Env = append(os.Environ(), "KVBENCH_TEST_EXEC=1")
		var stderr bytes.Buffer
		cmd.Stderr = &stderr
		if err := cmd.Start(); err != nil {
			t.Fatal(err)
		}
		w, err := os.OpenFile(fifo, os.O_WRONLY, 0) // returns once kvbench opened the pipe
		if err != nil {
			t.Fatal(err)
		}
		cmd.Process.Signal(sig)
		done := make(chan error, 1)
		go func() { done <- cmd.Wait() }()
		select {
		case err = <-done:
		case <-time.After(60 * time.Second):
			cmd.Process.Kill()
			t.Fatalf("%s: kvbench trace analyze still waits on the pipe", sig)
		}
		w.Close()
		var ee *exec.ExitError
		if !errors.As(err, &ee) || ee.ExitCode() != cli.ExitRuntime || !strings.Contains(stderr.String(), "received") {
			t.Errorf("%s: %v, stderr %q, want exit %d naming the signal", sig, err, stderr.String(), cli.ExitRuntime)
		}
	}
}

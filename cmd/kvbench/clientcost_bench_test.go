package main

import (
	"bufio"
	"context"
	"encoding/json"
	"fmt"
	"io"
	"os"
	"os/exec"
	"os/signal"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"syscall"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// engineProcessEnv makes the test binary serve the embedded engine from the profile file it
// names instead of running tests: the client-cost benchmark runs the engine in its own
// process, so the benchmark process's CPU time is the client's alone.
const engineProcessEnv = "KVBENCH_BENCH_ENGINE_PROFILE"

// serveEngineProcess runs "kvbench sim" until SIGTERM, or for at most an hour should the
// benchmark that started it die without stopping it.
func serveEngineProcess(profile string) int {
	ctx, stop := signal.NotifyContext(context.Background(), os.Interrupt, syscall.SIGTERM)
	defer stop()
	ctx, cancel := context.WithTimeout(ctx, time.Hour)
	defer cancel()
	err := run(ctx, []string{"sim", "--profile-file", profile, "--addr", "127.0.0.1:0"}, os.Stdout, os.Stderr)
	return cli.ExitCode(err, os.Stderr)
}

// clientCostEngine answers after 50 ms and then sends a token every millisecond, with a
// pool large enough that no request waits or is preempted.
const clientCostEngine = `description = "client-cost benchmark engine: 50 ms to first token, 1 ms between tokens"
model = "kvbench/bench-sim"
served_model_name = "bench-sim"
max_model_len = 4096
block_size = 16
num_gpu_blocks = 16384
speed = 1
prefill_tokens_per_second = 1e9
decode_tokens_per_second = 1000
request_overhead = "50ms"
answer_tokens_min = 16
answer_tokens_max = 32
`

// engineTTFTMS is clientCostEngine's time to first token: the request overhead (a
// 100-token prefill at 1e9 tokens/s adds nothing measurable).
const engineTTFTMS = 50.0

var servingURL = regexp.MustCompile(`serving (http://\S+)`)

// startEngineProcess starts the test binary as "kvbench sim" on a free port and returns
// its URL and process id; the process is stopped when the benchmark ends.
func startEngineProcess(b *testing.B) (string, int) {
	b.Helper()
	profile := filepath.Join(b.TempDir(), "engine.toml")
	if err := os.WriteFile(profile, []byte(clientCostEngine), 0o644); err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(os.Args[0], "-test.run=^$")
	cmd.Env = append(os.Environ(), engineProcessEnv+"="+profile)
	cmd.Stderr = os.Stderr
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		cmd.Process.Signal(syscall.SIGTERM)
		done := make(chan struct{})
		go func() { cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			cmd.Process.Kill()
			<-done
		}
	})
	found := make(chan string, 1)
	go func() {
		sc := bufio.NewScanner(stdout)
		for sc.Scan() {
			if m := servingURL.FindStringSubmatch(sc.Text()); m != nil {
				found <- m[1]
				break
			}
		}
		io.Copy(io.Discard, stdout)
	}()
	select {
	case url := <-found:
		return url, cmd.Process.Pid
	case <-time.After(30 * time.Second):
		b.Fatal("the engine process did not say where it serves within 30s")
		return "", 0
	}
}

// processCPU reads a process's user+system CPU time from /proc (Linux, 100 ticks/s).
func processCPU(pid int) (time.Duration, bool) {
	data, err := os.ReadFile(fmt.Sprintf("/proc/%d/stat", pid))
	if err != nil {
		return 0, false
	}
	// Fields after the command name, which is in parentheses and may hold spaces.
	f := strings.Fields(string(data[strings.LastIndexByte(string(data), ')')+1:]))
	if len(f) < 13 {
		return 0, false
	}
	utime, err1 := strconv.ParseInt(f[11], 10, 64)
	stime, err2 := strconv.ParseInt(f[12], 10, 64)
	if err1 != nil || err2 != nil {
		return 0, false
	}
	return time.Duration(utime+stime) * 10 * time.Millisecond, true
}

func selfCPU() time.Duration {
	var ru syscall.Rusage
	syscall.Getrusage(syscall.RUSAGE_SELF, &ru)
	return time.Duration(ru.Utime.Nano() + ru.Stime.Nano())
}

// BenchmarkClientCPU runs a whole "kvbench run" of one step (short prompts, 100 output
// tokens each with ignore_eos) against the embedded engine in a separate process, and
// reports the client's CPU per 1,000 output tokens from getrusage of this process, which
// holds only the client. Target at 64 streams: at most half the CPU of vLLM's benchmark
// client on the same machine, and within 2x of a minimal C client on epoll (5-6 ms per 1k
// tokens on a 2-core VM), i.e. about 11 ms per 1k tokens.
//
// step-cpu is the same from the step record's client cost: the streaming step alone,
// without the run's preflight and the writing of its records.
//
// Other figures: client-cores and engine-cores are each process's CPU time over the
// wall time (engine from /proc); ttft-err is the time to first output minus the engine's
// 50 ms; batched-% is the share of generated chunks that arrived in the same read as the
// previous one.
//
//	go test ./cmd/kvbench -run '^$' -bench ClientCPU -benchtime 3x
func BenchmarkClientCPU(b *testing.B) {
	for _, tc := range []struct {
		name                  string
		requests, concurrency int
	}{
		{"c64", 1920, 64},
		{"c256", 1024, 256},
	} {
		b.Run(tc.name, func(b *testing.B) {
			url, pid := startEngineProcess(b)
			scenario := filepath.Join(b.TempDir(), "clientcost.toml")
			if err := os.WriteFile(scenario, []byte(fmt.Sprintf(`name = "clientcost-%s"
[server]
gpu_kv_tokens = "server"
[prompt]
shared_prefix_tokens = 48
token_counting = "estimate"
[request]
max_tokens = 100
ignore_eos = true
timeout = "2m"
[[step]]
id = "streams"
requests = %d
planned_context_tokens = [96]
concurrency = %d
`, strings.ReplaceAll(tc.name, "/", "-"), tc.requests, tc.concurrency)), 0o644); err != nil {
				b.Fatal(err)
			}
			var cpu, stepCPU, engineCPU, wall time.Duration
			var tokens, chunks, batched int
			var ttftErr []float64
			for b.Loop() {
				out := b.TempDir()
				engine0, engineOK := processCPU(pid)
				cpu0, start := selfCPU(), time.Now()
				err := run(context.Background(), []string{"run", scenario, "--endpoint", url + "/v1", "--out", out}, io.Discard, io.Discard)
				cpu += selfCPU() - cpu0
				wall += time.Since(start)
				if engine1, ok := processCPU(pid); ok && engineOK {
					engineCPU += engine1 - engine0
				}
				if err != nil {
					b.Fatalf("run: %v", err)
				}
				b.StopTimer()
				t, c, bt, errs, sc := readClientCostStep(b, out, tc.requests)
				tokens, chunks, batched, ttftErr = tokens+t, chunks+c, batched+bt, append(ttftErr, errs...)
				stepCPU += sc
				b.StartTimer()
			}
			slices.Sort(ttftErr)
			b.ReportMetric(float64(cpu.Microseconds())/float64(tokens), "client-cpu-ms/1k-tokens")
			b.ReportMetric(float64(stepCPU.Microseconds())/float64(tokens), "step-cpu-ms/1k-tokens")
			b.ReportMetric(cpu.Seconds()/wall.Seconds(), "client-cores")
			b.ReportMetric(engineCPU.Seconds()/wall.Seconds(), "engine-cores")
			b.ReportMetric(ttftErr[len(ttftErr)/2], "ttft-err-p50-ms")
			b.ReportMetric(ttftErr[len(ttftErr)*99/100], "ttft-err-p99-ms")
			b.ReportMetric(100*float64(batched)/float64(max(chunks, 1)), "batched-%")
		})
	}
}

// readClientCostStep reads the step artifact of the run under out: output tokens,
// generated and batched chunks, and each request's time-to-first-output error.
func readClientCostStep(b *testing.B, out string, want int) (tokens, chunks, batched int, ttftErr []float64, stepCPU time.Duration) {
	b.Helper()
	entries, err := os.ReadDir(out)
	if err != nil || len(entries) != 1 {
		b.Fatalf("run directory under %s: %v %v", out, entries, err)
	}
	data, err := os.ReadFile(filepath.Join(out, entries[0].Name(), "step-01-streams.json"))
	if err != nil {
		b.Fatal(err)
	}
	var art struct {
		Client *struct {
			CPUMS float64 `json:"cpu_ms"`
		} `json:"client"`
		Requests []struct {
			Result struct {
				ErrorKind       string   `json:"error_kind"`
				OutputTokens    int      `json:"output_tokens"`
				GeneratedChunks int      `json:"generated_chunks"`
				BatchedChunks   int      `json:"batched_chunks"`
				TTFO            *float64 `json:"time_to_first_output_ms"`
			} `json:"result"`
		} `json:"requests"`
	}
	if err := json.Unmarshal(data, &art); err != nil {
		b.Fatal(err)
	}
	if len(art.Requests) != want {
		b.Fatalf("%d requests recorded, want %d", len(art.Requests), want)
	}
	if art.Client == nil {
		b.Fatal("the step records no client cost")
	}
	stepCPU = time.Duration(art.Client.CPUMS * float64(time.Millisecond))
	for i, q := range art.Requests {
		r := q.Result
		if r.ErrorKind != "" || r.TTFO == nil || r.OutputTokens != 100 {
			b.Fatalf("request %d: error %q, %d output tokens", i, r.ErrorKind, r.OutputTokens)
		}
		tokens += r.OutputTokens
		chunks += r.GeneratedChunks
		batched += r.BatchedChunks
		ttftErr = append(ttftErr, *r.TTFO-engineTTFTMS)
	}
	return tokens, chunks, batched, ttftErr, stepCPU
}

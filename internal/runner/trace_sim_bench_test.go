package runner

import (
	"bufio"
	"context"
	"fmt"
	"io"
	"os"
	"os/exec"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/derive"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/sim"
)

// simChildEnv, set, makes the test binary serve the embedded engine instead of running tests
// (BenchmarkTraceDispatchLagSim): the value is an embedded profile, served at 1000x speed, or
// a profile file (a path ending in .toml), served at its own speed.
const simChildEnv = "KVBENCH_BENCH_SIM_PROFILE"

func TestMain(m *testing.M) {
	if profile := os.Getenv(simChildEnv); profile != "" {
		os.Exit(serveSimChild(profile))
	}
	os.Exit(m.Run())
}

// serveSimChild serves the sim as `kvbench sim` does until its stdin closes (the parent
// ended) or ten minutes pass, after printing its URL on a line of its own.
func serveSimChild(profile string) int {
	opts := sim.Options{Profile: profile, Speed: 1000}
	if strings.HasSuffix(profile, ".toml") {
		opts = sim.Options{ProfileFile: profile}
	}
	srv, err := sim.Start(opts)
	if err != nil {
		fmt.Fprintln(os.Stderr, err)
		return 1
	}
	fmt.Println(srv.URL())
	stdinClosed := make(chan struct{})
	go func() {
		_, _ = io.Copy(io.Discard, os.Stdin)
		close(stdinClosed)
	}()
	select {
	case <-stdinClosed:
	case <-time.After(10 * time.Minute):
	}
	_ = srv.Close()
	return 0
}

// startSimProcess runs the sim in a process of its own (this test binary, re-executed) and
// returns its root URL; it stops with the benchmark.
func startSimProcess(b *testing.B, profile string) string {
	exe, err := os.Executable()
	if err != nil {
		b.Fatal(err)
	}
	cmd := exec.Command(exe, "-test.run=^$")
	cmd.Env = append(os.Environ(), simChildEnv+"="+profile)
	cmd.Stderr = os.Stderr
	stdin, err := cmd.StdinPipe()
	if err != nil {
		b.Fatal(err)
	}
	stdout, err := cmd.StdoutPipe()
	if err != nil {
		b.Fatal(err)
	}
	if err := cmd.Start(); err != nil {
		b.Fatal(err)
	}
	b.Cleanup(func() {
		stdin.Close()
		done := make(chan struct{})
		go func() { _ = cmd.Wait(); close(done) }()
		select {
		case <-done:
		case <-time.After(10 * time.Second):
			_ = cmd.Process.Kill()
			<-done
		}
	})
	line := make(chan string, 1)
	go func() {
		s, _ := bufio.NewReader(stdout).ReadString('\n')
		line <- strings.TrimSpace(s)
		_, _ = io.Copy(io.Discard, stdout)
	}()
	select {
	case u := <-line:
		if !strings.HasPrefix(u, "http://") {
			b.Fatalf("the sim process printed %q, not its URL", u)
		}
		return u
	case <-time.After(30 * time.Second):
		b.Fatal("the sim process did not print its URL in 30s")
	}
	return ""
}

// BenchmarkTraceDispatchLagSim measures what a user runs: the embedded engine (`kvbench sim`,
// profile dsv4-offload16 at 1000x speed) in a process of its own, and this process replaying
// 1,000 requests with the public conversation trace's lengths (about 12k prompt tokens)
// arriving as a Poisson process at 100 requests/s in an open loop. It reports the dispatch
// lag (due to body written) p50/p99/max, the client's peak resident set, its CPU per 1k
// output tokens and the offered rate. Run with -benchtime=1x; skipped under -short.
func BenchmarkTraceDispatchLagSim(b *testing.B) {
	if testing.Short() {
		b.Skip("starts a server process and replays for about ten seconds")
	}
	root := startSimProcess(b, "dsv4-offload16")
	gen := trace.DefaultGeneratorConfig()
	gen.Requests, gen.Rate, gen.Turns = 1000, 100, 1
	for range b.N {
		cfg := benchTraceConfig(b, gen, "", root, "deepseek-v4-flash-sim")
		rss := startPeakRSS(b)
		out, err := Run(context.Background(), cfg)
		if err != nil {
			b.Fatal(err)
		}
		peak, _ := rss.finish(b)
		sec := out.Record.Trace("load")
		if sec == nil || sec.Requests != gen.Requests || sec.FailedRequests != 0 || sec.DispatchLagMS.P99 == nil {
			b.Fatalf("section %+v", sec)
		}
		if len(out.Steps) == 0 || out.Steps[0].Client == nil || out.Steps[0].Client.CPUMSPer1kOutputTokens == nil {
			b.Fatal("the step measured no client CPU per output token")
		}
		b.ReportMetric(*sec.OfferedRequestsPerSecond, "offered-requests/s")
		b.ReportMetric(*sec.DispatchLagMS.P50, "lag-p50-ms")
		b.ReportMetric(*sec.DispatchLagMS.P99, "lag-p99-ms")
		b.ReportMetric(*sec.DispatchLagMS.Max, "lag-max-ms")
		b.ReportMetric(peak, "client-peak-RSS-MiB")
		b.ReportMetric(*out.Steps[0].Client.CPUMSPer1kOutputTokens, "client-CPU-ms/1k-output-tokens")
		b.ReportMetric(float64(sec.PeakInFlight), "peak-in-flight")
		// The lag to when a worker took the request up: the dispatcher's own share.
		var started []float64
		for _, q := range out.Steps[0].Requests {
			if q.Trace != nil && q.Trace.StartLagMS != nil {
				started = append(started, *q.Trace.StartLagMS)
			}
		}
		if p := derive.PercentilesOf(started); p.P99 != nil {
			b.ReportMetric(*p.P50, "start-lag-p50-ms")
			b.ReportMetric(*p.P99, "start-lag-p99-ms")
		}
	}
}

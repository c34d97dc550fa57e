package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"os/exec"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/scenarios"
)

// maxProbeOutput bounds what a probe may print; a runaway probe must not fill the record.
const maxProbeOutput = 1 << 20

// runProbes runs the probes of one phase ("before" or "after"). A failing or non-JSON probe is
// recorded as such and never loses the run.
func runProbes(ctx context.Context, probes []scenarios.Probe, when string, con *Console) []record.ProbeResult {
	var out []record.ProbeResult
	for _, p := range probes {
		if p.When != when {
			continue
		}
		res := runProbe(ctx, p)
		status := "ok"
		if !res.OK {
			status = "failed: " + res.Error
		}
		con.Printf("probe %s (%s): %s", p.Name, when, status)
		out = append(out, res)
	}
	return out
}

func runProbe(ctx context.Context, p scenarios.Probe) record.ProbeResult {
	res := record.ProbeResult{Name: p.Name, When: p.When, Command: p.Command}
	pctx, cancel := context.WithTimeout(ctx, p.Timeout.Duration)
	defer cancel()
	cmd := exec.CommandContext(pctx, p.Command[0], p.Command[1:]...)
	var stdout, stderr limitedBuffer
	stdout.max, stderr.max = maxProbeOutput, maxProbeOutput
	cmd.Stdout, cmd.Stderr = &stdout, &stderr
	start := time.Now()
	err := cmd.Run()
	res.DurationMS = ms(time.Since(start))
	res.StderrTail = tail(stderr.String(), 2000)
	var exit *exec.ExitError
	switch {
	case pctx.Err() == context.DeadlineExceeded:
		res.ExitCode, res.Error = -1, "timed out after "+p.Timeout.String()
		return res
	case errors.As(err, &exit):
		res.ExitCode, res.Error = exit.ExitCode(), "exited with "+exit.String()
		return res
	case err != nil:
		res.ExitCode, res.Error = -1, err.Error()
		return res
	}
	var v any
	if err := json.Unmarshal(bytes.TrimSpace(stdout.Bytes()), &v); err != nil {
		res.Error = "stdout is not JSON: " + err.Error()
		return res
	}
	res.OK, res.Output = true, v
	return res
}

type limitedBuffer struct {
	bytes.Buffer
	max int
}

func (b *limitedBuffer) Write(p []byte) (int, error) {
	if room := b.max - b.Len(); room < len(p) {
		if room > 0 {
			b.Buffer.Write(p[:room])
		}
		return len(p), nil
	}
	return b.Buffer.Write(p)
}

func tail(s string, n int) string {
	if len(s) <= n {
		return s
	}
	return "..." + s[len(s)-n:]
}

package runner

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"os"
	"os/exec"
	"strings"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/internal/events"
	"github.com/anvil-serving/kvbench/scenarios"
)

// maxProbeOutput bounds what a probe may print; a runaway probe must not fill the record.
const maxProbeOutput = 1 << 20

// runProbes runs the probes of one phase ("before" or "after"), each with the probe
// environment as its whole environment. A failing or non-JSON probe is recorded as such and
// never loses the run.
func (r *runner) runProbes(ctx context.Context, when string) []record.ProbeResult {
	var out []record.ProbeResult
	env := probeEnv(r.cfg)
	for _, p := range r.cfg.Scenario.Probes {
		if p.When != when {
			continue
		}
		res := runProbe(ctx, p, env)
		status := "ok"
		if !res.OK {
			status = "failed: " + res.Error
		}
		r.emit(events.Note{Text: fmt.Sprintf("probe %s (%s): %s", p.Name, when, status)})
		out = append(out, res)
	}
	return out
}

func runProbe(ctx context.Context, p scenarios.Probe, env []string) record.ProbeResult {
	res := record.ProbeResult{Name: p.Name, When: p.When, Command: p.Command}
	pctx, cancel := context.WithTimeout(ctx, p.Timeout.Duration)
	defer cancel()
	cmd := exec.CommandContext(pctx, p.Command[0], p.Command[1:]...)
	cmd.Env = env
	if env == nil {
		cmd.Env = []string{} // nil would mean this process's environment
	}
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

// probeEnv is the environment cfg's probes run with.
func probeEnv(cfg Config) []string {
	return ProbeEnv(os.Environ(), cfg.Scenario.Target.APIKeyEnv, cfg.ProbeSecrets)
}

// secretWords mark an environment variable whose value is likely a credential.
var secretWords = []string{"KEY", "TOKEN", "SECRET", "PASSWORD"}

// ProbeEnv filters environ ("NAME=value" entries) for probe commands, which may come with a
// scenario from a stranger: the API key variable (apiKeyEnv) is always dropped, and so is
// every variable whose name contains KEY, TOKEN, SECRET or PASSWORD (in any case) unless
// secrets is set.
func ProbeEnv(environ []string, apiKeyEnv string, secrets bool) []string {
	out := []string{}
	for _, kv := range environ {
		name, _, _ := strings.Cut(kv, "=")
		if apiKeyEnv != "" && name == apiKeyEnv {
			continue
		}
		if !secrets && LooksSecret(name) {
			continue
		}
		out = append(out, kv)
	}
	return out
}

// LooksSecret reports whether an environment variable's name says it holds a credential.
func LooksSecret(name string) bool {
	upper := strings.ToUpper(name)
	for _, w := range secretWords {
		if strings.Contains(upper, w) {
			return true
		}
	}
	return false
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

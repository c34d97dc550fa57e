package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"math"
	"os"
	"path/filepath"
	"slices"
	"strings"
	"testing"
	"time"

	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/runs"
	"github.com/anvil-serving/kvbench/harness/trace"
	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/internal/llamacpptest"
)

// testModelStateBytes is a prompt-cache entry's bytes per token for kvbench's test model:
// its KV (2 layers x K and V x 2 KV heads x 32 dims x 2 bytes of f16 = 512) and the 12 bytes
// of cell metadata llama_kv_cache::state_write_meta writes per token (position, sequence
// count, sequence id).
const testModelStateBytes = 524

// TestLlamaCppHostCacheSizes holds trace size's llamacpp policy to the real server: a
// conversation trace replayed one request at a time on llama-server -np 1 at three
// --cache-ram sizes and on -np auto at two, the tokens served from the host prompt cache
// and from the live slot (splitCached) against what `trace size --policy llamacpp` predicts
// at each size; on -np 1 the step's own recorded split must agree, and a calibration from
// the middle size must predict the others (calibrateLlamaCpp).
func TestLlamaCppHostCacheSizes(t *testing.T) {
	t.Parallel() // a long test (see cli_test.go)
	server, model := requireLlama(t)
	ctx, cancel := context.WithTimeout(context.Background(), 5*time.Minute)
	defer cancel()
	dir := t.TempDir()
	file := writeTrace(t, dir, 150, 50)
	sc := filepath.Join(dir, "llamacpp-sizes.toml")
	text := fmt.Sprintf(`name = "llamacpp-cache-sizes"
[target]
backend = "llamacpp"
[server]
gpu_kv_tokens = %d
max_model_len = %d
[prompt]
seed = 3
[request]
timeout = "1m"
[[step]]
id = "load"
kind = "trace"
file = %q
block_tokens = 16
concurrency = 1
`, llamacpptest.DefaultContext, llamacpptest.DefaultContext, filepath.Base(file))
	if err := os.WriteFile(sc, []byte(text), 0o600); err != nil {
		t.Fatal(err)
	}
	reqs := readTraceLines(t, file, 16)

	// -np 1, and -np auto: 4 slots on a unified KV cache, each idle slot saved and cleared
	// when a task starts.
	for _, c := range []struct {
		slots  int
		policy string
		mibs   []int
	}{
		{1, "llamacpp", []int{1, 2, 4}},
		{-1, "llamacpp:slots=4,kv_unified=1", []int{1, 4}},
	} {
		var hosts []string
		for _, m := range c.mibs {
			hosts = append(hosts, fmt.Sprintf("%dMiB", m))
		}
		var out bytes.Buffer
		if err := run(ctx, []string{"trace", "size", file, "--block-tokens", "16", "--policy", c.policy, "--gpu-tokens", fmt.Sprint(llamacpptest.DefaultContext),
			"--bytes-per-token", fmt.Sprint(testModelStateBytes), "--host", strings.Join(hosts, ","), "--format", "json"}, &out, os.Stderr); err != nil {
			t.Fatal(err)
		}
		var predicted trace.SizeReport
		if err := json.Unmarshal(out.Bytes(), &predicted); err != nil {
			t.Fatal(err)
		}
		measured := make([]float64, len(c.mibs))
		runDirs := make([]string, len(c.mibs))
		for i, mib := range c.mibs {
			srv, err := llamacpptest.Start(ctx, llamacpptest.Options{Server: server, Model: model, CacheRAMMiB: mib, Slots: c.slots})
			if err != nil {
				t.Fatal(err)
			}
			runOut := t.TempDir()
			_, stderr, code := runJSON(t, ctx, "run", sc, "--endpoint", srv.URL()+"/v1", "--out", runOut)
			srv.Close()
			if code != cli.ExitOK {
				t.Fatalf("-np %d --cache-ram %d: exit %d: %s\nserver log:\n%s", c.slots, mib, code, stderr, srv.Log())
			}
			runDirs[i] = filepath.Join(runOut, onlyEntry(t, runOut))
			r, err := runs.Load(runDirs[i])
			if err != nil {
				t.Fatal(err)
			}
			prompt, live, host := splitCached(t, r.Repetitions[0].Steps[0].Requests, reqs, c.slots != 1)
			sec := r.Repetitions[0].Sections[0].Trace
			if c.slots == 1 { // the step recorded the split, and its tiers are its sum
				tiers := sec.Tiers
				if tiers.Source != record.TierBySlotHistory || tiers.HostHitTokens == nil || int(*tiers.HostHitTokens) != host || int(*tiers.GPUHitTokens) != live {
					t.Errorf("--cache-ram %d: the step's tiers %+v, the split here live %d host %d", mib, tiers, live, host)
				}
			} else if !strings.Contains(sec.SlotSplitUnavailable, "4 slots") || sec.Tiers.Host != nil {
				// kvbench does not read which slot served a request: no split, and it says why.
				t.Errorf("-np auto: slot_split_unavailable %q, tiers %+v", sec.SlotSplitUnavailable, sec.Tiers)
			}
			if prompt != int(predicted.PromptTokens) {
				t.Fatalf("-np %d --cache-ram %d: replayed %d prompt tokens, the trace has %d", c.slots, mib, prompt, predicted.PromptTokens)
			}
			p := predicted.Sizes[i]
			measured[i] = float64(host) / float64(prompt)
			t.Logf("-np %d --cache-ram %d MiB (%d tokens), policy %s: of %d prompt tokens the host cache served %d (%.2f%%), the live slot %d (%.2f%%); trace size predicts %d (%.2f%%) and %d (%.2f%%)",
				c.slots, mib, p.HostTokens, c.policy, prompt, host, 100*measured[i], live, 100*float64(live)/float64(prompt), p.HostHitTokens, 100*p.HostShare, p.GPUHitTokens, 100*p.GPUShare)
			if d := math.Abs(measured[i] - p.HostShare); d > 0.02 {
				t.Errorf("-np %d --cache-ram %d: measured host share %.4f, predicted %.4f: %.1f points apart (docs/traces.md, llamacpp)", c.slots, mib, measured[i], p.HostShare, 100*d)
			}
			if d := math.Abs(float64(live)/float64(prompt) - p.GPUShare); d > 0.02 {
				t.Errorf("-np %d --cache-ram %d: measured live-slot share %.4f, predicted %.4f", c.slots, mib, float64(live)/float64(prompt), p.GPUShare)
			}
		}
		// The sizes must matter, or agreeing at each proves little.
		if !slices.IsSorted(measured) || measured[0] <= 0 || measured[0] == measured[len(measured)-1] {
			t.Errorf("-np %d: measured host shares %v do not grow with --cache-ram: the trace does not press the cache", c.slots, measured)
		}
		if c.slots == 1 {
			calibrateLlamaCpp(t, ctx, file, runDirs, c.mibs, hosts, measured)
		}
	}
}

// calibrateLlamaCpp calibrates trace size from the run at the middle --cache-ram size
// (given with --deployed-host: llama-server does not report it) and holds the predictions
// at the other sizes to what those runs measured, within 2 points.
func calibrateLlamaCpp(t *testing.T, ctx context.Context, file string, runDirs []string, mibs []int, hosts []string, measured []float64) {
	t.Helper()
	at := len(mibs) / 2
	var out bytes.Buffer
	if err := run(ctx, []string{"trace", "size", file, "--calibrate", runDirs[at], "--deployed-host", hosts[at], "--bytes-per-token", fmt.Sprint(testModelStateBytes),
		"--host", strings.Join(hosts, ","), "--format", "json"}, &out, os.Stderr); err != nil {
		t.Fatal(err)
	}
	var r trace.SizeReport
	if err := json.Unmarshal(out.Bytes(), &r); err != nil {
		t.Fatal(err)
	}
	cal := r.Calibration
	if cal == nil || len(r.Sizes) != len(mibs) {
		t.Fatalf("calibration %+v, %d sizes: %s", cal, len(r.Sizes), out.String())
	}
	t.Logf("calibrated at --cache-ram %d MiB (%d tokens) on %s: measured %.2f%%, policy %s predicts %.2f%% (residual %.2f points, fits %v): %s",
		mibs[at], cal.HostTokens, cal.MeasuredSource, 100*cal.MeasuredHostShare, cal.Policy, 100*cal.PredictedHostShare, cal.ResidualPoints, cal.Fits, cal.Finding)
	if cal.MeasuredSource != record.TierBySlotHistory || math.Abs(cal.MeasuredHostShare-measured[at]) > 1e-9 || !cal.Fits {
		t.Errorf("calibration measured %.4f from %q (the run measured %.4f), fits %v", cal.MeasuredHostShare, cal.MeasuredSource, measured[at], cal.Fits)
	}
	for i, s := range r.Sizes {
		if s.PredictedHostShare == nil {
			t.Fatalf("--cache-ram %d MiB: no predicted_host_share", mibs[i])
		}
		d := *s.PredictedHostShare - measured[i]
		t.Logf("--cache-ram %d MiB (%d tokens): predicted host share %.2f%%, measured %.2f%% (%+.2f points)", mibs[i], s.HostTokens, 100**s.PredictedHostShare, 100*measured[i], 100*d)
		if math.Abs(d) > 0.02 {
			t.Errorf("--cache-ram %d MiB: calibrated at %d MiB, predicted host share %.4f, measured %.4f", mibs[i], mibs[at], *s.PredictedHostShare, measured[i])
		}
	}
}

// splitCached splits a replay's cached tokens (requests in trace order, one at a time) as
// the trace step does (trace.SlotHistory), and checks the step recorded the same split
// where it records one. It returns the prompt tokens and both parts.
func splitCached(t *testing.T, requests []record.Request, reqs []trace.Request, unified bool) (prompt, live, host int) {
	t.Helper()
	h := trace.SlotHistory{BlockTokens: 16, Unified: unified}
	for _, q := range requests {
		res := q.Result
		if q.Trace == nil || res.PromptTokens == nil || res.CachedPromptTokens == nil || q.Trace.Line < 1 || q.Trace.Line > len(reqs) {
			t.Fatalf("request %d has no trace line, prompt or cached tokens: %+v", q.IndexInStep, q.Trace)
		}
		cur := &reqs[q.Trace.Line-1]
		if *res.PromptTokens != cur.InputLength {
			t.Fatalf("line %d: the server counted %d prompt tokens, the trace says %d", q.Trace.Line, *res.PromptTokens, cur.InputLength)
		}
		l, hst := h.Split(cur, *res.CachedPromptTokens)
		if sp := q.Trace.Slot; sp != nil && (sp.LiveTokens != l || sp.HostTokens != hst) {
			t.Errorf("line %d: the step recorded live %d host %d, the split here %d and %d", q.Trace.Line, sp.LiveTokens, sp.HostTokens, l, hst)
		}
		prompt, live, host = prompt+cur.InputLength, live+l, host+hst
	}
	return prompt, live, host
}

// readTraceLines reads a trace file's requests in line order.
func readTraceLines(t *testing.T, path string, blockTokens int) []trace.Request {
	t.Helper()
	f, err := os.Open(path)
	if err != nil {
		t.Fatal(err)
	}
	defer f.Close()
	src := trace.NewReader(f, path, blockTokens)
	var reqs []trace.Request
	for {
		var r trace.Request
		err := src.Next(&r)
		if errors.Is(err, io.EOF) {
			return reqs
		}
		if err != nil {
			t.Fatal(err)
		}
		reqs = append(reqs, r)
	}
}

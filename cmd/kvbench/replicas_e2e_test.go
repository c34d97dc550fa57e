package main

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
	"github.com/anvil-serving/kvbench/sim"
)

// evictionOnTwoReplicas is an eviction replay sized for two tiny replicas: five ~1,700-token
// prompts (about 1,450 unique tokens each after the 256-token shared prefix). Three of them
// (what round-robin gives the replica of request 0) overflow one replica's 4,096-token GPU
// pool, so that replica would have reloaded request 0 from its CPU tier; all five fit one
// replica's 8,192-token CPU tier, so where affinity keeps them together the replay reloads.
// Preflight sends two chat requests first, so under round-robin request 0 is the run's third
// chat (replica 0) and the replay its eighth (replica 1).
const evictionOnTwoReplicas = `name = "two-replica-eviction"
[target]
endpoint = "http://127.0.0.1:8000/v1"
[server]
gpu_kv_tokens = "server"
block_size = "server"
store_bytes_per_token = 2048
[prompt]
seed = 3
shared_prefix_tokens = 256
token_counting = "server"
[request]
max_tokens = 8
timeout = "1m"
[[step]]
id = "sequence"
requests = 5
planned_context_tokens = [1700]
[[step]]
id = "replay"
replay = { step = "sequence", request = 0 }
`

// replayOnReplicas runs evictionOnTwoReplicas on two tiny replicas behind router and returns
// the replay section, its verdict evidence and the sequence's and replay's request records.
func replayOnReplicas(t *testing.T, router string) (r, ev map[string]any, sequence []any, replay map[string]any, stderr string) {
	t.Helper()
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.DataParallel, p.Router = 2, router }})
	file := filepath.Join(t.TempDir(), "two-replica-eviction.toml")
	if err := os.WriteFile(file, []byte(evictionOnTwoReplicas), 0o644); err != nil {
		t.Fatal(err)
	}
	out := t.TempDir()
	rec, stderr, code := runJSON(t, context.Background(), "run", file, "--endpoint", srv.URL()+"/v1", "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	r = section(t, rec, "replay")
	ev, _ = r["evidence"].(map[string]any)
	dir := filepath.Join(out, onlyEntry(t, out))
	sequence = readArtifact(t, dir, "step-01-sequence.json")["requests"].([]any)
	replay = readArtifact(t, dir, "step-02-replay.json")["requests"].([]any)[0].(map[string]any)
	return r, ev, sequence, replay, stderr
}

func replicaOf(t *testing.T, req map[string]any) string {
	t.Helper()
	a, ok := req["replica"].(map[string]any)
	if !ok {
		t.Fatalf("request %v[%v] has no replica attribution", req["step"], req["index_in_step"])
	}
	return a["replica"].(string)
}

// uniqueTokensOn counts the distinct prompt tokens the sequence sent to replica: the shared
// prefix once, and each prompt's own tokens.
func uniqueTokensOn(t *testing.T, sequence []any, replica string) int {
	t.Helper()
	unique, shared := 0, 0
	for _, q := range sequence {
		req := q.(map[string]any)
		if replicaOf(t, req) != replica {
			continue
		}
		prompt := int(req["result"].(map[string]any)["prompt_tokens"].(float64))
		shared = int(req["prompt"].(map[string]any)["shared_prefix_tokens"].(float64))
		unique += prompt - shared
	}
	return unique + shared
}

func causes(ev map[string]any) []string {
	var out []string
	diags, _ := ev["diagnosis"].([]any)
	for _, d := range diags {
		out = append(out, d.(map[string]any)["cause"].(string))
	}
	return out
}

// TestRoundRobinReplayRoutedElsewhere: round-robin sends the replay to the replica that never
// saw request 0; the records name each request's replica from the counters that moved, and
// the recompute is diagnosed as routed to another replica rather than left bare.
func TestRoundRobinReplayRoutedElsewhere(t *testing.T) {
	r, ev, sequence, replay, stderr := replayOnReplicas(t, sim.RouterRoundRobin)
	from, to := replicaOf(t, sequence[0].(map[string]any)), replicaOf(t, replay)
	if !strings.HasSuffix(from, " engine=0") || !strings.HasSuffix(to, " engine=1") {
		t.Fatalf("request 0 on %q, replay on %q: want engines 0 and 1", from, to)
	}
	// The sizing holds: the original replica's share of the sequence overflowed its GPU pool
	// and fits its CPU tier, so had the replay reached it, it would have reloaded.
	if unique := uniqueTokensOn(t, sequence, from); unique <= 4096 || unique > 8192 {
		t.Fatalf("%s got %d unique tokens: want more than its 4,096-token GPU pool, within its 8,192-token CPU tier", from, unique)
	}
	if r["verdict"] != "recompute" && r["verdict"] != "partial" {
		t.Fatalf("verdict %v (%v), want recompute or partial", r["verdict"], r["verdict_reason"])
	}
	diags, _ := ev["diagnosis"].([]any)
	found := false
	for _, d := range diags {
		m := d.(map[string]any)
		if m["cause"] == "replay_routed_elsewhere" && strings.HasPrefix(m["detail"].(string), "routed to another replica: per-replica caches cannot serve it") &&
			strings.Contains(m["detail"].(string), from) && strings.Contains(m["detail"].(string), to) {
			found = true
		}
	}
	if !found {
		t.Fatalf("diagnosis %v, want replay_routed_elsewhere naming %s and %s", diags, from, to)
	}
	t.Logf("%s held %d unique tokens; replay on %s: %s (%v), diagnosis %v", from, uniqueTokensOn(t, sequence, from), to, r["verdict"], r["verdict_reason"], causes(ev))
	if !strings.Contains(stderr, "2 replicas serve this endpoint") {
		t.Errorf("preflight did not warn about the replicas:\n%s", stderr)
	}
}

// TestPrefixAffinityReplayReloads: prefix-affinity keeps the sequence and its replay on one
// replica, whose GPU pool overflowed and whose CPU tier holds request 0: a reload, attributed
// to the same replica as the original, with no routing diagnosis.
func TestPrefixAffinityReplayReloads(t *testing.T) {
	r, ev, sequence, replay, _ := replayOnReplicas(t, sim.RouterPrefixAffinity)
	for _, q := range sequence {
		if from, to := replicaOf(t, q.(map[string]any)), replicaOf(t, replay); from != to {
			t.Fatalf("a sequence request on %q, the replay on %q: affinity should keep the shared prefix together", from, to)
		}
	}
	if r["verdict"] != "cpu_reload" || len(causes(ev)) != 0 {
		t.Fatalf("verdict %v (%v), diagnosis %v", r["verdict"], r["verdict_reason"], causes(ev))
	}
}

// TestReplicaNamesRedacted: replica names carry the metrics URL, so its credentials are
// redacted in them as everywhere else in the records.
func TestReplicaNamesRedacted(t *testing.T) {
	srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.DataParallel = 2 }})
	metricsURL := srv.URL() + "/metrics?token=T0K-5678"
	out := t.TempDir()
	_, stderr, code := runJSON(t, context.Background(), "run", "smoke", "--endpoint", srv.URL()+"/v1", "--metrics", metricsURL, "--out", out)
	if code != cli.ExitOK {
		t.Fatalf("exit %d: %s", code, stderr)
	}
	dir := filepath.Join(out, onlyEntry(t, out))
	req := readArtifact(t, dir, "step-01-sequence.json")["requests"].([]any)[0].(map[string]any)
	if got := replicaOf(t, req); got != srv.URL()+"/metrics?token=REDACTED engine=0" {
		t.Errorf("replica %q", got)
	}
	entries, _ := os.ReadDir(dir)
	for _, e := range entries {
		data, _ := os.ReadFile(filepath.Join(dir, e.Name()))
		if strings.Contains(string(data), "T0K-5678") {
			t.Errorf("the token is in %s", e.Name())
		}
	}
}

// TestPlanWarnsAboutReplicas: plan on a server with several replicas says their caches are
// separate; on one replica it says nothing of the kind.
func TestPlanWarnsAboutReplicas(t *testing.T) {
	for _, n := range []int{1, 2} {
		srv := startSim(t, sim.Options{Profile: "tiny", Override: func(p *sim.Profile) { p.DataParallel = n }})
		out, errOut, code := runCLI(t, "plan", "smoke", "--endpoint", srv.URL()+"/v1")
		if code != cli.ExitOK {
			t.Fatalf("exit %d: %s", code, errOut)
		}
		warned := strings.Contains(out, "warning: 2 replicas serve this endpoint")
		if warned != (n == 2) {
			t.Errorf("%d replicas: warned %v\n%s", n, warned, out)
		}
	}
}

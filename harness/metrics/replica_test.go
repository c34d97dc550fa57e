package metrics_test

import (
	"encoding/json"
	"fmt"
	"strings"
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// engineText is a vLLM exposition with prompt tokens and prefix queries for each engine label
// (label "" leaves the engine label off).
func engineText(values map[string][2]float64) string {
	var b strings.Builder
	b.WriteString("# TYPE vllm:prompt_tokens_total counter\n# TYPE vllm:prefix_cache_queries_total counter\n")
	for engine, v := range values {
		label := `model_name="m"`
		if engine != "" {
			label = fmt.Sprintf(`engine=%q,model_name="m"`, engine)
		}
		fmt.Fprintf(&b, "vllm:prompt_tokens_total{%s} %g\nvllm:prefix_cache_queries_total{%s} %g\n", label, v[0], label, v[1])
	}
	return b.String()
}

func replicaSnap(t *testing.T, pages ...string) Snapshot {
	t.Helper()
	var exps []Exposition
	for i, p := range pages {
		exps = append(exps, mustParse(t, p, fmt.Sprintf("http://127.0.0.1:%d/metrics", 8000+i)))
	}
	return mustProfile(t, "vllm").Snapshot(exps...)
}

func TestReplicaFromEngineLabels(t *testing.T) {
	before := replicaSnap(t, engineText(map[string][2]float64{"0": {100, 100}, "1": {50, 50}}))
	after := replicaSnap(t, engineText(map[string][2]float64{"0": {100, 100}, "1": {1550, 1550}}))
	if len(before.Replicas) != 2 || before.Replicas[1].Replica != "http://127.0.0.1:8000/metrics engine=1" {
		t.Fatalf("replicas %+v", before.Replicas)
	}
	// The summed counters stay as they were: records remain comparable.
	if got := after.Counters[PromptTokens]; got.Value != 1650 || !got.Present {
		t.Fatalf("summed prompt tokens %+v", got)
	}
	a := ReplicaMoved(before, after)
	if !a.Known() || a.Replica != "http://127.0.0.1:8000/metrics engine=1" || !strings.Contains(a.By, "+1500") {
		t.Fatalf("attribution %+v", a)
	}
}

func TestReplicaFromMetricsURLs(t *testing.T) {
	one := engineText(map[string][2]float64{"0": {10, 10}})
	moved := engineText(map[string][2]float64{"0": {900, 900}})
	a := ReplicaMoved(replicaSnap(t, one, one), replicaSnap(t, moved, one))
	if a.Replica != "http://127.0.0.1:8000/metrics engine=0" {
		t.Fatalf("attribution %+v", a)
	}
	a = ReplicaMoved(replicaSnap(t, one, one), replicaSnap(t, one, moved))
	if a.Replica != "http://127.0.0.1:8001/metrics engine=0" {
		t.Fatalf("attribution %+v", a)
	}
}

func TestReplicaUnknownOrOmitted(t *testing.T) {
	base := map[string][2]float64{"0": {10, 10}, "1": {10, 10}}
	for _, c := range []struct {
		name  string
		after map[string][2]float64
		want  string
	}{
		{"none moved", base, "no replica's prompt_tokens or gpu_prefix_queries moved"},
		{"several moved", map[string][2]float64{"0": {20, 20}, "1": {30, 30}}, "several replicas' counters moved"},
		{"restart", map[string][2]float64{"0": {0, 0}, "1": {30, 30}}, "went down"},
	} {
		a := ReplicaMoved(replicaSnap(t, engineText(base)), replicaSnap(t, engineText(c.after)))
		if a.Known() || a.Replica != Unknown || !strings.Contains(a.By, c.want) {
			t.Errorf("%s: %+v, want unknown because %q", c.name, a, c.want)
		}
	}
	// One replica: nothing to attribute, and the snapshot's JSON is as it always was.
	single := replicaSnap(t, engineText(map[string][2]float64{"0": {10, 10}}))
	if a := ReplicaMoved(single, replicaSnap(t, engineText(map[string][2]float64{"0": {99, 99}}))); a != nil {
		t.Errorf("one replica attributed: %+v", a)
	}
	data, _ := json.Marshal(single)
	if strings.Contains(string(data), "replicas") {
		t.Errorf("one replica's snapshot lists replicas: %s", data)
	}
}

// Series that differ by labels other than engine (tensor-parallel ranks, finished reasons)
// belong to one replica.
func TestOtherLabelsAreNotReplicas(t *testing.T) {
	text := "# TYPE vllm:prompt_tokens_total counter\n" +
		`vllm:prompt_tokens_total{engine="0",worker_id="0"} 5` + "\n" +
		`vllm:prompt_tokens_total{engine="0",worker_id="1"} 5` + "\n"
	if s := replicaSnap(t, text); len(s.Replicas) != 0 {
		t.Errorf("ranks of one engine counted as replicas: %+v", s.Replicas)
	}
}

package metrics_test

import (
	"strings"
	"testing"

	. "github.com/anvil-serving/kvbench/harness/metrics"
)

// TestParallelismRule: one rule for every family. Tensor- and pipeline-parallel ranks of a
// replica count the same tokens (one rank is read, and ranks that disagree are flagged);
// their bytes are shards and add up; data-parallel ranks serve other requests and add up. A
// family the profile learns later (an override) follows the same rule.
func TestParallelismRule(t *testing.T) {
	text := `# TYPE x:load_back_tokens_total counter
x:load_back_tokens_total{dp_rank="0",pp_rank="0",tp_rank="0"} 11264
x:load_back_tokens_total{dp_rank="0",pp_rank="0",tp_rank="1"} 11264
x:load_back_tokens_total{dp_rank="1",pp_rank="0",tp_rank="0"} 2048
x:load_back_tokens_total{dp_rank="1",pp_rank="0",tp_rank="1"} 2048
# TYPE x:load_back_bytes_total counter
x:load_back_bytes_total{dp_rank="0",pp_rank="0",tp_rank="0"} 500
x:load_back_bytes_total{dp_rank="0",pp_rank="0",tp_rank="1"} 500
x:load_back_bytes_total{dp_rank="1",pp_rank="0",tp_rank="0"} 100
x:load_back_bytes_total{dp_rank="1",pp_rank="0",tp_rank="1"} 100
# TYPE x:evicted_tokens_total counter
x:evicted_tokens_total{pp_rank="0",tp_rank="0"} 3000
x:evicted_tokens_total{pp_rank="0",tp_rank="1"} 2990
# TYPE x:later_tokens_total counter
x:later_tokens_total{pp_rank="0",tp_rank="0"} 700
x:later_tokens_total{pp_rank="1",tp_rank="0"} 700
# TYPE x:pool_tokens gauge
x:pool_tokens{dp_rank="0",tp_rank="0"} 40000
x:pool_tokens{dp_rank="1",tp_rank="0"} 40000
`
	p := Profile{Name: "t",
		Counters: map[Counter][]Selector{
			ReloadTokens:    MustSelectors("x:load_back_tokens_total"),
			LoadBytes:       MustSelectors("x:load_back_bytes_total"),
			DeviceEvictions: MustSelectors("x:evicted_tokens_total"),
		},
		Gauges:      map[Gauge][]Selector{GPUPoolTokens: MustSelectors("x:pool_tokens")},
		Parallelism: Parallelism{Shards: []string{"tp_rank", "pp_rank"}, Replicas: []string{"dp_rank"}},
	}
	s := p.Snapshot(mustParse(t, text, "ranks"))
	if r := s.Counters[ReloadTokens]; r.Value != 11264+2048 || r.Note != "" {
		t.Errorf("tokens: %+v, want one rank per data-parallel replica, summed over replicas", r)
	}
	if r := s.Counters[LoadBytes]; r.Value != 1200 || r.Note != "" {
		t.Errorf("bytes: %+v, want every rank's shard summed", r)
	}
	if r := s.Counters[DeviceEvictions]; r.Value != 3000 || !strings.Contains(r.Note, "disagree (pp_rank=0 tp_rank=0: 3000, pp_rank=0 tp_rank=1: 2990)") {
		t.Errorf("ranks that disagree: %+v, want the largest and a note naming both", r)
	}
	if g := s.Gauges[GPUPoolTokens]; g.Value != 80000 {
		t.Errorf("pool gauge %+v, want each data-parallel replica's pool summed", g)
	}
	later, err := p.WithOverrides(map[string]string{string(StoreTokens): "x:later_tokens_total"})
	if err != nil {
		t.Fatal(err)
	}
	if r := later.Snapshot(mustParse(t, text, "ranks")).Counters[StoreTokens]; r.Value != 700 || r.Note != "" {
		t.Errorf("a family learned later: %+v, want one pipeline rank's 700", r)
	}
}

// TestRankSummedFamily: an older version's family without rank labels, which the
// multiprocess registry sums over ranks, is TP x the tokens: divided where the TP size is
// known, flagged where it is not; its bytes add up either way.
func TestRankSummedFamily(t *testing.T) {
	text := "# TYPE x:load_back_tokens_total counter\nx:load_back_tokens_total{cache_type=\"T\"} 22528\n# TYPE x:load_back_bytes_total counter\nx:load_back_bytes_total{cache_type=\"T\"} 1000\n"
	p := Profile{Name: "t",
		Counters: map[Counter][]Selector{ReloadTokens: MustSelectors("x:load_back_tokens_total"), LoadBytes: MustSelectors("x:load_back_bytes_total")},
		Parallelism: Parallelism{Shards: []string{"tp_rank"},
			RankSummed: map[string]bool{"x:load_back_tokens_total": true, "x:load_back_bytes_total": true}},
	}
	for _, c := range []struct {
		tp    int
		value float64
		note  string
	}{{0, 22528, "uncertain"}, {1, 22528, ""}, {2, 11264, "divided by 2"}} {
		p.Parallelism.TensorParallel = c.tp
		s := p.Snapshot(mustParse(t, text, "summed"))
		r := s.Counters[ReloadTokens]
		if r.Value != c.value || c.note == "" && r.Note != "" || !strings.Contains(r.Note, c.note) {
			t.Errorf("TP %d: %+v, want %v with a note containing %q", c.tp, r, c.value, c.note)
		}
		if b := s.Counters[LoadBytes]; b.Value != 1000 || b.Note != "" {
			t.Errorf("TP %d: bytes %+v, want 1000 with no note", c.tp, b)
		}
	}
	js, _ := p.Snapshot(mustParse(t, text, "summed")).Counters[ReloadTokens].MarshalJSON()
	if !strings.Contains(string(js), `"note":`) {
		t.Errorf("the note is not in the JSON: %s", js)
	}
}

package metrics_test

import (
	"bytes"
	"encoding/json"
	"flag"
	. "github.com/anvil-serving/kvbench/harness/metrics"
	"os"
	"path/filepath"
	"reflect"
	"testing"
)

var update = flag.Bool("update", false, "rewrite golden files under testdata/")

func TestReadingJSON(t *testing.T) {
	tests := []struct {
		reading Reading
		want    string
	}{
		{present(163840, "vllm:prefix_cache_hits_total"), `{"value":163840,"present":true,"source":"vllm:prefix_cache_hits_total"}`},
		{present(0, "vllm:num_preemptions_total"), `{"value":0,"present":true,"source":"vllm:num_preemptions_total"}`},
		{Reading{}, `{"value":null,"present":false}`},
	}
	for _, tt := range tests {
		got, err := json.Marshal(tt.reading)
		if err != nil {
			t.Fatal(err)
		}
		if string(got) != tt.want {
			t.Errorf("Marshal(%+v) = %s, want %s", tt.reading, got, tt.want)
		}
		var back Reading
		if err := json.Unmarshal(got, &back); err != nil || back != tt.reading {
			t.Errorf("round trip of %s = %+v, %v", got, back, err)
		}
	}
}

// The record shapes are a contract with scripts: a golden file shows every change.
func TestSnapshotJSONGolden(t *testing.T) {
	p := mustProfile(t, "vllm")
	sample := readSample(t)
	after := p.Snapshot(mustParse(t, sample, "after.prom"))
	for name, v := range map[string]any{"snapshot.json": after} {
		got, err := json.MarshalIndent(v, "", "  ")
		if err != nil {
			t.Fatal(err)
		}
		got = append(got, '\n')
		path := filepath.Join("testdata", name)
		if *update {
			if err := os.WriteFile(path, got, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		want, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (run go test -update to create it)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s differs from the golden file (go test -update to accept):\n%s", name, got)
		}
	}
	var back Snapshot
	data, _ := json.Marshal(after)
	if err := json.Unmarshal(data, &back); err != nil || !reflect.DeepEqual(back.Counters, after.Counters) {
		t.Errorf("snapshot counters do not round-trip: %v", err)
	}
}

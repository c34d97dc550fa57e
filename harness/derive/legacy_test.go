package derive

import (
	"encoding/json"
	"os"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/harness/capacity"
	"github.com/anvil-serving/kvbench/harness/metrics"
	"github.com/anvil-serving/kvbench/harness/record"
	"github.com/anvil-serving/kvbench/harness/verdict"
)

// TestV1StepArtifact: a step file written by kvbench before the record owned its schema
// (kept in runs' testdata) reads into today's types: its request spans from the old window
// shape, its step span derived again, its verdict's setup validity and interpretation rebuilt
// from the step's capacity math.
func TestV1StepArtifact(t *testing.T) {
	data, err := os.ReadFile("../runs/testdata/v1/repeated/step-02-replay.json")
	if err != nil {
		t.Fatal(err)
	}
	var a record.StepArtifact
	if err := json.Unmarshal(data, &a); err != nil {
		t.Fatal(err)
	}
	if a.Schema != record.StepSchemaV1 || a.Counters != nil || a.Samples != nil || len(a.Requests) != 1 {
		t.Fatalf("%+v", a)
	}
	q := a.Requests[0]
	if q.Counters == nil || !q.Counters.Valid || *q.Counters.Delta(metrics.GPUPrefixHits) != 1488 || *q.Counters.Delta(metrics.ExternalPrefixHits) != 0 {
		t.Fatalf("request span %+v", q.Counters)
	}
	// The record reads the capacity math onto the verdict; Assemble words it as v1 did.
	v := q.Verdict
	if v == nil || v.Verdict != verdict.GPUHit || v.SetupValid != capacity.No || v.Capacity == nil || !v.FromV1 || v.Interpretation != "" {
		t.Fatalf("verdict %+v", v)
	}
	s := Assemble(a)
	if s.Span == nil || *s.Span.Delta(metrics.GPUPrefixHits) != 1488 {
		t.Fatalf("derived span %+v", s.Span)
	}
	if v := s.Requests[0].Verdict; v.FromV1 || !strings.HasPrefix(v.Interpretation, "The replay remained in GPU cache. The sequence's") {
		t.Fatalf("assembled verdict %+v", v)
	}
	// Written again, it is today's schema with the span not repeated.
	a.Schema = record.StepSchema
	out, err := json.Marshal(a)
	if err != nil {
		t.Fatal(err)
	}
	if strings.Count(string(out), `"gpu_prefix_hits":{"before"`) != 1 {
		t.Fatalf("the span is written more than once: %s", out)
	}
}

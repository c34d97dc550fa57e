package record

import (
	"bytes"
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// goldenRuns are run directories today's kvbench wrote, kept as fixtures: the demo's
// eviction run and its control run.
var goldenRuns = []string{
	"../../internal/study/testdata/demo/eviction-6x150k-replay-20261201T060008Z",
	"../../internal/study/testdata/demo/offload8-control-20261201T060010Z",
}

// olderRuns were written by earlier kvbench versions (a prompt that repeated its index, v1's
// counter windows); they must still read.
var olderRuns = []string{
	"../../cmd/kvbench/testdata/compare/baseline",
	"../../cmd/kvbench/testdata/compare/candidate",
	"../../cmd/kvbench/testdata/compare/other-scenario",
	"../runs/testdata/v1/demo-eviction",
	"../runs/testdata/v1/repeated",
}

// TestGoldenFilesRoundTrip: every run.json and step file kvbench wrote reads into the
// record's types and writes back byte for byte, the schema's stability in one test.
func TestGoldenFilesRoundTrip(t *testing.T) {
	for _, dir := range goldenRuns {
		files, err := filepath.Glob(filepath.Join(dir, "*.json"))
		if err != nil || len(files) < 3 {
			t.Fatalf("%s: %d files, %v", dir, len(files), err)
		}
		for _, path := range files {
			data, err := os.ReadFile(path)
			if err != nil {
				t.Fatal(err)
			}
			var v any = &StepArtifact{}
			if filepath.Base(path) == "run.json" {
				v = &Run{}
			}
			if err := json.Unmarshal(data, v); err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			out, err := json.MarshalIndent(v, "", "  ")
			if err != nil {
				t.Fatalf("%s: %v", path, err)
			}
			if want := bytes.TrimSuffix(data, []byte("\n")); !bytes.Equal(out, want) {
				t.Errorf("%s does not round-trip: %s", path, firstDiff(out, want))
			}
		}
	}
}

// TestOlderFilesRead: records of earlier versions decode, with their sections under the
// steps their scenario names.
func TestOlderFilesRead(t *testing.T) {
	for _, dir := range olderRuns {
		data, err := os.ReadFile(filepath.Join(dir, "run.json"))
		if err != nil {
			t.Fatal(err)
		}
		var r Run
		if err := json.Unmarshal(data, &r); err != nil {
			t.Fatalf("%s: %v", dir, err)
		}
		if r.Schema != RunSchema || len(r.Sections) == 0 || len(r.Artifacts) == 0 || len(r.Scenario) == 0 {
			t.Fatalf("%s: schema %q, %d sections, %d artifacts", dir, r.Schema, len(r.Sections), len(r.Artifacts))
		}
		for _, a := range r.Artifacts {
			data, err := os.ReadFile(filepath.Join(dir, a.Path))
			if err != nil {
				t.Fatal(err)
			}
			var st StepArtifact
			if err := json.Unmarshal(data, &st); err != nil || !IsStepSchema(st.Schema) || len(st.Requests) == 0 {
				t.Fatalf("%s: schema %q, %d requests, %v", a.Path, st.Schema, len(st.Requests), err)
			}
			if err := st.Check(); err != nil {
				t.Errorf("%s: %v", a.Path, err)
			}
		}
	}
}

// firstDiff shows where two encodings part.
func firstDiff(got, want []byte) string {
	i := 0
	for i < len(got) && i < len(want) && got[i] == want[i] {
		i++
	}
	from := max(i-80, 0)
	return "got …" + strings.TrimSpace(string(got[from:min(i+80, len(got))])) + "…\nwant …" + strings.TrimSpace(string(want[from:min(i+80, len(want))])) + "…"
}

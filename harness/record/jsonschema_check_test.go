package record

import (
	"bufio"
	"bytes"
	"encoding/json"
	"fmt"
	"os"
	"path/filepath"
	"testing"
)

// TestJSONSchemasAreCurrent: docs/schemas holds what the record's types generate today;
// -update (or go generate) rewrites it.
func TestJSONSchemasAreCurrent(t *testing.T) {
	for _, f := range schemaFiles() {
		want, err := encodeSchema(f.schema)
		if err != nil {
			t.Fatal(err)
		}
		path := filepath.Join(schemaDir, f.file)
		if *updateSchemas {
			if err := os.MkdirAll(schemaDir, 0o755); err != nil {
				t.Fatal(err)
			}
			if err := os.WriteFile(path, want, 0o644); err != nil {
				t.Fatal(err)
			}
		}
		got, err := os.ReadFile(path)
		if err != nil {
			t.Fatalf("%v (go generate ./harness/record)", err)
		}
		if !bytes.Equal(got, want) {
			t.Errorf("%s is stale: go generate ./harness/record (%s)", path, firstDiff(got, want))
		}
	}
}

// TestRecordsValidateAgainstSchemas: the files today's kvbench wrote (the demo's run
// directories, the golden files, and its study) and each request of their step files, as a
// journal line holds it, validate against the published schemas. The schemas describe what
// kvbench writes now; older records (olderRuns) are read by the readers, not by them.
func TestRecordsValidateAgainstSchemas(t *testing.T) {
	load := func(file string) map[string]any {
		s, err := loadSchema(file)
		if err != nil {
			t.Fatal(err)
		}
		return s
	}
	step, line, run, study := load("step.schema.json"), load("journal-line.schema.json"), load("run.schema.json"), load("study.schema.json")
	check := func(s map[string]any, path string, doc any) {
		t.Helper()
		if err := validate(s, s, doc, "$"); err != nil {
			t.Errorf("%s: %v", path, err)
		}
	}
	var files int
	for _, dir := range goldenRuns {
		paths, _ := filepath.Glob(filepath.Join(dir, "*.json"))
		for _, path := range paths {
			doc := readDoc(t, path)
			if filepath.Base(path) == "run.json" {
				check(run, path, doc)
			} else {
				check(step, path, doc)
				for i, r := range doc.(map[string]any)["requests"].([]any) {
					check(line, fmt.Sprintf("%s request %d", path, i), r)
				}
			}
			files++
		}
	}
	check(study, "study.json", readDoc(t, "../../internal/study/testdata/demo/study.json"))
	if files < 6 {
		t.Fatalf("validated %d files", files)
	}
}

// TestSchemasCoverEveryStepKind: a step file of every kind, and a sweep, as the record's
// types write them, validate (the fixtures hold sequence and replay steps only); a trace or
// conversation section the schema did not know would fail here.
func TestSchemasCoverEveryStepKind(t *testing.T) {
	step, err := loadSchema("step.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	sweep, err := loadSchema("sweep.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	one := 1.0
	for _, a := range []StepArtifact{
		{Schema: StepSchema, Kind: KindConversation, Conversation: &ConversationTrace{Series: []SeriesPoint{{}}}},
		{Schema: StepSchema, Kind: KindTrace, Trace: &TraceReplay{}, Counters: &Counters{Values: map[Counter]CounterChange{"load_bytes": {Before: &one, After: &one}}}, Samples: &Samples{}},
	} {
		if err := validate(step, step, roundTrip(t, &a), "$"); err != nil {
			t.Errorf("%s step: %v", a.Kind, err)
		}
	}
	sw := Sweep{Schema: SweepSchema, Levels: []SweepLevel{SweepLevelOf(4, "users-4", "ab", StatusCompleted, &ConversationSection{}, &one)}}
	if err := validate(sweep, sweep, roundTrip(t, &sw), "$"); err != nil {
		t.Errorf("sweep: %v", err)
	}
}

// TestValidatorRefuses: the validator is no rubber stamp: a missing key, a key the type
// lacks, a wrong type, a wrong schema each fail.
func TestValidatorRefuses(t *testing.T) {
	s, err := loadSchema("step.schema.json")
	if err != nil {
		t.Fatal(err)
	}
	good := readDoc(t, filepath.Join(goldenRuns[0], "step-02-replay.json"))
	if err := validate(s, s, good, "$"); err != nil {
		t.Fatal(err)
	}
	for name, edit := range map[string]func(m map[string]any){
		"missing key":   func(m map[string]any) { delete(m, "delta_scope") },
		"unknown key":   func(m map[string]any) { m["deltaScope"] = "step" },
		"wrong type":    func(m map[string]any) { m["concurrency"] = "1" },
		"not integral":  func(m map[string]any) { m["concurrency"] = 1.5 },
		"wrong schema":  func(m map[string]any) { m["schema"] = "anvil-serving.kvbench-step/v9" },
		"nested":        func(m map[string]any) { m["requests"].([]any)[0].(map[string]any)["ordinal"] = nil },
		"nested extra":  func(m map[string]any) { m["requests"].([]any)[0].(map[string]any)["prompt"].(map[string]any)["x"] = 1 },
		"list for text": func(m map[string]any) { m["step"] = []any{} },
	} {
		doc := readDoc(t, filepath.Join(goldenRuns[0], "step-02-replay.json")).(map[string]any)
		edit(doc)
		if err := validate(s, s, doc, "$"); err == nil {
			t.Errorf("%s: validated", name)
		}
	}
}

func readDoc(t *testing.T, path string) any {
	t.Helper()
	data, err := os.ReadFile(path)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	dec := json.NewDecoder(bufio.NewReader(bytes.NewReader(data)))
	if err := dec.Decode(&doc); err != nil {
		t.Fatalf("%s: %v", path, err)
	}
	return doc
}

func roundTrip(t *testing.T, v any) any {
	t.Helper()
	data, err := json.Marshal(v)
	if err != nil {
		t.Fatal(err)
	}
	var doc any
	if err := json.Unmarshal(data, &doc); err != nil {
		t.Fatal(err)
	}
	return doc
}

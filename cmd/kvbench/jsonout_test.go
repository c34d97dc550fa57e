package main

import (
	"encoding/json"
	"os"
	"path/filepath"
	"strings"
	"testing"

	"github.com/anvil-serving/kvbench/internal/cli"
)

// TestJSONDocumentsCarryASchema: what plan and trace analyze print under --format json
// leads with its schema, and a failure under --format json is the error document on stdout
// (message, kind, place, exit code) while stderr keeps its one line.
func TestJSONDocumentsCarryASchema(t *testing.T) {
	for _, tc := range []struct {
		args   []string
		schema string
	}{
		{[]string{"plan", "eviction-6x150k-replay", "--format", "json"}, "anvil-serving.kvbench-plan/v1"},
		{[]string{"trace", "analyze", "testdata/trace-small.jsonl", "--block-tokens", "16", "--format", "json"}, "anvil-serving.kvbench-trace-analysis/v1"},
		{[]string{"trace", "size", "testdata/trace-small.jsonl", "--block-tokens", "16", "--gpu-tokens", "64", "--host", "0,1e3", "--format", "json"}, "anvil-serving.kvbench-trace-size/v1"},
	} {
		out, errOut, code := runCLI(t, tc.args...)
		var doc map[string]any
		if code != cli.ExitOK || json.Unmarshal([]byte(out), &doc) != nil {
			t.Fatalf("%v: exit %d %s\n%s", tc.args, code, errOut, out)
		}
		if doc["schema"] != tc.schema || !strings.HasPrefix(out, "{\n  \"schema\"") {
			t.Errorf("%v: schema %v, want %s first", tc.args, doc["schema"], tc.schema)
		}
	}
	bad := filepath.Join(t.TempDir(), "bad.toml")
	if err := os.WriteFile(bad, []byte("name = \"bad\"\n\n[request]\nmax_tokenz = 3\n"), 0o644); err != nil {
		t.Fatal(err)
	}
	for _, args := range [][]string{{"plan", bad, "--format", "json"}, {"trace", "analyze", "/nonexistent.jsonl", "--format=json"}} {
		out, errOut, code := runCLI(t, args...)
		var doc cli.ErrorDoc
		if err := json.Unmarshal([]byte(out), &doc); err != nil {
			t.Fatalf("%v: stdout is no JSON document: %v\n%s", args, err, out)
		}
		if code != cli.ExitUsage || doc.ExitCode != code || doc.Schema != cli.ErrorSchema || doc.Error.Kind != "bad_input" ||
			doc.Error.Message == "" || !strings.Contains(errOut, doc.Error.Message) || strings.Count(errOut, "\n") != 1 {
			t.Errorf("%v: exit %d, %+v, stderr %q", args, code, doc, errOut)
		}
		if args[0] == "plan" && !strings.HasPrefix(doc.Error.Place, bad) {
			t.Errorf("the scenario's error names no place: %+v", doc)
		}
	}
}

package main

import (
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOversizedScenarioIsBadInput: sizes no server takes are refused by validate and plan
// with the file, line and key (before any prompt is built, which ran out of memory).
func TestOversizedScenarioIsBadInput(t *testing.T) {
	file := filepath.Join(t.TempDir(), "huge.toml")
	os.WriteFile(file, []byte("[prompt]\ntoken_counting = \"estimate\"\n[[step]]\nid = \"a\"\nplanned_context_tokens = [1000000000000]\n[[step]]\nid = \"b\"\nrequests = 1000000000\nplanned_context_tokens = [500]\n"), 0o644)
	for _, cmd := range []string{"validate", "plan"} {
		_, errOut, code := runCLI(t, cmd, file)
		if code != exitUsage || !strings.Contains(errOut, "huge.toml:5: step[0].planned_context_tokens: value 0 (1000000000000) is above the ceiling") ||
			!strings.Contains(errOut, "huge.toml:8: step[1].requests: 1000000000 is above the ceiling") {
			t.Errorf("%s: exit %d %q", cmd, code, errOut)
		}
	}
}

package trace

import (
	"context"
	"os"
	"path/filepath"
	"strings"
	"testing"
)

// TestOpenNamesTheMissingDirectory: "adir/../t.jsonl" is missing because adir is, though
// t.jsonl exists; the error says which.
func TestOpenNamesTheMissingDirectory(t *testing.T) {
	dir := t.TempDir()
	if err := os.WriteFile(filepath.Join(dir, "t.jsonl"), []byte("{}\n"), 0o600); err != nil {
		t.Fatal(err)
	}
	_, err := Open(context.Background(), dir+"/adir/../t.jsonl", 512)
	if err == nil || !strings.Contains(err.Error(), "(the directory "+dir+"/adir on the way does not exist)") {
		t.Errorf("Open: %v, want it to name the missing adir", err)
	}
	_, err = Open(context.Background(), dir+"/gone.jsonl", 512)
	if err == nil || strings.Contains(err.Error(), "on the way") {
		t.Errorf("Open of a missing file in a present directory: %v, want the plain error", err)
	}
	if got := MissingDir("x.jsonl"); got != "" {
		t.Errorf("MissingDir of a bare name: %q", got)
	}
}

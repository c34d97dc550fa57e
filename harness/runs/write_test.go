package runs

import (
	"errors"
	"io/fs"
	"path/filepath"
	"strings"
	"testing"
)

// TestWriteFileErrorNamesThePathGiven: a failed write names the caller's path, never the
// hidden temp file, and keeps its cause for errors.Is.
func TestWriteFileErrorNamesThePathGiven(t *testing.T) {
	path := filepath.Join(t.TempDir(), "missing", "dir", "x.html")
	_, err := WriteFile(path, []byte("x"))
	if err == nil || !strings.Contains(err.Error(), path) || strings.Contains(err.Error(), ".tmp-") || !errors.Is(err, fs.ErrNotExist) {
		t.Fatalf("got %v; want %s named, no temp file, fs.ErrNotExist", err, path)
	}
}

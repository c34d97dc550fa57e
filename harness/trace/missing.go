package trace

import (
	"errors"
	"fmt"
	"os"
	"path/filepath"
	"strings"
)

// MissingDir returns the first directory named on the way to path that does not exist, ""
// when there is none. The system walks every name of a path in turn, so "adir/../t.jsonl"
// is missing when adir is, though t.jsonl is there.
func MissingDir(path string) string {
	parts := strings.Split(path, string(filepath.Separator))
	for i := 1; i < len(parts); i++ {
		dir := strings.Join(parts[:i], string(filepath.Separator))
		if dir == "" || parts[i-1] == "." || parts[i-1] == ".." {
			continue
		}
		if _, err := os.Stat(dir); errors.Is(err, os.ErrNotExist) {
			return dir
		}
	}
	return ""
}

// explainMissing adds to err, a path's not-exist error, the directory on the way that is
// missing, when it is not the file itself.
func explainMissing(path string, err error) error {
	if !errors.Is(err, os.ErrNotExist) {
		return err
	}
	if dir := MissingDir(path); dir != "" {
		return fmt.Errorf("%w (the directory %s on the way does not exist)", err, dir)
	}
	return err
}

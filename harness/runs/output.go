package runs

import (
	"bufio"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
)

// RecordSchemaPrefix begins the schema of every record kvbench writes (run.json, step files,
// sweep, study, accounting, verify and compare records).
const RecordSchemaPrefix = "anvil-serving."

// ErrInsideRun means a path a user named for kvbench to write lies inside a run or sweep
// directory, whose files readers check against their sha256, status and step list: a file
// added or replaced there would make the run read as changed or incomplete.
var ErrInsideRun = errors.New("inside a kvbench run directory")

// ErrIsRecord means a path a user named for kvbench to write holds a kvbench record.
var ErrIsRecord = errors.New("is a kvbench record")

// CheckOutput is the one rule for every file a user names for kvbench to write (-o, --out,
// --cpuprofile, --memprofile): it may not lie inside a run or sweep directory, and it may not
// replace a kvbench record. replace says the writer replaces a file already at path (export's
// textfile, a profile); then any other file may be replaced. Without replace, WriteFile
// refuses every existing file anyway.
func CheckOutput(path string, replace bool) error {
	if err := CheckOutputDir(filepath.Dir(path)); err != nil {
		return err
	}
	st, err := os.Lstat(path)
	if err != nil {
		return nil // nothing there (or nothing readable: the write will say why)
	}
	if st.IsDir() {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	if isRecord(path) {
		return fmt.Errorf("%s %w: kvbench never overwrites one", path, ErrIsRecord)
	}
	if !replace {
		return fmt.Errorf("%s: %w", path, fs.ErrExist)
	}
	return nil
}

// CheckOutputDir refuses a directory a user named for kvbench to write into (a file's
// directory, or run's and sweep's --out) when it or a directory above it is a run or sweep
// directory, and one that is a symbolic link to nothing or something other than a directory
// (which creating the directory would meet only after preflight, as "mkdir: file exists").
func CheckOutputDir(dir string) error {
	if st, err := os.Lstat(dir); err == nil {
		target, statErr := os.Stat(dir)
		switch {
		case st.Mode()&fs.ModeSymlink != 0 && errors.Is(statErr, fs.ErrNotExist):
			to, _ := os.Readlink(dir)
			return fmt.Errorf("%s is a symbolic link to %s, which does not exist: create that directory or name another", dir, to)
		case statErr == nil && !target.IsDir():
			return fmt.Errorf("%s is not a directory", dir)
		}
	}
	abs, err := filepath.Abs(dir)
	if err != nil {
		return nil
	}
	if real, err := filepath.EvalSymlinks(abs); err == nil {
		abs = real // a link into a run directory is that run directory
	}
	for d := abs; ; d = filepath.Dir(d) {
		if isRunDir(d, d == abs) {
			return fmt.Errorf("%s is %w %s: write elsewhere (kvbench never adds to or replaces a run's files)", dir, ErrInsideRun, d)
		}
		if filepath.Dir(d) == d {
			return nil
		}
	}
}

// isRunDir reports whether dir is a run directory (its run.json) or a sweep directory (its
// sweep.json); withArtifacts also looks for step files and journals, which mark a run
// directory whose run.json is lost (only for the directory itself, not every one above it).
func isRunDir(dir string, withArtifacts bool) bool {
	for _, name := range []string{"run.json", SweepFile} {
		if isRecord(filepath.Join(dir, name)) {
			return true
		}
	}
	if !withArtifacts {
		return false
	}
	for _, pattern := range []string{"step-*", "repeat-*-step-*"} {
		matches, _ := filepath.Glob(filepath.Join(dir, pattern))
		for _, m := range matches {
			if _, _, ok := parseArtifactName(filepath.Base(m)); ok && (strings.HasSuffix(m, journalSuffix) || isRecord(m)) {
				return true
			}
		}
	}
	return false
}

// isRecord reports whether path is a regular file holding a JSON object whose top-level
// "schema" names a kvbench record, or a step's journal.
func isRecord(path string) bool {
	st, err := os.Stat(path)
	if err != nil || !st.Mode().IsRegular() {
		return false
	}
	if _, _, ok := parseArtifactName(filepath.Base(path)); ok && strings.HasSuffix(path, journalSuffix) {
		return true
	}
	f, err := os.Open(path)
	if err != nil {
		return false
	}
	defer f.Close()
	schema, _ := topLevelSchema(bufio.NewReader(f))
	return strings.HasPrefix(schema, RecordSchemaPrefix)
}

// topLevelSchema reads a JSON object's top-level "schema" string without decoding the rest
// (a run record can be large); "" when r holds no JSON object or no such key.
func topLevelSchema(r io.Reader) (string, error) {
	dec := json.NewDecoder(r)
	if tok, err := dec.Token(); err != nil || tok != json.Delim('{') {
		return "", err
	}
	for dec.More() {
		key, err := dec.Token()
		if err != nil {
			return "", err
		}
		if key == "schema" {
			v, err := dec.Token()
			s, _ := v.(string)
			return s, err
		}
		if err := skipValue(dec); err != nil {
			return "", err
		}
	}
	return "", nil
}

// skipValue reads past one JSON value, however deeply nested.
func skipValue(dec *json.Decoder) error {
	depth := 0
	for {
		tok, err := dec.Token()
		if err != nil {
			return err
		}
		switch tok {
		case json.Delim('{'), json.Delim('['):
			depth++
		case json.Delim('}'), json.Delim(']'):
			depth--
		}
		if depth == 0 {
			return nil
		}
	}
}

// WriteOutput writes data to a file a user named, atomically and never over an existing file
// (WriteFile), after CheckOutput. It returns the sha256 of the bytes written.
func WriteOutput(path string, data []byte) (string, error) {
	if err := CheckOutput(path, false); err != nil {
		return "", err
	}
	return WriteFile(path, data)
}

// WriteOutputFrom is WriteOutput of what write streams (a generated trace, too large to hold
// in memory; write buffers): path is either absent or complete, and never an existing file.
func WriteOutputFrom(path string, write func(io.Writer) error) (string, error) {
	if err := CheckOutput(path, false); err != nil {
		return "", err
	}
	return writeNew(path, write)
}

// WriteOutputJSON is WriteOutput of v as indented JSON, as WriteJSON encodes it.
func WriteOutputJSON(path string, v any) (string, error) {
	if err := CheckOutput(path, false); err != nil {
		return "", err
	}
	return WriteJSON(path, v)
}

// ReplaceOutput writes data to a file a user named, replacing the one there (a textfile
// collector's file, rewritten each night), after CheckOutput, atomically (atomicWrite), so a
// reader never sees half a file. perm is the file's mode.
func ReplaceOutput(path string, data []byte, perm fs.FileMode) error {
	if err := CheckOutput(path, true); err != nil {
		return err
	}
	_, err := atomicWrite(path, true, perm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
	return err
}

// ReplaceOutputStream is ReplaceOutput for a file written over a long time (a CPU profile):
// what is written to the Pending lands at path only at its Commit, whole; Abort leaves path
// as it was.
func ReplaceOutputStream(path string, perm fs.FileMode) (*Pending, error) {
	if err := CheckOutput(path, true); err != nil {
		return nil, err
	}
	return createPending(path, true, perm)
}

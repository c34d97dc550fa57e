package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"errors"
	"fmt"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"strings"
	"syscall"
	"time"
)

// NewRunDir creates a fresh directory for a run under parent, named after the scenario and
// the start time; it never reuses an existing directory (a suffix is added instead).
func NewRunDir(parent, scenario string, start time.Time) (string, error) {
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("creating results directory: %w", err)
	}
	base := filepath.Join(parent, fmt.Sprintf("%s-%s", safeName(scenario), start.UTC().Format("20060102T150405Z")))
	for i := 0; i < 1000; i++ {
		dir := base
		if i > 0 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		err := os.Mkdir(dir, 0o755)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) {
			return "", fmt.Errorf("creating run directory: %w", err)
		}
	}
	return "", fmt.Errorf("creating run directory: %s-* all taken", base)
}

func safeName(s string) string {
	return strings.Map(func(r rune) rune {
		if r >= 'a' && r <= 'z' || r >= 'A' && r <= 'Z' || r >= '0' && r <= '9' || r == '-' || r == '_' || r == '.' {
			return r
		}
		return '_'
	}, s)
}

// WriteJSON writes v as indented JSON to path atomically (atomicWrite), refusing to replace
// an existing file: nothing a run measured is ever overwritten. It returns the
// sha256 of the bytes written.
func WriteJSON(path string, v any) (string, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	data = append(data, '\n')
	return WriteFile(path, data)
}

// WriteFile writes data to path atomically and never over an existing file.
func WriteFile(path string, data []byte) (string, error) {
	return writeNew(path, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

// writeNew writes what write produces to path atomically, never over an existing file, with
// the records' mode. It returns the sha256 of the bytes written.
func writeNew(path string, write func(io.Writer) error) (string, error) {
	return atomicWrite(path, false, recordPerm, write)
}

// FileSHA256 returns the sha256 of a file's bytes.
func FileSHA256(path string) (string, error) {
	data, err := os.ReadFile(path)
	if err != nil {
		return "", err
	}
	sum := sha256.Sum256(data)
	return hex.EncodeToString(sum[:]), nil
}

// CreateRunDir is NewRunDir that never leaves a run directory without its run record: the
// directory is made under a hidden temporary name, record is written into it as run.json,
// and only then is it renamed to the run's name. A kill at any point leaves either no run
// directory or one a reader can load.
func CreateRunDir(parent, scenario string, start time.Time, record any) (string, error) {
	data, err := json.MarshalIndent(record, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding run.json: %w", err)
	}
	data = append(data, '\n')
	if err := os.MkdirAll(parent, 0o755); err != nil {
		return "", fmt.Errorf("creating results directory: %w", err)
	}
	name := fmt.Sprintf("%s-%s", safeName(scenario), start.UTC().Format("20060102T150405Z"))
	// Errors name the run directory, not the hidden one it is built in.
	base := filepath.Join(parent, name)
	tmp, err := os.MkdirTemp(parent, "."+name+".creating-*")
	if err != nil {
		return "", fmt.Errorf("creating run directory %s: %w", base, withoutTempName(err))
	}
	if _, err := WriteFile(filepath.Join(tmp, "run.json"), data); err != nil {
		os.RemoveAll(tmp)
		if cause := errors.Unwrap(err); cause != nil {
			err = cause // WriteFile's message names the hidden directory
		}
		return "", fmt.Errorf("creating run directory %s: writing run.json: %w", base, withoutTempName(err))
	}
	if err := os.Chmod(tmp, 0o755); err != nil {
		os.RemoveAll(tmp)
		return "", fmt.Errorf("creating run directory %s: %w", base, withoutTempName(err))
	}
	for i := 0; i < 1000; i++ {
		dir := base
		if i > 0 {
			dir = fmt.Sprintf("%s-%d", base, i)
		}
		if _, err := os.Lstat(dir); err == nil {
			continue
		}
		err := renameDir(tmp, dir, parent)
		if err == nil {
			return dir, nil
		}
		if !errors.Is(err, fs.ErrExist) && !errors.Is(err, syscall.ENOTEMPTY) {
			os.RemoveAll(tmp)
			return "", fmt.Errorf("creating run directory %s: %w", dir, withoutTempName(err))
		}
	}
	os.RemoveAll(tmp)
	return "", fmt.Errorf("creating run directory: %s-* all taken", base)
}

// ReplaceJSON writes v to path atomically (atomicWrite), replacing the file there. Only
// run.json and sweep.json are ever replaced, and only while their run or sweep is live:
// they say how far it got. Everything measured goes through WriteJSON, which never
// replaces.
func ReplaceJSON(path string, v any) (string, error) {
	data, err := json.MarshalIndent(v, "", "  ")
	if err != nil {
		return "", fmt.Errorf("encoding %s: %w", filepath.Base(path), err)
	}
	data = append(data, '\n')
	return atomicWrite(path, true, recordPerm, func(w io.Writer) error {
		_, err := w.Write(data)
		return err
	})
}

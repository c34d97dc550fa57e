package runs

import (
	"crypto/sha256"
	"encoding/hex"
	"errors"
	"io"
	"io/fs"
	"os"
	"path/filepath"
	"testing"
)

// entries lists dir's names, so a test sees a temp file left behind.
func entries(t *testing.T, dir string) []string {
	t.Helper()
	des, err := os.ReadDir(dir)
	if err != nil {
		t.Fatal(err)
	}
	var names []string
	for _, de := range des {
		names = append(names, de.Name())
	}
	return names
}

func writeString(s string) func(io.Writer) error {
	return func(w io.Writer) error {
		_, err := io.WriteString(w, s)
		return err
	}
}

func mode(t *testing.T, path string) fs.FileMode {
	t.Helper()
	st, err := os.Stat(path)
	if err != nil {
		t.Fatal(err)
	}
	return st.Mode().Perm()
}

// TestAtomicWriteNew: a new file gets exactly the bytes, the mode asked for, the sha256 of
// its bytes, and no temp file stays beside it.
func TestAtomicWriteNew(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "step-01.json")
	sum, err := atomicWrite(path, false, recordPerm, writeString("hello\n"))
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte("hello\n"))
	if sum != hex.EncodeToString(want[:]) {
		t.Errorf("sha256 %s, want %x", sum, want)
	}
	if got, _ := os.ReadFile(path); string(got) != "hello\n" {
		t.Errorf("content %q", got)
	}
	if m := mode(t, path); m != 0o600 {
		t.Errorf("mode %v, want 0600", m)
	}
	if names := entries(t, dir); len(names) != 1 || names[0] != "step-01.json" {
		t.Errorf("directory holds %v, want only step-01.json", names)
	}
}

// TestAtomicWriteRefusesExisting: without replace an existing file is refused and keeps its
// bytes, both when it was there before the call and when it appears while the call writes
// (the link, not the check, is what refuses); no temp file stays either way.
func TestAtomicWriteRefusesExisting(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "run.json")
	if err := os.WriteFile(path, []byte("before"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := atomicWrite(path, false, recordPerm, writeString("after")); !errors.Is(err, fs.ErrExist) {
		t.Fatalf("got %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "before" {
		t.Errorf("existing file now holds %q", got)
	}

	racy := filepath.Join(dir, "racy.json")
	_, err := atomicWrite(racy, false, recordPerm, func(w io.Writer) error {
		if err := os.WriteFile(racy, []byte("other writer"), 0o600); err != nil {
			return err
		}
		_, err := io.WriteString(w, "mine")
		return err
	})
	if !errors.Is(err, fs.ErrExist) {
		t.Fatalf("file appearing mid-write: got %v, want fs.ErrExist", err)
	}
	if got, _ := os.ReadFile(racy); string(got) != "other writer" {
		t.Errorf("file that appeared mid-write now holds %q", got)
	}
	if names := entries(t, dir); len(names) != 2 {
		t.Errorf("directory holds %v, want run.json and racy.json only", names)
	}
}

// TestAtomicWriteReplaces: with replace the file there is replaced whole and takes the new
// mode (export -o rewrites its own earlier file, world-readable for a textfile collector).
func TestAtomicWriteReplaces(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "kvbench.prom")
	if err := os.WriteFile(path, []byte("old old old"), 0o600); err != nil {
		t.Fatal(err)
	}
	if _, err := atomicWrite(path, true, 0o644, writeString("new")); err != nil {
		t.Fatal(err)
	}
	if got, _ := os.ReadFile(path); string(got) != "new" {
		t.Errorf("content %q, want new", got)
	}
	if m := mode(t, path); m != 0o644 {
		t.Errorf("mode %v, want 0644", m)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only kvbench.prom", names)
	}
}

// TestAtomicWriteFailureLeavesNothing: a write that fails part-way leaves no file at path,
// the file already there untouched, and no temp file.
func TestAtomicWriteFailureLeavesNothing(t *testing.T) {
	boom := errors.New("encoder failed")
	half := func(w io.Writer) error {
		io.WriteString(w, "half a rec")
		return boom
	}
	for _, replace := range []bool{false, true} {
		dir := t.TempDir()
		path := filepath.Join(dir, "new.json")
		if _, err := atomicWrite(path, replace, recordPerm, half); !errors.Is(err, boom) {
			t.Fatalf("replace=%v: got %v, want the write's error", replace, err)
		}
		if names := entries(t, dir); len(names) != 0 {
			t.Errorf("replace=%v: directory holds %v after a failed write", replace, names)
		}
	}
	dir := t.TempDir()
	path := filepath.Join(dir, "kvbench.prom")
	if err := os.WriteFile(path, []byte("last night"), 0o644); err != nil {
		t.Fatal(err)
	}
	if _, err := atomicWrite(path, true, 0o644, half); !errors.Is(err, boom) {
		t.Fatalf("got %v, want the write's error", err)
	}
	if got, _ := os.ReadFile(path); string(got) != "last night" {
		t.Errorf("file replaced by a failed write: %q", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only kvbench.prom", names)
	}
}

// TestRecordsArePrivate: the exported writers for records, new and replaced, give mode 0600.
func TestRecordsArePrivate(t *testing.T) {
	dir := t.TempDir()
	step := filepath.Join(dir, "step.json")
	if _, err := WriteJSON(step, map[string]int{"a": 1}); err != nil {
		t.Fatal(err)
	}
	run := filepath.Join(dir, "run.json")
	for i := 0; i < 2; i++ { // created, then replaced
		if _, err := ReplaceJSON(run, map[string]int{"i": i}); err != nil {
			t.Fatal(err)
		}
	}
	for _, p := range []string{step, run} {
		if m := mode(t, p); m != 0o600 {
			t.Errorf("%s: mode %v, want 0600", filepath.Base(p), m)
		}
	}
	if _, err := WriteJSON(step, 1); !errors.Is(err, fs.ErrExist) {
		t.Errorf("WriteJSON over an existing record: got %v, want fs.ErrExist", err)
	}
}

// TestPendingStream: a streamed file is absent (or as it was) until Commit puts it in place
// whole; Abort leaves the path as it was and no temp file; a second Commit fails.
func TestPendingStream(t *testing.T) {
	dir := t.TempDir()
	path := filepath.Join(dir, "cpu.pprof")
	if err := os.WriteFile(path, []byte("last run"), 0o644); err != nil {
		t.Fatal(err)
	}
	p, err := ReplaceOutputStream(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p, "this ")
	if got, _ := os.ReadFile(path); string(got) != "last run" {
		t.Errorf("mid-stream the path holds %q, want the old file", got)
	}
	io.WriteString(p, "run")
	sum, err := p.Commit()
	if err != nil {
		t.Fatal(err)
	}
	want := sha256.Sum256([]byte("this run"))
	if got, _ := os.ReadFile(path); string(got) != "this run" || sum != hex.EncodeToString(want[:]) {
		t.Errorf("after Commit %q (sha256 %s)", got, sum)
	}
	if _, err := p.Commit(); err == nil {
		t.Error("a second Commit succeeded")
	}

	p, err = ReplaceOutputStream(path, 0o644)
	if err != nil {
		t.Fatal(err)
	}
	io.WriteString(p, "half")
	p.Abort()
	p.Abort() // twice is harmless
	if got, _ := os.ReadFile(path); string(got) != "this run" {
		t.Errorf("after Abort %q, want the committed file", got)
	}
	if names := entries(t, dir); len(names) != 1 {
		t.Errorf("directory holds %v, want only cpu.pprof", names)
	}
}
